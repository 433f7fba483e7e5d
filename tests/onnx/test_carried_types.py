"""ONNX element types ember carries in a wider dtype (`ember.onnx._carried`): UINT16, UINT32,
UINT64 (below 2**63), INT4/UINT4/INT2/UINT2, the float8 kinds, FLOAT4E2M1: graphs run through
`ember.onnx.backend` (narrow numpy arrays in and out) against onnxruntime, bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx_oracle import reference

import ember.onnx
import ember.onnx.backend as backend

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

RNG = np.random.default_rng(5)


def _model(nodes: list[Any], inputs: dict[str, np.ndarray], outputs: list[tuple[str, int]],
           opset: int) -> Any:
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for k, v in inputs.items()]
    outs = [helper.make_tensor_value_info(k, t, None) for k, t in outputs]
    g = helper.make_graph(nodes, "carried", ins, outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _same(model: Any, feeds: dict[str, np.ndarray], device: str) -> None:
    want = reference(model, feeds)
    got = backend.prepare(model, device).run(feeds)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if w.dtype == np.uint8 and g.dtype.itemsize == 1 and g.dtype.kind == "V":
            g = g.view(np.uint8)  # onnxruntime hands float8 out as its bytes
        assert g.dtype == w.dtype, (i, g.dtype, w.dtype)
        assert g.shape == w.shape, (i, g.shape, w.shape)
        # bit for bit (NaNs included)
        assert g.tobytes() == w.tobytes(), (i, g, w)


def test_uint16_arithmetic_wraps(device: str) -> None:
    a = RNG.integers(0, 65536, (3, 5)).astype(np.uint16)
    b = RNG.integers(1, 65536, (3, 5)).astype(np.uint16)
    nodes = [helper.make_node(op, ["a", "b"], [op.lower()]) for op in
             ("Add", "Sub", "Mul", "Div")]
    nodes.append(helper.make_node("Less", ["a", "b"], ["less"]))
    outs = [(op.lower(), TensorProto.UINT16) for op in ("Add", "Sub", "Mul", "Div")]
    _same(_model(nodes, {"a": a, "b": b}, [*outs, ("less", TensorProto.BOOL)], 14),
          {"a": a, "b": b}, device)


def test_uint32_shift_and_sum(device: str) -> None:
    a = RNG.integers(0, 2**32, (4, 3), dtype=np.uint64).astype(np.uint32)
    s = RNG.integers(0, 31, (4, 3)).astype(np.uint32)
    nodes = [helper.make_node("BitShift", ["a", "s"], ["left"], direction="LEFT"),
             helper.make_node("BitShift", ["a", "s"], ["right"], direction="RIGHT"),
             helper.make_node("Add", ["a", "a"], ["twice"]),
             helper.make_node("Cast", ["a"], ["f"], to=TensorProto.DOUBLE)]
    outs = [("left", TensorProto.UINT32), ("right", TensorProto.UINT32),
            ("twice", TensorProto.UINT32), ("f", TensorProto.DOUBLE)]
    _same(_model(nodes, {"a": a, "s": s}, outs, 14), {"a": a, "s": s}, device)


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("to", [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2])
def test_float8_casts_round_trip(to: int, saturate: int, device: str) -> None:
    x = np.concatenate([RNG.standard_normal(20) * 30, [1e6, -1e6, 0.0, 3e-3]]).astype(
        np.float32)
    nodes = [helper.make_node("Cast", ["x"], ["q"], to=to, saturate=saturate),
             helper.make_node("Cast", ["q"], ["back"], to=TensorProto.FLOAT)]
    # onnxruntime returns E4M3FN as bytes and no E5M2 at all: that one is seen through "back"
    outs = [("q", to)] if to == TensorProto.FLOAT8E4M3FN else []
    _same(_model(nodes, {"x": x}, [*outs, ("back", TensorProto.FLOAT)], 19), {"x": x},
          device)


def test_int4_quantize_dequantize(device: str) -> None:
    x = (RNG.standard_normal((3, 8)) * 6).astype(np.float32)
    zp = helper.make_tensor("zp", TensorProto.INT4, [], [1])
    nodes = [helper.make_node("Constant", [], ["z"], value=zp),
             helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
             helper.make_node("Constant", [], ["s"], value=helper.make_tensor(
                 "s", TensorProto.FLOAT, [], [0.7]))]
    nodes = [nodes[0], nodes[3], nodes[1], nodes[2]]
    _same(_model(nodes, {"x": x}, [("y", TensorProto.FLOAT)], 21), {"x": x}, device)
    q = backend.prepare(_model(nodes, {"x": x}, [("q", TensorProto.INT4)], 21),
                        device).run({"x": x})[0]
    want = np.clip(np.rint(x / np.float32(0.7)) + 1, -8, 7)
    assert q.dtype.name == "int4" and np.array_equal(q.astype(np.float32), want)


def test_float8_dequantize_per_axis(device: str) -> None:
    x = (RNG.standard_normal((2, 3, 4)) * 10).astype(np.float32)
    s = np.array([0.5, 2.0, 0.1], np.float32)
    nodes = [helper.make_node("Cast", ["x"], ["q"], to=TensorProto.FLOAT8E4M3FN),
             helper.make_node("DequantizeLinear", ["q", "s"], ["y"], axis=1)]
    _same(_model(nodes, {"x": x, "s": s}, [("y", TensorProto.FLOAT)], 21), {"x": x, "s": s},
          device)


def test_the_module_returns_the_carrier() -> None:
    """`ember.onnx.load` hands out the carrier (int32 for UINT16) and names the type."""
    a = np.array([65535, 1], np.uint16)
    node = helper.make_node("Add", ["a", "a"], ["y"])
    m = ember.onnx.load(_model([node], {"a": a}, [("y", TensorProto.UINT16)], 14))
    assert m.carried == [TensorProto.UINT16]
    y = m(a)
    assert y.dtype == ember.int32 and y.tolist() == [65534, 2]


def test_uint64_below_2_63_exact_and_beyond_an_error(device: str) -> None:
    a = RNG.integers(0, 2**40, (3, 4)).astype(np.uint64)
    b = RNG.integers(1, 2**20, (3, 4)).astype(np.uint64)
    nodes = [helper.make_node(op, ["a", "b"], [op.lower()]) for op in
             ("Add", "Mul", "Div", "Mod")]
    nodes.append(helper.make_node("Greater", ["a", "b"], ["gt"]))
    outs = [(op.lower(), TensorProto.UINT64) for op in ("Add", "Mul", "Div", "Mod")]
    _same(_model(nodes, {"a": a, "b": b}, [*outs, ("gt", TensorProto.BOOL)], 14),
          {"a": a, "b": b}, device)
    big = np.array([2**63, 1], np.uint64)
    add = _model([helper.make_node("Add", ["a", "a"], ["y"])], {"a": big},
                 [("y", TensorProto.UINT64)], 14)
    with pytest.raises(OverflowError, match="2\\*\\*63"):
        backend.prepare(add, device).run({"a": big})
    small = np.array([1, 2], np.uint64)
    sub = _model([helper.make_node("Sub", ["a", "b"], ["y"])], {"a": small, "b": small[::-1]},
                 [("y", TensorProto.UINT64)], 14)
    with pytest.raises(OverflowError, match="wrapped"):  # 1 - 2 wraps in UINT64
        backend.prepare(sub, device).run({"a": small, "b": small[::-1].copy()})


def _same_strings(model: Any, feeds: dict[str, np.ndarray], device: str) -> None:
    want = reference(model, feeds)
    got = backend.prepare(model, device).run(feeds)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype.kind == w.dtype.kind, (g, w)
        assert g.tolist() == w.tolist()


def test_string_ops_match_onnxruntime(device: str) -> None:
    """Strings stay numpy object arrays on the host: normalizer, split, concat, regex, Equal."""
    words = np.array(["Monday", "tuesday", "été", "the", "THE sun"], dtype=object)
    other = np.array(["day", "x", "", "y", "z"], dtype=object)
    nodes = [helper.make_node("StringNormalizer", ["w"], ["n"], case_change_action="LOWER",
                              stopwords=["the"], locale="C"),
             helper.make_node("StringSplit", ["w"], ["parts", "count"], delimiter="a"),
             helper.make_node("StringConcat", ["w", "o"], ["cat"]),
             helper.make_node("RegexFullMatch", ["w"], ["match"], pattern=r"[a-z]+day"),
             helper.make_node("Equal", ["w", "o"], ["eq"])]
    outs = [("n", TensorProto.STRING), ("parts", TensorProto.STRING),
            ("count", TensorProto.INT64), ("cat", TensorProto.STRING),
            ("match", TensorProto.BOOL), ("eq", TensorProto.BOOL)]
    _same_strings(_model(nodes, {"w": words, "o": other}, outs, 20), {"w": words, "o": other},
                  device)


def test_a_string_input_takes_strings_only() -> None:
    words = np.array(["a", "b"], dtype=object)
    node = helper.make_node("StringConcat", ["w", "w"], ["y"])
    m = ember.onnx.load(_model([node], {"w": words}, [("y", TensorProto.STRING)], 20))
    assert m(np.array(["x", "y"])).tolist() == ["xx", "yy"]
    with pytest.raises(TypeError, match="expected strings"):
        m(np.array([1.0, 2.0], np.float32))
