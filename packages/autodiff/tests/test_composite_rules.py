"""The VJP rules of composite ops, on a CPU backend that implements the forward composites.

Plain ``cpu`` has no composite kernels (composites decompose there, and Autodiff records their
primitives), so these tests give a CPU backend numpy kernels for the forward composites only:
Autodiff then records the composite ops and runs their rules, whose backward composites fall
back to their decompositions.  Gradients are checked against finite differences.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import ember
import ember.functional as F
import numpy as np
import pytest
from ember import ops
from ember.backend import Device
from ember.ops import composite as cops
from ember_cpu import CpuBackend

from ember_autodiff import AutodiffBackend
from ember_autodiff.testing import check_grads

CALLS: Counter[str] = Counter()


def _softmax(log: bool) -> Callable[..., np.ndarray]:
    def kernel(x: np.ndarray, dim: int) -> np.ndarray:
        CALLS[cops.log_softmax.name if log else cops.softmax.name] += 1
        v = x.astype(np.float64)
        s = v - v.max(axis=dim, keepdims=True)
        e = np.exp(s)
        out = s - np.log(e.sum(axis=dim, keepdims=True)) if log else e / e.sum(axis=dim,
                                                                            keepdims=True)
        return out.astype(x.dtype)
    return kernel


def _layer_norm(x: np.ndarray, *wb: np.ndarray, ndim: int, eps: float, weight: bool,
                bias: bool) -> tuple[np.ndarray, ...]:
    CALLS["layer_norm"] += 1
    axes = tuple(range(x.ndim - ndim, x.ndim))
    v = x.astype(np.float64)
    mean = v.mean(axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt(((v - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    y = (v - mean) * rstd
    if weight:
        y = y * wb[0]
    if bias:
        y = y + wb[-1]
    lead = x.shape[:x.ndim - ndim]
    return y.astype(x.dtype), mean.reshape(lead), rstd.reshape(lead)


def _rms_norm(x: np.ndarray, *w: np.ndarray, ndim: int, eps: float,
              weight: bool) -> tuple[np.ndarray, ...]:
    CALLS["rms_norm"] += 1
    axes = tuple(range(x.ndim - ndim, x.ndim))
    v = x.astype(np.float64)
    rstd = 1.0 / np.sqrt((v * v).mean(axis=axes, keepdims=True) + eps)
    y = v * rstd * (w[0] if weight else 1.0)
    return y.astype(x.dtype), rstd.reshape(x.shape[:x.ndim - ndim])


def _cross_entropy(z: np.ndarray, t: np.ndarray, ignore_index: int, label_smoothing: float,
                   reduction: str, float32_loss: bool = False) -> tuple[np.ndarray, ...]:
    CALLS["cross_entropy"] += 1
    v = z.astype(np.float64)
    mx = v.max(axis=1, keepdims=True)
    lse = (np.log(np.exp(v - mx).sum(axis=1, keepdims=True)) + mx)[:, 0]
    valid = t != ignore_index
    picked = v[np.arange(len(t)), np.where(valid, t, 0)]
    rows = valid * ((1 - label_smoothing) * (lse - picked)
                    + label_smoothing * (lse - v.mean(axis=1)))
    count = np.array(valid.sum(), dtype=z.dtype)
    loss = {"mean": lambda: rows.sum() / count, "sum": rows.sum, "none": lambda: rows}[reduction]()
    ld = np.float32 if float32_loss and z.dtype.itemsize < 4 else z.dtype
    return np.asarray(loss, dtype=ld), lse.astype(z.dtype), count


class ForwardCompositeCpu(CpuBackend):
    """``cpu`` plus numpy kernels for the forward composites (none of the backward ones)."""

    def __init__(self) -> None:
        super().__init__()
        self.kernels.update({cops.softmax: _softmax(False), cops.log_softmax: _softmax(True),
                             cops.layer_norm: _layer_norm, cops.rms_norm: _rms_norm,
                             cops.cross_entropy: _cross_entropy})


INNER = Device("cpu-composites", None, None, ForwardCompositeCpu())
AD = Device("autodiff", None, INNER, AutodiffBackend(INNER))

rng = np.random.default_rng(7)
x35 = rng.standard_normal((3, 5))
x234 = rng.standard_normal((2, 3, 4))
w5, b5 = rng.standard_normal(5), rng.standard_normal(5)
w34 = rng.standard_normal((3, 4))
t3 = np.array([0, 4, 2])
t_ign = np.array([0, -100, 2])

CASES: dict[str, tuple[str, Callable[..., Any], list[Any]]] = {
    "softmax-last": ("softmax", lambda x: F.softmax(x, -1), [x35]),
    "softmax-dim0": ("softmax", lambda x: F.softmax(x, 0), [x35]),
    "softmax-permuted": ("softmax", lambda x: F.softmax(x.permute(2, 0, 1), 1), [x234]),
    "log_softmax-last": ("log_softmax", lambda x: F.log_softmax(x, -1), [x35]),
    "log_softmax-middle": ("log_softmax", lambda x: F.log_softmax(x, 1), [x234]),
    "layer_norm-weight-bias": ("layer_norm", lambda x, w, b: F.layer_norm(x, 5, w, b),
                               [x35, w5, b5]),
    "layer_norm-plain": ("layer_norm", lambda x: F.layer_norm(x, 5), [x35]),
    "layer_norm-bias-only": ("layer_norm", lambda x, b: F.layer_norm(x, 5, None, b), [x35, b5]),
    "layer_norm-2d-weight": ("layer_norm", lambda x, w: F.layer_norm(x, (3, 4), w),
                             [x234, w34]),
    "layer_norm-rows-of-one": ("layer_norm", lambda x: F.layer_norm(x, 1, eps=0.5),
                               [rng.standard_normal((4, 1))]),
    "rms_norm-weight": ("rms_norm", lambda x, w: F.rms_norm(x, 5, w), [x35, w5]),
    "rms_norm-plain-2d": ("rms_norm", lambda x: F.rms_norm(x, (3, 4), eps=0.1), [x234]),
    "cross_entropy-mean": ("cross_entropy", lambda z, t: F.cross_entropy(z, t), [x35, t3]),
    "cross_entropy-sum-ignore": ("cross_entropy",
                                 lambda z, t: F.cross_entropy(z, t, reduction="sum"),
                                 [x35, t_ign]),
    "cross_entropy-none-smoothing": (
        "cross_entropy",
        lambda z, t: F.cross_entropy(z, t, reduction="none", label_smoothing=0.3), [x35, t_ign]),
    "cross_entropy-mean-smoothing-ignore": (
        "cross_entropy", lambda z, t: F.cross_entropy(z, t, label_smoothing=0.2), [x35, t_ign]),
    "cross_entropy-spatial": ("cross_entropy", lambda z, t: F.cross_entropy(z, t),
                              [rng.standard_normal((2, 3, 2)), np.array([[0, 2], [1, -100]])]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_composite_gradient_matches_finite_differences(name: str) -> None:
    op, fn, args = CASES[name]
    CALLS.clear()
    check_grads(fn, args, device=AD)  # type: ignore[arg-type]  # a Device works as well
    assert CALLS[op] > 0, f"{op} was not dispatched as a composite op"


def test_composite_is_recorded_as_one_node() -> None:
    x = ember.tensor(x35, device=AD, requires_grad=True)
    y = F.layer_norm(x, 5)
    assert y.grad_fn is not None and y.grad_fn.op is cops.layer_norm  # type: ignore[attr-defined]


def test_autodiff_implements_a_composite_only_with_a_rule_and_an_inner_kernel() -> None:
    assert AD.implements(cops.softmax)
    assert not AD.implements(cops.softmax_backward)  # the inner device has no kernel for it
    # numpyref (the reference backend) has no composite kernels; the cpu has its own
    plain = ember.device("autodiff<numpyref>")
    assert not plain.implements(cops.softmax)
    assert not ember.device("numpyref").implements(cops.softmax)
    assert ember.device("autodiff<cpu>").implements(cops.softmax)


def test_composites_are_not_primitives() -> None:
    comps = set(ops.composites())
    assert {cops.softmax, cops.layer_norm_backward, cops.cross_entropy} <= comps
    assert not comps & set(ops.primitives())


def test_second_derivative_through_a_composite_rule() -> None:
    # the rule's backward composite decomposes on the autodiff device under create_graph
    x = ember.tensor(x35, device=AD, requires_grad=True)
    v = rng.standard_normal((3, 5))
    loss = (F.log_softmax(x, -1) * ember.tensor(v, device=AD)).sum()
    g = loss.backward(create_graph=True)[x]
    hv = (g * g).sum().backward()[x].numpy()

    def grad_sq(xv: np.ndarray) -> float:
        e = np.exp(xv - xv.max(-1, keepdims=True))
        p = e / e.sum(-1, keepdims=True)
        gg = v - p * v.sum(-1, keepdims=True)
        return float((gg * gg).sum())

    fd = np.zeros_like(x35)
    for i in np.ndindex(*x35.shape):
        d = np.zeros_like(x35)
        d[i] = 1e-6
        fd[i] = (grad_sq(x35 + d) - grad_sq(x35 - d)) / 2e-6
    np.testing.assert_allclose(hv, fd, rtol=1e-4, atol=1e-6)
