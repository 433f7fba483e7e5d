"""Subgraphs (If, Loop, Scan, SequenceMap), sequences and optionals against onnxruntime."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto
from onnx_oracle import assert_close, helper, numpy_helper, ort

import ember
import ember.onnx

RNG = np.random.default_rng(3)
FLOAT = TensorProto.FLOAT

#: the operators these tests cover (test_ops checks that every supported op has a case)
COVERED = {"If", "Loop", "Scan", "SequenceMap", "SequenceEmpty", "SequenceConstruct",
           "SequenceAt", "SequenceErase", "SequenceInsert", "SequenceLength",
           "SplitToSequence", "ConcatFromSequence", "Optional", "OptionalHasElement",
           "OptionalGetElement"}


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], opset: int = 17,
           inits: dict[str, np.ndarray] | None = None) -> Any:
    init = [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()]
    g = helper.make_graph(nodes, "g", inputs, outputs, init)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _t(name: str, dtype: int = FLOAT, shape: Any = None) -> Any:
    return helper.make_tensor_value_info(name, dtype, shape)


def _seq(name: str, dtype: int = FLOAT) -> Any:
    return helper.make_tensor_sequence_value_info(name, dtype, None)


def reference(model: Any, feeds: dict[str, Any]) -> list[Any]:
    """onnxruntime's outputs, sequences kept as lists."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    return list(sess.run(None, feeds))


def _compare(model: Any, feeds: dict[str, Any], device: str) -> None:
    ref = reference(model, feeds)
    m = ember.onnx.load(model, device=device)
    out = m(**{k: (v if isinstance(v, list) else ember.tensor(v, device=device))
               for k, v in feeds.items()})
    got = out if isinstance(out, tuple) else (out,)
    assert len(got) == len(ref)
    for i, (g, r) in enumerate(zip(got, ref, strict=True)):
        if isinstance(r, list):
            assert isinstance(g, list) and len(g) == len(r), f"output {i}: {g!r} vs {r!r}"
            for j, (ge, re) in enumerate(zip(g, r, strict=True)):
                assert_close(ge.numpy(), np.asarray(re), f"output {i}[{j}] on {device}")
        else:
            assert_close(g.numpy(), np.asarray(r), f"output {i} on {device}")


def test_if_reads_outer_values_and_picks_a_branch(device: str) -> None:
    then = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["t"])], "then", [],
                             [_t("t")])
    other = helper.make_graph([helper.make_node("Sub", ["x", "w"], ["e"])], "else", [],
                              [_t("e")])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)
    model = _model([node], [_t("c", TensorProto.BOOL, []), _t("x", FLOAT, [3, 4])],
                   [_t("y")], inits={"w": RNG.standard_normal((4,)).astype(np.float32)})
    for c in (True, False):
        _compare(model, {"c": np.array(c), "x": RNG.standard_normal((3, 4)).astype(
            np.float32)}, device)


def test_loop_carries_state_stacks_scan_outputs_and_stops_on_condition(device: str) -> None:
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x"], ["s_out"]),
         helper.make_node("Cast", ["i"], ["fi"], to=FLOAT),
         helper.make_node("Mul", ["s_out", "fi"], ["scan"]),
         helper.make_node("ReduceSum", ["s_out"], ["tot"], keepdims=0),
         helper.make_node("Less", ["tot", "lim"], ["c_out"])],
        "body", [_t("i", TensorProto.INT64, []), _t("c", TensorProto.BOOL, []),
                 _t("s_in", FLOAT, [3])],
        [_t("c_out", TensorProto.BOOL, []), _t("s_out", FLOAT, [3]), _t("scan", FLOAT, [3])])
    node = helper.make_node("Loop", ["m", "", "s0"], ["s", "scans"], body=body)
    model = _model([node], [_t("m", TensorProto.INT64, []), _t("s0", FLOAT, [3]),
                            _t("x", FLOAT, [3])], [_t("s"), _t("scans")],
                   inits={"lim": np.array(9.0, np.float32)})
    x = np.array([0.5, 1.0, 1.5], np.float32)
    _compare(model, {"m": np.array(10, np.int64), "s0": np.zeros(3, np.float32), "x": x},
             device)
    _compare(model, {"m": np.array(2, np.int64), "s0": np.zeros(3, np.float32), "x": x},
             device)


