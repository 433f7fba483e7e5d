"""Fused composite kernels (``ember_triton.rows``) on the interpreter: one launch per op,
numpy float64 oracles, the looping kernels for long rows, and gradients by finite differences.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import ember
import ember.functional as F
import numpy as np
import pytest
from ember.ops import composite as cops
from ember_autodiff.testing import check_grads

from ember_triton import rows

AD = "autodiff<triton-interpret>"


@pytest.fixture
def launches(dev: ember.Device, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Kernel launches on ``triton-interpret`` (and its autodiff stack) by kernel name."""
    be = dev.backend
    seen: Counter[str] = Counter()
    real = be.launch

    def counting(kernel: Any, grid: Any, *args: Any, **meta: Any) -> None:
        seen[getattr(kernel, "__name__", None) or kernel.fn.__name__] += 1
        real(kernel, grid, *args, **meta)

    monkeypatch.setattr(be, "launch", counting)
    return seen


@pytest.fixture
def long_rows(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Rows longer than 32 elements take the looping kernels (chunks of 16)."""
    monkeypatch.setitem(rows.MAX_BLOCK, "interpret", 32)
    yield


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)  # type: ignore[no-any-return]


def _layer_norm(x: np.ndarray, w: Any = None, b: Any = None, eps: float = 1e-5) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    out = (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)
    return out * (1.0 if w is None else w) + (0.0 if b is None else b)  # type: ignore[no-any-return]


def _rms_norm(x: np.ndarray, w: Any = None, eps: float = 1e-6) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * (1.0 if w is None else w)  # type: ignore[no-any-return]


def _cross_entropy(z: np.ndarray, t: np.ndarray, reduction: str, smoothing: float = 0.0,
                   ignore: int = -100) -> np.ndarray:
    logp = np.log(_softmax(z, -1))
    valid = t != ignore
    picked = logp[np.arange(len(t)), np.where(valid, t, 0)]
    per = valid * (-(1 - smoothing) * picked - smoothing * logp.mean(-1))
    if reduction == "none":
        return per  # type: ignore[no-any-return]
    return np.asarray(per.sum() / valid.sum() if reduction == "mean" else per.sum())


rng = np.random.default_rng(3)


def test_softmax_is_one_kernel_and_matches_float64(dev: ember.Device,
                                                   launches: Counter[str]) -> None:
    x = rng.standard_normal((6, 10)).astype(np.float32) * 4
    y = ember.tensor(x, device=dev).softmax(-1)
    assert launches == Counter(softmax_rows=1)
    np.testing.assert_allclose(y.numpy(), _softmax(x.astype(np.float64), -1), rtol=1e-6,
                               atol=1e-7)


@pytest.mark.parametrize(("name", "fn", "oracle", "kernels"), [
    ("log_softmax", lambda t: t.log_softmax(-1), lambda x: np.log(_softmax(x, -1)),
     Counter(softmax_rows=1)),
    ("layer_norm", lambda t: F.layer_norm(t, 10), _layer_norm, Counter(norm_rows=1)),
    ("rms_norm", lambda t: F.rms_norm(t, 10, eps=1e-6), _rms_norm, Counter(norm_rows=1)),
])
def test_forward_composites_are_one_kernel(dev: ember.Device, launches: Counter[str], name: str,
                                           fn: Callable[..., Any], oracle: Callable[..., Any],
                                           kernels: Counter[str]) -> None:
    x = rng.standard_normal((5, 10))
    y = fn(ember.tensor(x, device=dev))
    assert launches == kernels
    np.testing.assert_allclose(y.numpy(), oracle(x), rtol=1e-10, atol=1e-12)


def test_layer_norm_with_weight_and_bias_is_one_kernel(dev: ember.Device,
                                                       launches: Counter[str]) -> None:
    x, w, b = rng.standard_normal((4, 7)), rng.standard_normal(7), rng.standard_normal(7)
    xt, wt, bt = (ember.tensor(a, device=dev) for a in (x, w, b))
    y = F.layer_norm(xt, 7, wt, bt)
    assert launches == Counter(norm_rows=1)
    np.testing.assert_allclose(y.numpy(), _layer_norm(x, w, b), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_fuses_log_softmax_and_nll(dev: ember.Device, launches: Counter[str],
                                                 reduction: str) -> None:
    z = rng.standard_normal((6, 9))
    t = np.array([0, 8, -100, 3, 3, 1])
    loss = F.cross_entropy(ember.tensor(z, device=dev), ember.tensor(t, device=dev),
                           reduction=reduction, label_smoothing=0.15)
    # check_values: the targets' range check, kept on the device (read at the next sync)
    expected = Counter(cross_entropy_rows=1, check_values=1)
    if reduction != "none":
        expected["cross_entropy_reduce"] = 1
    assert launches == expected
    np.testing.assert_allclose(loss.numpy(), _cross_entropy(z, t, reduction, 0.15), rtol=1e-10)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_half_types_accumulate_in_float32(dev: ember.Device, dtype: str) -> None:
    d = getattr(ember, dtype)
    x = ember.tensor(rng.standard_normal((3, 300)) * 3, dtype=d, device=dev)
    xs = x.to(dtype=ember.float64).numpy()
    tol = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 1e-6}[dtype]
    np.testing.assert_allclose(x.softmax(-1).to(dtype=ember.float64).numpy(),
                               _softmax(xs, -1), rtol=tol, atol=tol / 100)
    ln = F.layer_norm(x, 300).to(dtype=ember.float64).numpy()
    np.testing.assert_allclose(ln, _layer_norm(xs), rtol=tol, atol=tol)
    assert F.layer_norm(x, 300).dtype is d


def test_non_contiguous_inputs_and_rows_of_one(dev: ember.Device) -> None:
    x = rng.standard_normal((4, 3, 5))
    t = ember.tensor(x, device=dev)
    np.testing.assert_allclose(t.permute(2, 0, 1).softmax(1).numpy(),
                               _softmax(x.transpose(2, 0, 1), 1), rtol=1e-12)
    np.testing.assert_allclose(t[:, ::2, 1:].log_softmax(0).numpy(),
                               np.log(_softmax(x[:, ::2, 1:], 0)), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(t.mT.reshape(4, 5, 3).numpy(), x.transpose(0, 2, 1))
    one = rng.standard_normal((6, 1))
    np.testing.assert_array_equal(ember.tensor(one, device=dev).softmax(-1).numpy(), 1.0)
    np.testing.assert_allclose(F.layer_norm(ember.tensor(one, device=dev), 1, eps=0.5).numpy(),
                               0.0)


def test_long_rows_loop_over_chunks(dev: ember.Device, long_rows: None,
                                    launches: Counter[str]) -> None:
    x = rng.standard_normal((3, 100)) * 5
    x[1, :60] = -np.inf  # the online maximum starts from -inf rows
    t = ember.tensor(x, device=dev)
    np.testing.assert_allclose(t.softmax(-1).numpy(), _softmax(x, -1), rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(t.log_softmax(-1).numpy()[[0, 2]],
                               np.log(_softmax(x[[0, 2]], -1)), rtol=1e-12)
    y = rng.standard_normal((3, 100))
    w = rng.standard_normal(100)
    np.testing.assert_allclose(
        F.layer_norm(ember.tensor(y, device=dev), 100, ember.tensor(w, device=dev)).numpy(),
        _layer_norm(y, w), rtol=1e-10)
    np.testing.assert_allclose(F.rms_norm(ember.tensor(y, device=dev), 100, eps=1e-6).numpy(),
                               _rms_norm(y), rtol=1e-10)
    tgt = np.array([5, 99, -100])
    np.testing.assert_allclose(
        F.cross_entropy(ember.tensor(y, device=dev), ember.tensor(tgt, device=dev)).numpy(),
        _cross_entropy(y, tgt, "mean"), rtol=1e-10)
    assert launches["softmax_rows"] == 2 and launches["norm_rows"] == 2


def test_a_row_of_minus_infinity_gives_nan_like_the_decomposition(dev: ember.Device,
                                                                   long_rows: None) -> None:
    for n in (8, 100):  # one block, and the looping kernel
        x = np.zeros((2, n))
        x[0] = -np.inf
        out = ember.tensor(x, device=dev).softmax(-1).numpy()
        assert np.isnan(out[0]).all() and np.allclose(out[1], 1.0 / n)


# -- backward ---------------------------------------------------------------------------------

x35 = rng.standard_normal((3, 5))
w5, b5 = rng.standard_normal(5), rng.standard_normal(5)
t_ign = np.array([0, -100, 4])
GRAD_CASES: dict[str, tuple[Callable[..., Any], list[Any]]] = {
    "softmax": (lambda x: F.softmax(x, -1), [x35]),
    "softmax-dim0": (lambda x: F.softmax(x, 0), [x35]),
    "log_softmax": (lambda x: F.log_softmax(x, -1), [x35]),
    "layer_norm-weight-bias": (lambda x, w, b: F.layer_norm(x, 5, w, b), [x35, w5, b5]),
    "layer_norm-plain": (lambda x: F.layer_norm(x, 5), [x35]),
    "layer_norm-bias": (lambda x, b: F.layer_norm(x, 5, None, b), [x35, b5]),
    "rms_norm-weight": (lambda x, w: F.rms_norm(x, 5, w), [x35, w5]),
    "rms_norm-plain": (lambda x: F.rms_norm(x, 5), [x35]),
    "cross_entropy-mean-ignore": (lambda z, t: F.cross_entropy(z, t), [x35, t_ign]),
    "cross_entropy-sum-smoothing": (
        lambda z, t: F.cross_entropy(z, t, reduction="sum", label_smoothing=0.2), [x35, t_ign]),
    "cross_entropy-none": (lambda z, t: F.cross_entropy(z, t, reduction="none"), [x35, t_ign]),
}
BACKWARD_KERNEL = {"softmax": "softmax_backward_rows", "log_softmax": "softmax_backward_rows",
                   "layer_norm": "norm_backward_rows", "rms_norm": "norm_backward_rows",
                   "cross_entropy": "cross_entropy_backward_rows"}


@pytest.mark.parametrize("name", list(GRAD_CASES))
def test_fused_backward_matches_finite_differences(dev: ember.Device, launches: Counter[str],
                                                   name: str) -> None:
    fn, args = GRAD_CASES[name]
    check_grads(fn, args, device=AD)
    assert launches[BACKWARD_KERNEL[name.split("-")[0]]] == 1


LONG_GRAD_CASES: dict[str, tuple[Callable[..., Any], list[Any]]] = {
    "softmax": (lambda x: F.softmax(x, -1), [rng.standard_normal((2, 40))]),
    "log_softmax": (lambda x: F.log_softmax(x, -1), [rng.standard_normal((2, 40))]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, 40, w, b),
                   [rng.standard_normal((2, 40)), rng.standard_normal(40),
                    rng.standard_normal(40)]),
    "rms_norm": (lambda x, w: F.rms_norm(x, 40, w),
                 [rng.standard_normal((2, 40)), rng.standard_normal(40)]),
    "cross_entropy": (lambda z, t: F.cross_entropy(z, t, reduction="sum", label_smoothing=0.2),
                      [rng.standard_normal((2, 40)), np.array([39, -100])]),
}


@pytest.mark.parametrize("name", list(LONG_GRAD_CASES))
def test_fused_backward_of_long_rows(dev: ember.Device, long_rows: None, launches: Counter[str],
                                     name: str) -> None:
    fn, args = LONG_GRAD_CASES[name]
    check_grads(fn, args, device=AD)
    assert launches[BACKWARD_KERNEL[name]] == 1


def test_layer_norm_backward_kernel_gives_dx_dweight_dbias(dev: ember.Device) -> None:
    # the kernel called directly: partial weight/bias sums per program, then summed
    x, w = rng.standard_normal((40, 3)), rng.standard_normal(3)
    g = rng.standard_normal((40, 3))
    mean = x.mean(-1)
    rstd = 1 / np.sqrt(x.var(-1) + 1e-5)
    be = dev.backend
    out = be.kernels[cops.layer_norm_backward](
        *(be.from_numpy(a, ember.float64) for a in (g, x, mean, rstd, w)), ndim=1, weight=True,
        affine=True)
    dx, dw, db = (be.to_numpy(o, None) for o in out)
    xhat = (x - mean[:, None]) * rstd[:, None]
    np.testing.assert_allclose(dw, (g * xhat).sum(0), rtol=1e-12)
    np.testing.assert_allclose(db, g.sum(0), rtol=1e-12)
    h = g * w
    np.testing.assert_allclose(dx, rstd[:, None] * (h - h.mean(-1, keepdims=True) - xhat * (
        h * xhat).mean(-1, keepdims=True)), rtol=1e-10)
