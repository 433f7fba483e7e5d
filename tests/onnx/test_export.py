"""ember.onnx.export: the guide CNN, a transformer encoder and an imported-then-exported model
run in onnxruntime with ember's outputs."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch_models as tm
from onnx_oracle import assert_close, onnx, reference

import ember
import ember.onnx
from ember import nn

torch = tm.torch
ROOT = Path(__file__).resolve().parents[2]


def _export_and_compare(model: nn.Module, inputs: list[ember.Tensor], path: Path) -> None:
    was = model.training
    model.eval()
    with ember.no_grad():
        want = model(*inputs)
    model.train(was)
    want = want if isinstance(want, tuple) else (want,)
    ember.onnx.export(model, inputs, path)
    proto = onnx.load(str(path))
    assert proto.opset_import[0].version == 18
    feeds = {i.name: t.numpy() for i, t in zip(proto.graph.input, inputs, strict=True)}
    got = reference(proto, feeds)
    for g, w in zip(got, want, strict=True):
        assert_close(g, w.numpy(), f"onnxruntime on {path.name}")


def test_guide_cnn_exports(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "examples" / "guide"))
    try:
        from model import GuideCNN
    finally:
        sys.path.remove(str(ROOT / "examples" / "guide"))
    ember.manual_seed(0)
    model = GuideCNN().train()  # export traces in eval mode and restores the mode
    x = ember.randn((4, 1, 8, 8))
    _export_and_compare(model, [x], tmp_path / "guide.onnx")
    assert model.training
    names = {t.name for t in onnx.load(str(tmp_path / "guide.onnx")).graph.initializer}
    assert set(model.state_dict()) <= names


def test_transformer_encoder_exports(tmp_path: Path) -> None:
    ember.manual_seed(1)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.1, batch_first=True,
                                       activation="gelu")
    model = nn.TransformerEncoder(layer, 2)
    x = ember.randn((2, 5, 16))
    _export_and_compare(model, [x], tmp_path / "encoder.onnx")


def test_causal_attention_and_layer_norm_without_affine_export(tmp_path: Path) -> None:
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(8, elementwise_affine=False)
            self.up = nn.Conv2d(2, 2, 3, padding=1)

        def forward(self, q: ember.Tensor, img: ember.Tensor) -> tuple[ember.Tensor, ...]:
            a = nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
            pooled = nn.functional.avg_pool2d(self.up(img), 2)
            up = nn.functional.interpolate(pooled, scale_factor=2.0, mode="bilinear")
            return self.norm(a).softmax(-1), up.amax(1), (img.var(1) + img.flip(2)).cumsum(-1)

    ember.manual_seed(2)
    _export_and_compare(Block(), [ember.randn((1, 2, 6, 8)), ember.randn((1, 2, 6, 8))],
                        tmp_path / "block.onnx")


def test_imported_model_round_trips(tmp_path: Path) -> None:
    torch.manual_seed(3)
    data = tm.export(tm.ResNet(width=4, blocks=(1, 1)), (torch.randn(1, 3, 16, 16),), ["x"],
                     {}, 17)
    first = onnx.load_from_string(data)
    m = ember.onnx.load(first)
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    ember.onnx.export(m, [ember.tensor(x)], tmp_path / "again.onnx")
    again = onnx.load(str(tmp_path / "again.onnx"))
    assert_close(reference(again, {"input": x})[0], reference(first, {"x": x})[0],
                 "re-exported ResNet in onnxruntime")
    # the parameters keep their graph names through the round trip
    assert {t.name for t in again.graph.initializer} >= set(dict(m.named_parameters()))


def _run_at(path: Path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    return reference(onnx.load(str(path)), feeds)[0]


def test_dynamic_batch_exports_run_at_other_batch_sizes(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "examples" / "guide"))
    try:
        from model import GuideCNN
    finally:
        sys.path.remove(str(ROOT / "examples" / "guide"))
    ember.manual_seed(4)
    cnn = GuideCNN().eval()
    ember.onnx.export(cnn, ember.randn((2, 1, 8, 8)), tmp_path / "cnn.onnx", dynamic_batch=True)
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 32, batch_first=True), 1)
    encoder.eval()
    ember.onnx.export(encoder, ember.randn((2, 5, 16)), tmp_path / "enc.onnx",
                      dynamic_batch=True)
    dims = onnx.load(str(tmp_path / "enc.onnx")).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["batch", 5, 16]
    for batch in (1, 7):
        x = ember.randn((batch, 1, 8, 8))
        with ember.no_grad():
            assert_close(_run_at(tmp_path / "cnn.onnx", {"input": x.numpy()}), cnn(x).numpy(),
                         f"guide CNN at batch {batch}")
            s = ember.randn((batch, 5, 16))
            assert_close(_run_at(tmp_path / "enc.onnx", {"input": s.numpy()}),
                         encoder(s).numpy(), f"encoder at batch {batch}")


def test_dynamic_batch_refuses_what_it_cannot_express(tmp_path: Path) -> None:
    with pytest.raises(NotImplementedError, match=r"full at .*test_export.py.*follow the batch"):
        ember.onnx.export(lambda x: x + ember.zeros((x.shape[0], 3)), [ember.randn((2, 3))],
                          tmp_path / "z.onnx", dynamic_batch=True)


def test_ops_without_an_onnx_form_are_named(tmp_path: Path) -> None:
    with pytest.raises(NotImplementedError, match=r"op 'sort' at .*test_export.py.*has no ONNX"):
        ember.onnx.export(lambda x: x.sort().values * 2, [ember.randn((3,))],
                          tmp_path / "sort.onnx")
    with pytest.raises(ValueError, match="fusion"):
        ember.onnx.export(lambda x: x * 2, [ember.randn((3,), device="fusion<cpu>")],
                          tmp_path / "f.onnx")