@pytest.mark.parametrize("directions", [(0, 0), (1, 0)])
def test_scan_runs_over_axes_and_directions(device: str, directions: tuple[int, int]) -> None:
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "a"], ["acc_out"]),
         helper.make_node("Mul", ["acc_out", "b"], ["y"])],
        "body", [_t("acc", FLOAT, [2]), _t("a", FLOAT, [2]), _t("b", FLOAT, [2])],
        [_t("acc_out", FLOAT, [2]), _t("y", FLOAT, [2])])
    node = helper.make_node("Scan", ["init", "xa", "xb"], ["final", "ys"], body=body,
                            num_scan_inputs=2, scan_input_axes=[0, 1],
                            scan_input_directions=list(directions), scan_output_axes=[1],
                            scan_output_directions=[directions[0]])
    model = _model([node], [_t("init", FLOAT, [2]), _t("xa", FLOAT, [5, 2]),
                            _t("xb", FLOAT, [2, 5])], [_t("final"), _t("ys")], opset=16)
    _compare(model, {"init": np.ones(2, np.float32),
                     "xa": RNG.standard_normal((5, 2)).astype(np.float32),
                     "xb": RNG.standard_normal((2, 5)).astype(np.float32)}, device)


def test_sequence_operators(device: str) -> None:
    nodes = [
        helper.make_node("SequenceConstruct", ["a", "b"], ["s0"]),
        helper.make_node("SequenceInsert", ["s0", "c", "zero"], ["s1"]),
        helper.make_node("SequenceErase", ["s1", "minus1"], ["s2"]),
        helper.make_node("SequenceAt", ["s2", "minus1"], ["last"]),
        helper.make_node("SequenceLength", ["s2"], ["n"]),
        helper.make_node("ConcatFromSequence", ["s2"], ["cat"], axis=1),
        helper.make_node("ConcatFromSequence", ["s2"], ["stk"], axis=-1, new_axis=1),
        helper.make_node("SplitToSequence", ["cat", "two"], ["parts"], axis=1),
        helper.make_node("SplitToSequence", ["a"], ["rows"], axis=0, keepdims=0),
        helper.make_node("SequenceEmpty", [], ["e"]),
        helper.make_node("SequenceInsert", ["e", "a"], ["e1"]),
    ]
    model = _model(nodes, [_t("a", FLOAT, [3, 2]), _t("b", FLOAT, [3, 2]),
                           _t("c", FLOAT, [3, 2])],
                   [_t("last"), _t("n", TensorProto.INT64), _t("cat"), _t("stk"),
                    _seq("parts"), _seq("rows"), _seq("e1")],
                   inits={"zero": np.array(0, np.int64), "minus1": np.array(-1, np.int64),
                          "two": np.array(2, np.int64)})
    _compare(model, {k: RNG.standard_normal((3, 2)).astype(np.float32) for k in "abc"},
             device)


