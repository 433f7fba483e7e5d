"""Chains fused at import: elementwise GELU (as exporters write it) into one node that runs
`ember.nn.functional.gelu`, and MatMul + bias Add into `ember.nn.functional.linear`: the same
values as onnxruntime on the chain as written, and chains that differ (another constant, an
intermediate read elsewhere, a bias that broadcasts otherwise) left alone."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from onnx_oracle import assert_close, graph_model, helper, reference

import ember
import ember.onnx

rng = np.random.default_rng(3)
X = {"x": (3 * rng.standard_normal((4, 33))).astype(np.float32)}


def _c(name: str, v: float) -> Any:
    return helper.make_node("Constant", [], [name], value_float=v)


def _erf(order: str, k: float = math.sqrt(2.0)) -> list[Any]:
    nodes = [_c("k", k), _c("one", 1.0), _c("half", 0.5),
             helper.make_node("Div", ["x", "k"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"])]
    if order == "x*a*0.5":  # torch's TorchScript exporter
        nodes += [helper.make_node("Mul", ["x", "a"], ["m"]),
                  helper.make_node("Mul", ["m", "half"], ["y"])]
    elif order == "x*0.5*a":  # x * 0.5 * (1 + erf(x / sqrt 2))
        nodes += [helper.make_node("Mul", ["x", "half"], ["h"]),
                  helper.make_node("Mul", ["h", "a"], ["y"])]
    else:  # (a * 0.5) * x
        nodes += [helper.make_node("Mul", ["half", "a"], ["m"]),
                  helper.make_node("Mul", ["m", "x"], ["y"])]
    return nodes


def _tanh(pow3: bool, c: float = 0.044715) -> list[Any]:
    nodes = [_c("c", c), _c("s", math.sqrt(2.0 / math.pi)), _c("one", 1.0), _c("half", 0.5)]
    if pow3:
        nodes += [_c("three", 3.0), helper.make_node("Pow", ["x", "three"], ["x3"])]
    else:
        nodes += [helper.make_node("Mul", ["x", "x"], ["x2"]),
                  helper.make_node("Mul", ["x", "x2"], ["x3"])]
    return [*nodes, helper.make_node("Mul", ["c", "x3"], ["p"]),
            helper.make_node("Add", ["x", "p"], ["q"]), helper.make_node("Mul", ["s", "q"], ["r"]),
            helper.make_node("Tanh", ["r"], ["t"]), helper.make_node("Add", ["one", "t"], ["a"]),
            helper.make_node("Mul", ["x", "a"], ["m"]),
            helper.make_node("Mul", ["half", "m"], ["y"])]


@pytest.mark.parametrize(("nodes", "approximate"), [
    (_erf("x*a*0.5"), "none"), (_erf("x*0.5*a"), "none"), (_erf("a*0.5*x"), "none"),
    (_tanh(False), "tanh"), (_tanh(True), "tanh")])
def test_a_gelu_chain_is_one_node_and_matches_onnxruntime(nodes: list[Any],
                                                          approximate: str) -> None:
    model = graph_model(nodes, X, ["y"])
    m = ember.onnx.load(model)
    assert [(n.op_type, n.attrs.get("approximate")) for n in m._nodes] == \
        [("ember.Gelu", approximate)]
    assert_close(m(ember.tensor(X["x"])).numpy(), reference(model, X)[0], "gelu chain")


@pytest.mark.parametrize("nodes", [_erf("x*a*0.5", k=1.5), _tanh(False, c=0.05)])
def test_another_constant_is_not_gelu(nodes: list[Any]) -> None:
    model = graph_model(nodes, X, ["y"])
    m = ember.onnx.load(model)
    assert "ember.Gelu" not in [n.op_type for n in m._nodes]
    assert_close(m(ember.tensor(X["x"])).numpy(), reference(model, X)[0], "unfused chain")


def test_an_intermediate_read_elsewhere_is_not_fused() -> None:
    model = graph_model(_erf("x*a*0.5"), X, ["y", "e"])  # erf's output is also returned
    m = ember.onnx.load(model)
    assert "ember.Gelu" not in [n.op_type for n in m._nodes]
    for got, want in zip(m(ember.tensor(X["x"])), reference(model, X), strict=True):
        assert_close(got.numpy(), want, "unfused chain")


def test_the_fused_node_has_gelu_s_gradient_on_autodiff() -> None:
    from scipy.special import erf

    model = graph_model(_erf("x*a*0.5"), X, ["y"])
    m = ember.onnx.load(model, device="autodiff<cpu>")
    x = ember.tensor(X["x"], device="autodiff<cpu>", requires_grad=True)
    grad = m(x).sum().backward()[x].numpy()
    z = X["x"].astype(np.float64) / math.sqrt(2.0)
    want = 0.5 * (1 + erf(z)) + X["x"] * np.exp(-z * z) / math.sqrt(2 * math.pi)
    np.testing.assert_allclose(grad, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bias_first", [False, True])
def test_matmul_then_bias_is_one_linear_node(bias_first: bool) -> None:
    inits = {"w": rng.standard_normal((33, 7)).astype(np.float32),
             "b": rng.standard_normal(7).astype(np.float32)}
    feeds = {"x": rng.standard_normal((2, 5, 33)).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Add", ["b", "m"] if bias_first else ["m", "b"], ["y"])]
    model = graph_model(nodes, feeds, ["y"], inits)
    m = ember.onnx.load(model)
    assert [n.op_type for n in m._nodes] == ["ember.Linear"]
    assert sorted(m.state_dict()) == ["b", "w"]
    assert_close(m(ember.tensor(feeds["x"])).numpy(), reference(model, feeds)[0], "linear")
    # on autodiff the weight's gradient is the graph's: x^T summed over rows
    ma = ember.onnx.load(model, device="autodiff<cpu>")
    x = ember.tensor(feeds["x"], device="autodiff<cpu>")
    grads = ma(x).sum().backward()
    w = dict(ma.named_parameters())["w"]
    np.testing.assert_allclose(grads[w].numpy(), np.broadcast_to(
        feeds["x"].reshape(-1, 33).sum(0)[:, None], (33, 7)), rtol=1e-5, atol=1e-5)


def test_a_bias_of_another_shape_or_a_shared_product_is_not_linear() -> None:
    inits = {"w": rng.standard_normal((6, 4)).astype(np.float32),
             "b": rng.standard_normal((3, 4)).astype(np.float32)}
    feeds = {"x": rng.standard_normal((3, 6)).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["y"]),
             helper.make_node("MatMul", ["x", "w"], ["m2"]),
             helper.make_node("Add", ["m2", "b"], ["y2"])]
    model = graph_model(nodes, feeds, ["y", "m2", "y2"], inits)
    m = ember.onnx.load(model)
    assert "ember.Linear" not in [n.op_type for n in m._nodes]
    for got, want in zip(m(ember.tensor(feeds["x"])), reference(model, feeds), strict=True):
        assert_close(got.numpy(), want, "unfused")
