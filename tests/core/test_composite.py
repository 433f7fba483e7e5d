"""Composite ops: a backend's own kernel where it has one, the decomposition elsewhere."""

from __future__ import annotations

import numpy as np

import ember
import ember.functional as F
from ember import ops
from ember._device import Device
from ember.ops import composite as cops
from ember_cpu import CpuBackend


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)  # type: ignore[no-any-return]


class SoftmaxCpu(CpuBackend):
    """``cpu`` with a kernel of its own for softmax only, counting its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []
        self.kernels[cops.softmax] = self._softmax

    def _softmax(self, x: np.ndarray, dim: int) -> np.ndarray:
        self.calls.append(dim)
        return _softmax(x.astype(np.float64), dim).astype(x.dtype)


def test_a_composite_with_a_kernel_runs_that_kernel_once() -> None:
    be = SoftmaxCpu()
    dev = Device("softmax-cpu", None, None, be)
    x = np.random.default_rng(0).standard_normal((3, 4))
    y = ember.tensor(x, device=dev).softmax(-1)
    assert be.calls == [1]  # the dim arrives normalised
    np.testing.assert_allclose(y.numpy(), _softmax(x, -1), rtol=1e-12)


def test_a_composite_without_a_kernel_decomposes() -> None:
    be = SoftmaxCpu()
    dev = Device("softmax-cpu", None, None, be)
    x = np.random.default_rng(1).standard_normal((3, 4))
    y = ember.tensor(x, device=dev).log_softmax(0)
    assert be.calls == []
    np.testing.assert_allclose(y.numpy(), np.log(_softmax(x, 0)), rtol=1e-12)


def test_cpu_stacks_run_composites_as_the_cpu_kernels_and_numpyref_decomposes() -> None:
    cpu = {op.name for op in ops.composites() if ember.device("cpu").implements(op)}
    assert {"softmax", "log_softmax", "layer_norm", "cross_entropy", "gelu", "linear",
            "adam_steps", "softmax_backward", "cross_entropy_backward"} <= cpu
    # Fusion hands a composite to the device it wraps when that device has the kernel
    fused = {op.name for op in ops.composites() if ember.device("fusion<cpu>").implements(op)}
    assert fused == cpu
    # the reference device has no composite kernels: every composite decomposes there
    ref = ember.device("numpyref")
    assert [op.name for op in ops.composites() if ref.implements(op)] == []


def test_composites_are_ops_but_not_primitives() -> None:
    names = {op.name for op in ops.composites()}
    assert {"softmax", "log_softmax", "layer_norm", "rms_norm", "cross_entropy",
            "softmax_backward", "layer_norm_backward", "cross_entropy_backward"} <= names
    assert all(op.composite for op in ops.composites())
    assert not any(op.composite for op in ops.primitives())
    assert ops.softmax is cops.softmax


def test_backward_decompositions_match_finite_differences() -> None:
    rng = np.random.default_rng(2)
    x, g = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    y = _softmax(x, -1)

    def vjp(f: object, x: np.ndarray, g: np.ndarray) -> np.ndarray:
        out = np.zeros_like(x)
        for i in np.ndindex(*x.shape):
            d = np.zeros_like(x)
            d[i] = 1e-6
            out[i] = ((f(x + d) - f(x - d)) * g).sum() / 2e-6  # type: ignore[operator]
        return out

    dx = F.softmax_backward(ember.tensor(y), ember.tensor(g), -1).numpy()
    np.testing.assert_allclose(dx, vjp(lambda v: _softmax(v, -1), x, g), rtol=1e-6, atol=1e-8)
    dx = F.log_softmax_backward(ember.tensor(np.log(y)), ember.tensor(g), 1).numpy()
    np.testing.assert_allclose(dx, vjp(lambda v: np.log(_softmax(v, -1)), x, g), rtol=1e-6,
                               atol=1e-8)
    mean, rstd = x.mean(-1), 1 / np.sqrt(x.var(-1) + 1e-5)
    dx, dw, db = F.layer_norm_backward(ember.tensor(g), ember.tensor(x), ember.tensor(mean),
                                       ember.tensor(rstd), None, 1, affine=True)
    ln = lambda v: (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + 1e-5)  # noqa: E731
    np.testing.assert_allclose(dx.numpy(), vjp(ln, x, g), rtol=1e-6, atol=1e-8)
    assert dw is not None and db is not None
    np.testing.assert_allclose(dw.numpy(), (g * ln(x)).sum(0), rtol=1e-12)
    np.testing.assert_allclose(db.numpy(), g.sum(0), rtol=1e-12)