def test_sequence_input_sequence_map_and_optionals(device: str) -> None:
    body = helper.make_graph([helper.make_node("Add", ["e", "k"], ["o"]),
                              helper.make_node("Shape", ["e"], ["sh"])], "body",
                             [_t("e", FLOAT, None), _t("k", FLOAT, [])],
                             [_t("o"), _t("sh", TensorProto.INT64)])
    nodes = [helper.make_node("SequenceMap", ["xs", "k"], ["ys", "shapes"], body=body),
             helper.make_node("Optional", ["k"], ["opt"]),
             helper.make_node("OptionalHasElement", ["opt"], ["has"]),
             helper.make_node("OptionalGetElement", ["opt"], ["got"])]
    model = _model(nodes, [_seq("xs"), _t("k", FLOAT, [])],
                   [_seq("ys"), _seq("shapes", TensorProto.INT64),
                    _t("has", TensorProto.BOOL), _t("got")], opset=18)
    xs = [RNG.standard_normal((2, n)).astype(np.float32) for n in (1, 3, 2)]
    ref = reference(model, {"xs": xs, "k": np.array(0.5, np.float32)})
    m = ember.onnx.load(model, device=device)
    ys, shapes, has, got = m([ember.tensor(x, device=device) for x in xs],
                             ember.tensor(np.array(0.5, np.float32), device=device))
    for g, r in zip(ys, ref[0], strict=True):
        assert_close(g.numpy(), r, f"ys on {device}")
    for g, r in zip(shapes, ref[1], strict=True):
        assert_close(g.numpy(), r, f"shapes on {device}")
    assert bool(has.numpy()) is bool(ref[2]) is True
    assert_close(got.numpy(), ref[3], f"got on {device}")


def test_empty_optional_input_and_bad_position_are_clear() -> None:
    model = _model([helper.make_node("OptionalHasElement", ["o"], ["h"])],
                   [helper.make_value_info("o", helper.make_optional_type_proto(
                       helper.make_tensor_type_proto(FLOAT, [2])))],
                   [_t("h", TensorProto.BOOL)], opset=18)
    m = ember.onnx.load(model)
    assert m(None).numpy().item() is False
    assert m(ember.tensor([1.0, 2.0])).numpy().item() is True
    at = _model([helper.make_node("SequenceAt", ["s", "p"], ["y"])],
                [_seq("s"), _t("p", TensorProto.INT64, [])], [_t("y")])
    with pytest.raises(IndexError, match="position 2 is out of range for a sequence of 2"):
        ember.onnx.load(at)([ember.tensor([1.0]), ember.tensor([2.0])], ember.tensor(2))


def test_unsupported_operator_inside_a_subgraph_is_refused_at_load() -> None:
    then = helper.make_graph([helper.make_node("Foo", ["x"], ["t"])], "then", [], [_t("t")])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [_t("e")])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)
    model = _model([node], [_t("c", TensorProto.BOOL, []), _t("x", FLOAT, [2])], [_t("y")])
    with pytest.raises(ember.onnx.UnsupportedOperatorError, match=r"subgraph 'then'.*Foo"):
        ember.onnx.load(model)


def test_sequence_of_mixed_element_types_is_refused() -> None:
    model = _model([helper.make_node("SequenceInsert", ["s", "x"], ["t"])],
                   [_seq("s"), _t("x", TensorProto.INT64, [2])], [_seq("t")])
    with pytest.raises(TypeError, match="one element type, got float32, int64"):
        ember.onnx.load(model)([ember.tensor([1.0])], ember.tensor([1, 2]))


def test_loop_of_no_iteration_gives_empty_scan_outputs_of_the_declared_shape() -> None:
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("Add", ["s_in", "s_in"], ["s_out"])],
        "body", [_t("i", TensorProto.INT64, []), _t("c", TensorProto.BOOL, []),
                 _t("s_in", FLOAT, [3])],
        [_t("c_out", TensorProto.BOOL, []), _t("s_out", FLOAT, [3]), _t("s_out", FLOAT, [3])])
    body.output[2].name = "s_out"
    node = helper.make_node("Loop", ["m", "", "s0"], ["s", "scans"], body=body)
    model = _model([node], [_t("m", TensorProto.INT64, []), _t("s0", FLOAT, [3])],
                   [_t("s"), _t("scans")])
    feeds = {"m": np.array(0, np.int64), "s0": np.ones(3, np.float32)}
    ref = reference(model, feeds)
    s, scans = ember.onnx.load(model)(**{k: ember.tensor(v) for k, v in feeds.items()})
    assert_close(s.numpy(), ref[0], "state")
    assert scans.shape == ref[1].shape == (0, 3)
