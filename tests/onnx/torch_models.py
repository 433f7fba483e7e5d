"""Small versions of standard architectures, defined in torch (torchvision is not available),
exported to ONNX by torch's TorchScript exporter (``dynamo=False``: it needs no onnxscript)."""

from __future__ import annotations

import io
import math
import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional


def export(model: Any, args: tuple[Any, ...], names: list[str],
           dynamic: dict[str, dict[int, str]], opset: int) -> bytes:
    model.eval()
    buf = io.BytesIO()
    with warnings.catch_warnings():  # the TorchScript exporter's deprecation notices
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, buf, dynamo=False, input_names=names,
                          output_names=["out"], dynamic_axes=dynamic, opset_version=opset)
    return buf.getvalue()


def export_dynamo(model: Any, args: tuple[Any, ...], dynamic_shapes: tuple[Any, ...]) -> bytes:
    """The same through torch's default exporter (torch.export + onnxscript; opset 20 here)."""
    pytest.importorskip("onnxscript")
    import logging

    model.eval()
    quiet = logging.getLogger("torch.onnx")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(model, args, dynamo=True, dynamic_shapes=dynamic_shapes,
                                        verbose=False)
    finally:
        quiet.setLevel(level)
    return bytes(program.model_proto.SerializeToString())


# -- ResNet --------------------------------------------------------------------------------------

class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x: Any) -> Any:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    """ResNet-18's layout (stem, four stages of basic blocks, pooling, fc), narrower."""

    def __init__(self, width: int = 8, blocks: tuple[int, ...] = (2, 2, 2, 2),
                 classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], width
        for i, n in enumerate(blocks):
            cout = width * 2 ** i
            stage = [BasicBlock(cin, cout, 1 if i == 0 else 2)]
            stage += [BasicBlock(cout, cout, 1) for _ in range(n - 1)]
            layers.append(nn.Sequential(*stage))
            cin = cout
        self.stages = len(layers)
        for i, stage in enumerate(layers, 1):
            setattr(self, f"layer{i}", stage)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: Any) -> Any:
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        for i in range(1, self.stages + 1):
            x = getattr(self, f"layer{i}")(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


# -- MobileNetV3 (inverted residuals, depthwise convs, hard-swish, squeeze-excitation) ----------

class SqueezeExcite(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(c, max(c // 4, 4), 1)
        self.fc2 = nn.Conv2d(max(c // 4, 4), c, 1)

    def forward(self, x: Any) -> Any:
        s = F.adaptive_avg_pool2d(x, 1)
        return x * F.hardsigmoid(self.fc2(F.relu(self.fc1(s))))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, expand: int, stride: int, se: bool,
                 act: Any) -> None:
        super().__init__()
        mid = cin * expand
        layers: list[Any] = [nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), act(),
                             nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False),
                             nn.BatchNorm2d(mid), act()]
        if se:
            layers.append(SqueezeExcite(mid))
        layers += [nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: Any) -> Any:
        y = self.block(x)
        return x + y if self.residual else y


class MobileNetV3(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8),
                                  nn.Hardswish())
        self.blocks = nn.Sequential(
            InvertedResidual(8, 8, 2, 1, False, nn.ReLU6),     # MobileNetV2-style, ReLU6
            InvertedResidual(8, 12, 3, 2, True, nn.ReLU),
            InvertedResidual(12, 12, 3, 1, True, nn.Hardswish),
            InvertedResidual(12, 16, 4, 2, True, nn.Hardswish))
        self.head = nn.Sequential(nn.Conv2d(16, 32, 1), nn.Hardswish())
        self.classifier = nn.Sequential(nn.Linear(32, 24), nn.Hardswish(), nn.Dropout(0.2),
                                        nn.Linear(24, classes))

    def forward(self, x: Any) -> Any:
        x = self.head(self.blocks(self.stem(x)))
        return self.classifier(x.mean((2, 3)))


# -- U-Net (ConvTranspose up, Resize up, skip concatenations) -----------------------------------

class UNet(nn.Module):
    def __init__(self, c: int = 4) -> None:
        super().__init__()
        def block(cin: int, cout: int) -> Any:
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout),
                                 nn.ReLU(), nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU())
        self.enc1, self.enc2, self.mid = block(1, c), block(c, 2 * c), block(2 * c, 4 * c)
        self.up2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2)
        self.dec2 = block(4 * c, 2 * c)
        self.dec1 = block(3 * c, c)
        self.out = nn.Conv2d(c, 2, 1)

    def forward(self, x: Any) -> Any:
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        m = self.mid(F.max_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([self.up2(m), e2], 1))
        up = F.interpolate(d2, scale_factor=2.0, mode="bilinear", align_corners=False)
        return self.out(self.dec1(torch.cat([up, e1], 1)))


# -- BERT-style encoder -------------------------------------------------------------------------

class SelfAttention(nn.Module):
    def __init__(self, d: int, heads: int, causal: bool = False, block: int = 64) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        if causal:
            self.register_buffer("bias", torch.tril(torch.ones(block, block)).view(
                1, 1, block, block))

    def forward(self, x: Any, mask: Any = None) -> Any:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        if self.causal:
            att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        if mask is not None:
            att = att + (1.0 - mask[:, None, None, :].to(att.dtype)) * -10000.0
        y = att.softmax(-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, d))


class EncoderLayer(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.attn = SelfAttention(d, heads)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff1, self.ff2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: Any, mask: Any) -> Any:
        x = self.ln1(x + self.attn(x, mask))
        return self.ln2(x + self.ff2(F.gelu(self.ff1(x))))


class Bert(nn.Module):
    def __init__(self, vocab: int = 50, d: int = 32, heads: int = 4, layers: int = 2,
                 max_len: int = 64) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab, d)
        self.position = nn.Embedding(max_len, d)
        self.token_type = nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d)
        self.layers = nn.ModuleList([EncoderLayer(d, heads) for _ in range(layers)])
        self.pooler = nn.Linear(d, d)

    def forward(self, ids: Any, mask: Any) -> Any:
        pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        x = self.ln(self.word(ids) + self.position(pos) + self.token_type(torch.zeros_like(ids)))
        for layer in self.layers:
            x = layer(x, mask)
        return torch.tanh(self.pooler(x[:, 0]))


# -- GPT-2-style decoder ------------------------------------------------------------------------

class GPTBlock(nn.Module):
    def __init__(self, d: int, heads: int, block: int) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = SelfAttention(d, heads, causal=True, block=block)
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: Any) -> Any:
        x = x + self.attn(self.ln_1(x))
        return x + self.proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, vocab: int = 64, d: int = 32, heads: int = 4, layers: int = 2,
                 block: int = 32) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.h = nn.ModuleList([GPTBlock(d, heads, block) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2

    def forward(self, ids: Any) -> Any:
        t = ids.shape[1]
        pos = torch.arange(0, t, dtype=torch.long, device=ids.device)
        x = self.wte(ids) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))
