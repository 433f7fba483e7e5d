"""Real architectures exported from PyTorch, imported by ember, against onnxruntime: with
their dynamic dims changed between calls."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch_models as tm
from onnx_oracle import assert_close, onnx, reference

import ember
import ember.onnx

torch = tm.torch


def _check(data: bytes, feeds_list: list[dict[str, np.ndarray]], device: str) -> Any:
    model = onnx.load_from_string(data)
    m = ember.onnx.load(model, device=device)
    for feeds in feeds_list:
        ref = reference(model, feeds)
        got = m(**{k: ember.tensor(v, device=device) for k, v in feeds.items()})
        assert_close(got.numpy(), ref[0], f"{device} at {[v.shape for v in feeds.values()]}")
    return m


def _img(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _randomize_bn(model: Any) -> Any:
    """Non-trivial batch-norm statistics (fresh ones are the identity)."""
    torch.manual_seed(0)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)
    return model


@pytest.fixture(scope="module")
def resnet_onnx() -> bytes:
    torch.manual_seed(0)
    model = _randomize_bn(tm.ResNet())
    return tm.export(model, (torch.randn(1, 3, 32, 32),), ["x"], {"x": {0: "batch"}}, 17)


def test_resnet(resnet_onnx: bytes, device: str) -> None:
    m = _check(resnet_onnx, [{"x": _img(2, 3, 32, 32)}, {"x": _img(3, 3, 32, 32, seed=1)}],
               device)
    names = dict(m.named_parameters())
    assert "layer1.0.conv1.weight" in names or any(k.startswith("onnx__Conv") for k in names)


def test_mobilenet_v3(device: str) -> None:
    torch.manual_seed(1)
    model = _randomize_bn(tm.MobileNetV3())
    data = tm.export(model, (torch.randn(1, 3, 32, 32),), ["x"], {"x": {0: "batch"}}, 17)
    _check(data, [{"x": _img(2, 3, 32, 32)}, {"x": _img(1, 3, 32, 32, seed=1)}], device)


def test_unet_with_conv_transpose_and_resize(device: str) -> None:
    torch.manual_seed(2)
    model = _randomize_bn(tm.UNet())
    data = tm.export(model, (torch.randn(1, 1, 16, 16),), ["x"],
                     {"x": {0: "batch", 2: "h", 3: "w"}}, 17)
    names = {n.op_type for n in onnx.load_from_string(data).graph.node}
    assert {"ConvTranspose", "Resize"} <= names
    _check(data, [{"x": _img(2, 1, 16, 16)}, {"x": _img(1, 1, 24, 32, seed=1)}], device)


@pytest.mark.parametrize("opset", [13, 17])
def test_bert_encoder(opset: int, device: str) -> None:
    torch.manual_seed(3)
    model = tm.Bert()
    ids = torch.randint(0, 50, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    data = tm.export(model, (ids, mask), ["ids", "mask"],
                     {"ids": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"}}, opset)
    ops = {n.op_type for n in onnx.load_from_string(data).graph.node}
    # opset 13 has no LayerNormalization: torch writes its decomposition
    assert ("LayerNormalization" in ops) == (opset >= 17)
    rng = np.random.default_rng(4)
    feeds = []
    for b, s in [(2, 7), (3, 12)]:
        m = np.ones((b, s), np.int64)
        m[0, s - 3:] = 0  # padding in the first sequence
        feeds.append({"ids": rng.integers(0, 50, (b, s)).astype(np.int64), "mask": m})
    _check(data, feeds, device)


@pytest.mark.parametrize("opset", [14, 20])
def test_gpt2_decoder_dynamic_sequence(opset: int, device: str) -> None:
    torch.manual_seed(5)
    model = tm.GPT2()
    data = tm.export(model, (torch.randint(0, 64, (1, 9)),), ["ids"],
                     {"ids": {0: "batch", 1: "seq"}}, opset)
    rng = np.random.default_rng(6)
    feeds = [{"ids": rng.integers(0, 64, (b, s)).astype(np.int64)}
             for b, s in [(1, 9), (2, 5), (1, 17)]]
    _check(data, feeds, device)


@pytest.fixture(scope="module")
def dynamo_graphs() -> dict[str, bytes]:
    torch.manual_seed(7)
    batch = torch.export.Dim("batch", min=1, max=64)
    seq = torch.export.Dim("seq", min=2, max=32)
    return {
        "gpt2": tm.export_dynamo(tm.GPT2(), (torch.randint(0, 64, (2, 9)),),
                                 ({0: batch, 1: seq},)),
        "mobilenet": tm.export_dynamo(_randomize_bn(tm.MobileNetV3()),
                                      (torch.randn(2, 3, 32, 32),), ({0: batch},)),
    }


def test_graphs_of_torchs_dynamo_exporter(dynamo_graphs: dict[str, bytes], device: str) -> None:
    rng = np.random.default_rng(8)
    _check(dynamo_graphs["gpt2"], [{"ids": rng.integers(0, 64, (b, s)).astype(np.int64)}
                                   for b, s in [(2, 9), (3, 5)]], device)
    _check(dynamo_graphs["mobilenet"], [{"x": _img(3, 3, 32, 32, seed=9)}], device)
