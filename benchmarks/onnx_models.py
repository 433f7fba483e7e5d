"""Inference and load time of imported ONNX models on the CPU: ember beside onnxruntime, in one
process, interleaved, at one thread on each side and at each side's default.

Run: ``.venv/bin/python benchmarks/onnx_models.py [--quick] [--models resnet50,bert]
[--rounds 7]`` (needs torch to write the models, onnx and onnxruntime).  The models are
defined below in torch with random weights (torchvision is not needed), exported by torch's
TorchScript exporter (``dynamo=False``, opset 17) to a temporary directory, batch 1:

- ``resnet50``: ResNet-50 (bottleneck blocks 3-4-6-3), 3x224x224;
- ``densenet121``: DenseNet-121 (growth 32, blocks 6-12-24-16; BatchNorm -> Relu -> Conv),
  3x224x224;
- ``inception``: BN-Inception (Inception-v2's layout: 1x1 / 3x3 / double 3x3 / pooling
  branches, average pooling in the stride-1 modules), 3x224x224;
- ``bert``: a BERT-base-shaped encoder (12 layers, d 768, 12 heads, vocabulary 30522), 128
  tokens with an attention mask;
- ``gpt2``: a GPT-2-shaped decoder (12 layers, d 768, 12 heads, causal mask, tied LM head over
  50257 tokens), 128 tokens.

Each line prints the fastest of the rounds (the least disturbed by other jobs on a shared
machine) and the median, for ember and onnxruntime, and the ratio of the fastest (ember /
onnxruntime; lower is better, the goal is <= 1.0), after checking that both give the same
outputs.  Load time is ``ember.onnx.load(path)`` against ``onnxruntime.InferenceSession(path)``
(with its graph optimizations, at one thread), fastest of three, interleaved.

At default threads onnxruntime's session runs with spin-waiting off
(``session.intra_op.allow_spinning = 0``): its spinning workers, on by default, outlive each
run and took the cores from whatever ran next on the busy 2-core VM.  ember's helpers wait
awake for at most 1 ms after a job; the loop sleeps 3 ms between the two sides' runs so that
neither runs beside the other's leftover threads.  ember's thread count follows the BLAS's
(``threadpoolctl``), so one thread is ``threadpool_limits(1)``.

ember's GEMMs run on the OpenBLAS numpy ships, whose kernels follow ``OPENBLAS_CORETYPE``
when it is set, else the CPU it detects; the first line names the kernels in use.
onnxruntime has its own (MLAS) and is unaffected.  On the 2-core AMD EPYC VM the environment
sets ``OPENBLAS_CORETYPE=Haswell`` (AVX2 kernels); unset, OpenBLAS picks its SkylakeX
(AVX-512) kernels there, 3-4x faster for a batch-1 layer's GEMMs
(``env -u OPENBLAS_CORETYPE python benchmarks/onnx_models.py``).
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import onnxruntime as ort
import torch
from threadpoolctl import threadpool_info, threadpool_limits

import ember
import ember.onnx

nn = torch.nn
F = torch.nn.functional

#: seconds between one side's run and the other's (see the module's docstring)
_SETTLE = 0.003


# -- ResNet-50 -----------------------------------------------------------------------------------

class Bottleneck(nn.Module):
    def __init__(self, cin: int, mid: int, stride: int) -> None:
        super().__init__()
        cout = mid * 4
        self.conv1, self.bn1 = nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid)
        self.conv2 = nn.Conv2d(mid, mid, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        self.conv3, self.bn3 = nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x: Any) -> Any:
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet50(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for i, n in enumerate((3, 4, 6, 3)):
            mid = 64 * 2 ** i
            for k in range(n):
                layers.append(Bottleneck(cin, mid, 2 if i and not k else 1))
                cin = mid * 4
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, 1000)

    def forward(self, x: Any) -> Any:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# -- DenseNet-121 --------------------------------------------------------------------------------

class DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int) -> None:
        super().__init__()
        self.norm1, self.conv1 = nn.BatchNorm2d(cin), nn.Conv2d(cin, 4 * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(4 * growth)
        self.conv2 = nn.Conv2d(4 * growth, growth, 3, 1, 1, bias=False)

    def forward(self, x: Any) -> Any:
        y = self.conv1(F.relu(self.norm1(x)))
        return self.conv2(F.relu(self.norm2(y)))


class DenseNet121(nn.Module):
    def __init__(self, growth: int = 32, blocks: tuple[int, ...] = (6, 12, 24, 16)) -> None:
        super().__init__()
        c = 2 * growth
        self.stem = nn.Sequential(nn.Conv2d(3, c, 7, 2, 3, bias=False), nn.BatchNorm2d(c),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.blocks = nn.ModuleList()
        self.transitions = nn.ModuleList()
        for i, n in enumerate(blocks):
            layers = nn.ModuleList()
            for _ in range(n):
                layers.append(DenseLayer(c, growth))
                c += growth
            self.blocks.append(layers)
            if i < len(blocks) - 1:
                self.transitions.append(nn.Sequential(
                    nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c // 2, 1, bias=False),
                    nn.AvgPool2d(2, 2)))
                c //= 2
        self.norm = nn.BatchNorm2d(c)
        self.fc = nn.Linear(c, 1000)

    def forward(self, x: Any) -> Any:
        x = self.stem(x)
        for i, layers in enumerate(self.blocks):
            feats = [x]
            for layer in layers:
                feats.append(layer(torch.cat(feats, 1)))
            x = torch.cat(feats, 1)
            if i < len(self.transitions):
                x = self.transitions[i](x)
        x = F.relu(self.norm(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# -- BN-Inception (Inception-v2) ------------------------------------------------------------------

def _cbr(cin: int, cout: int, k: int, stride: int = 1, pad: int = 0) -> Any:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, pad, bias=False),
                         nn.BatchNorm2d(cout, eps=1e-3), nn.ReLU())


class InceptionModule(nn.Module):
    """1x1 | 1x1 -> 3x3 | 1x1 -> 3x3 -> 3x3 | pool -> 1x1; the stride-2 modules drop the 1x1
    and pooling-projection branches and pass the max-pooled input through."""

    def __init__(self, cin: int, c1: int, c3r: int, c3: int, d3r: int, d3: int, pool: str,
                 cp: int, stride: int = 1) -> None:
        super().__init__()
        self.stride = stride
        self.b1 = _cbr(cin, c1, 1) if stride == 1 else None
        self.b3 = nn.Sequential(_cbr(cin, c3r, 1), _cbr(c3r, c3, 3, stride, 1))
        self.bd = nn.Sequential(_cbr(cin, d3r, 1), _cbr(d3r, d3, 3, 1, 1),
                                _cbr(d3, d3, 3, stride, 1))
        self.pool = (nn.AvgPool2d(3, 1, 1) if pool == "avg" else nn.MaxPool2d(3, stride, 1))
        self.bp = _cbr(cin, cp, 1) if stride == 1 else None

    def forward(self, x: Any) -> Any:
        outs = [self.b3(x), self.bd(x)]
        if self.b1 is not None and self.bp is not None:
            outs = [self.b1(x), *outs, self.bp(self.pool(x))]
        else:
            outs.append(self.pool(x))
        return torch.cat(outs, 1)


class InceptionV2(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(_cbr(3, 64, 7, 2, 3), nn.MaxPool2d(3, 2, 1), _cbr(64, 64, 1),
                                  _cbr(64, 192, 3, 1, 1), nn.MaxPool2d(3, 2, 1))
        m = InceptionModule
        self.mods = nn.Sequential(
            m(192, 64, 64, 64, 64, 96, "avg", 32),            # 3a -> 256
            m(256, 64, 64, 96, 64, 96, "avg", 64),            # 3b -> 320
            m(320, 0, 128, 160, 64, 96, "max", 0, stride=2),  # 3c -> 576
            m(576, 224, 64, 96, 96, 128, "avg", 128),         # 4a
            m(576, 192, 96, 128, 96, 128, "avg", 128),        # 4b
            m(576, 160, 128, 160, 128, 160, "avg", 128),      # 4c -> 608
            m(608, 96, 128, 192, 160, 192, "avg", 128),       # 4d
            m(608, 0, 128, 192, 192, 256, "max", 0, stride=2),  # 4e -> 1056
            m(1056, 352, 192, 320, 160, 224, "avg", 128),     # 5a -> 1024
            m(1024, 352, 192, 320, 192, 224, "max", 128))     # 5b
        self.fc = nn.Linear(1024, 1000)

    def forward(self, x: Any) -> Any:
        x = self.mods(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# -- transformers --------------------------------------------------------------------------------

class Attention(nn.Module):
    def __init__(self, d: int, heads: int, causal: bool, block: int) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
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


class EncoderLayer(nn.Module):  # post-norm, erf GELU (BERT)
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.attn = Attention(d, heads, False, 0)
        self.ln1, self.ln2 = nn.LayerNorm(d, eps=1e-12), nn.LayerNorm(d, eps=1e-12)
        self.ff1, self.ff2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: Any, mask: Any) -> Any:
        x = self.ln1(x + self.attn(x, mask))
        return self.ln2(x + self.ff2(F.gelu(self.ff1(x))))


class Bert(nn.Module):
    def __init__(self, vocab: int = 30522, d: int = 768, heads: int = 12, layers: int = 12,
                 max_len: int = 512) -> None:
        super().__init__()
        self.word, self.position = nn.Embedding(vocab, d), nn.Embedding(max_len, d)
        self.token_type = nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d, eps=1e-12)
        self.layers = nn.ModuleList([EncoderLayer(d, heads) for _ in range(layers)])
        self.pooler = nn.Linear(d, d)

    def forward(self, ids: Any, mask: Any) -> Any:
        pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        x = self.ln(self.word(ids) + self.position(pos) + self.token_type(torch.zeros_like(ids)))
        for layer in self.layers:
            x = layer(x, mask)
        return x, torch.tanh(self.pooler(x[:, 0]))


class GPTBlock(nn.Module):  # pre-norm, tanh GELU (GPT-2)
    def __init__(self, d: int, heads: int, block: int) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, heads, True, block)
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: Any) -> Any:
        x = x + self.attn(self.ln_1(x))
        return x + self.proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, vocab: int = 50257, d: int = 768, heads: int = 12, layers: int = 12,
                 block: int = 1024) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.h = nn.ModuleList([GPTBlock(d, heads, block) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2

    def forward(self, ids: Any) -> Any:
        pos = torch.arange(0, ids.shape[1], dtype=torch.long, device=ids.device)
        x = self.wte(ids) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


# -- the runs ------------------------------------------------------------------------------------

def _image() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)}


def _tokens(vocab: int, mask: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {"ids": rng.integers(0, vocab, (1, 128)).astype(np.int64)}
    if mask:
        m = np.ones((1, 128), np.int64)
        m[:, 100:] = 0  # padding at the end, as a batch of mixed lengths would have
        out["mask"] = m
    return out


#: name -> (description, torch model, inputs)
MODELS: dict[str, tuple[str, Callable[[], Any], Callable[[], dict[str, np.ndarray]]]] = {
    "resnet50": ("ResNet-50, 1x3x224x224", ResNet50, _image),
    "densenet121": ("DenseNet-121, 1x3x224x224", DenseNet121, _image),
    "inception": ("BN-Inception (v2), 1x3x224x224", InceptionV2, _image),
    "bert": ("BERT-base encoder, 1x128 tokens", Bert, lambda: _tokens(30522, True)),
    "gpt2": ("GPT-2 (124M) decoder, 1x128 tokens", GPT2, lambda: _tokens(50257, False)),
}


def export(name: str, folder: str) -> tuple[str, dict[str, np.ndarray]]:
    _, make, inputs = MODELS[name]
    torch.manual_seed(0)
    model = make().eval()
    if name in ("resnet50", "densenet121", "inception"):
        for mod in model.modules():  # non-trivial statistics, so folding them is tested
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.1, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
                mod.weight.data.uniform_(0.5, 1.5)
                mod.bias.data.uniform_(-0.1, 0.1)
    xs = inputs()
    path = os.path.join(folder, f"{name}.onnx")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, tuple(torch.from_numpy(v) for v in xs.values()), path,
                          dynamo=False, input_names=list(xs), opset_version=17)
    return path, xs


def _session(path: str, threads: int | None) -> Any:
    so = ort.SessionOptions()
    if threads:
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
    else:  # see the module's docstring
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def _load_times(path: str, tries: int = 3) -> tuple[float, float]:
    t_em, t_rt = [], []
    with threadpool_limits(limits=1):
        for _ in range(tries):
            gc.collect()
            t0 = time.perf_counter()
            m = ember.onnx.load(path, device="cpu")
            t_em.append(time.perf_counter() - t0)
            del m
            gc.collect()
            t0 = time.perf_counter()
            s = _session(path, 1)
            t_rt.append(time.perf_counter() - t0)
            del s
    return min(t_em), min(t_rt)


def bench(name: str, folder: str, rounds: int, thread_settings: list[int | None]) -> None:
    desc = MODELS[name][0]
    t0 = time.perf_counter()
    path, xs = export(name, folder)
    print(f"\n{desc}: exported in {time.perf_counter() - t0:.1f} s "
          f"({os.path.getsize(path) / 1e6:.0f} MB)", flush=True)
    le, lr = _load_times(path)
    print(f"{'load':>16}: ember {le * 1e3:8.1f} ms   onnxruntime {lr * 1e3:8.1f} ms   "
          f"ratio {le / lr:5.2f}x", flush=True)
    m = ember.onnx.load(path, device="cpu")
    exs = [ember.tensor(v) for v in xs.values()]
    for threads in thread_settings:
        sess = _session(path, threads)
        with threadpool_limits(limits=threads):
            want = sess.run(None, xs)
            got = m(*exs)
            got = [g.numpy() for g in (got if isinstance(got, tuple) else (got,))]
            err = max(float(np.max(np.abs(g - w))) for g, w in zip(got, want, strict=True))
            scale = max(float(np.max(np.abs(w))) for w in want)
            assert err <= 2e-4 * (1 + scale), (name, err, scale)
            t_em, t_rt = [], []
            for _ in range(rounds):  # interleaved: load on the machine hits both alike
                t0 = time.perf_counter()
                out = m(*exs)
                for o in (out if isinstance(out, tuple) else (out,)):
                    o.numpy()
                t_em.append(time.perf_counter() - t0)
                time.sleep(_SETTLE)
                t0 = time.perf_counter()
                sess.run(None, xs)
                t_rt.append(time.perf_counter() - t0)
                time.sleep(_SETTLE)
        em, rt = min(t_em), min(t_rt)
        label = f"{threads} thread each" if threads else "default threads"
        print(f"{label:>16}: ember {em * 1e3:8.1f} ms (median {statistics.median(t_em) * 1e3:.1f})"
              f"   onnxruntime {rt * 1e3:8.1f} ms (median {statistics.median(t_rt) * 1e3:.1f})"
              f"   ratio {em / rt:5.2f}x   (max abs diff {err:.1e}, outputs up to {scale:.1e}; "
              "load average {:.2f})".format(os.getloadavg()[0]), flush=True)
        del sess
    os.remove(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS),
                    help=f"comma-separated, of {', '.join(MODELS)}")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--quick", action="store_true",
                    help="3 rounds, one thread only")
    ap.add_argument("--threads", default="1,default",
                    help="thread settings to run: '1', 'default' or both")
    args = ap.parse_args()
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        sys.exit(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    settings: list[int | None] = [1 if t == "1" else None for t in args.threads.split(",")]
    rounds = args.rounds
    if args.quick:
        rounds, settings = 3, [1]
    print(f"ember vs onnxruntime {ort.__version__} (torch {torch.__version__} exports, opset 17);"
          f" {os.cpu_count()} cores; fastest of {rounds} interleaved rounds; OpenBLAS kernels "
          + ", ".join(str(i.get("architecture")) for i in threadpool_info()
                      if i.get("internal_api") == "openblas")
          + f" (OPENBLAS_CORETYPE {os.environ.get('OPENBLAS_CORETYPE', 'unset')})")
    print(time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
          "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()), flush=True)
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            bench(name, folder, rounds, settings)
    print("\n" + time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
          "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
