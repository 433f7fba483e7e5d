"""Elementwise GELU chains (as exporters write them) fused at import into one node that runs
`ember.nn.functional.gelu`: the same values as onnxruntime on the chain as written, and chains
that differ (another constant, an intermediate read elsewhere) left alone."""

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
