"""The CPU's composite kernels (`ember_cpu.composite`, `ember_cpu.optim`) against float64 numpy
oracles written here, against core's decomposition on the same CPU device (the kernels taken
out of its table), and their gradients on ``autodiff<cpu>`` against finite differences."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import ember
import ember.functional as F
import numpy as np
import pytest
from ember._errors import DTypeError, ShapeError
from ember.ops import composite as cops
from ember.testing import adam_step
from ember_autodiff.testing import check_grads

from ember_cpu import composite

K = composite.KERNELS
AD = "autodiff<cpu>"
FLOATS = ("float64", "float32", "float16", "bfloat16")
#: (rtol, atol) of a kernel's result against the float64 oracle on its rounded inputs
TOL = {"float64": (1e-12, 1e-12), "float32": (2e-6, 2e-6), "float16": (2e-3, 2e-3),
       "bfloat16": (1.6e-2, 1.6e-2)}
#: and against core's decomposition, which rounds every intermediate to half types
DTOL = {"float64": (1e-12, 1e-12), "float32": (1e-5, 1e-5), "float16": (1e-2, 1e-2),
        "bfloat16": (8e-2, 8e-2)}
STAT = {"float64": np.float64, "float32": np.float32, "float16": np.float32,
        "bfloat16": np.float32}


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _np(a: np.ndarray, dtype: str) -> np.ndarray:
    """``a`` as the payload the CPU holds for ``dtype``."""
    return ember.tensor(a, dtype=getattr(ember, dtype)).payload


def _f64(a: Any) -> np.ndarray:
    return np.asarray(a.numpy() if isinstance(a, ember.Tensor) else a, dtype=np.float64)


def _rounded(a: np.ndarray, dtype: str) -> np.ndarray:
    """``a`` rounded to ``dtype``, back in float64: what the kernel really receives."""
    return _f64(_np(a, dtype))


def _close(got: Any, want: np.ndarray, dtype: str, scale: float = 1.0,
           tol: dict[str, tuple[float, float]] = TOL) -> None:
    rtol, atol = tol[dtype]
    np.testing.assert_allclose(_f64(got), want, rtol=rtol * scale, atol=atol * scale)


@contextmanager
def decomposed() -> Iterator[None]:
    """The cpu device without its composite kernels: core runs its decompositions (whose bare
    ufuncs warn on nan and inf, hence numpy's warnings off)."""
    kernels = ember.device("cpu").backend.kernels
    saved = {op: kernels.pop(op) for op in K if op in kernels}
    assert saved, "the cpu device does not register ember_cpu.composite"
    try:
        with np.errstate(all="ignore"):
            yield
    finally:
        kernels.update(saved)


def _both(fn: Callable[[], Any]) -> tuple[Any, Any]:
    """``fn()`` with the kernels, then with core's decomposition."""
    fused = fn()
    with decomposed():
        plain = fn()
    return fused, plain


def _agree(a: Any, b: Any, dtype: str, scale: float = 1.0) -> None:
    rtol, atol = DTOL[dtype]
    np.testing.assert_allclose(_f64(a), _f64(b), rtol=rtol * scale, atol=atol * scale)


def test_every_composite_listed_is_a_cpu_kernel() -> None:
    dev = ember.device("cpu")
    for op in (cops.softmax, cops.log_softmax, cops.softmax_backward,
               cops.log_softmax_backward, cops.layer_norm, cops.layer_norm_backward,
               cops.rms_norm, cops.rms_norm_backward, cops.cross_entropy,
               cops.cross_entropy_backward, cops.adam_step, cops.adam_steps,
               cops.adam_step_capturable, cops.linear, cops.clamp_backward,
               cops.max_pool2d_backward, cops.conv2d_weight_grad, cops.max_pool2d_values):
        assert dev.implements(op), op.name
        assert ember.device(AD).implements(op) == (op.differentiable and op in _rules())


def _rules() -> Any:
    from ember_autodiff import RULES

    return RULES


# -- softmax family -----------------------------------------------------------------------------


def softmax_oracle(x: np.ndarray, dim: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=dim, keepdims=True))
    return e / e.sum(axis=dim, keepdims=True)


def log_softmax_oracle(x: np.ndarray, dim: int) -> np.ndarray:
    s = x - x.max(axis=dim, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=dim, keepdims=True))


SHAPES_DIMS = [((7,), 0), ((5, 33), 1), ((5, 33), 0), ((2, 3, 4, 6), 2), ((16, 4, 8), 2)]


@pytest.mark.parametrize("shape,dim", SHAPES_DIMS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_softmax_and_log_softmax_match_the_oracle(dtype: str, shape: tuple[int, ...],
                                                  dim: int) -> None:
    x = _rounded(_rng().standard_normal(shape) * 4, dtype)
    y = K[cops.softmax](_np(x, dtype), dim=dim)
    ly = K[cops.log_softmax](_np(x, dtype), dim=dim)
    assert y.dtype == ly.dtype == _np(x, dtype).dtype and y.shape == shape
    _close(y, softmax_oracle(x, dim), dtype)
    _close(ly, log_softmax_oracle(x, dim), dtype, 4)


@pytest.mark.parametrize("shape,dim", SHAPES_DIMS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_softmax_backwards_match_the_oracle(dtype: str, shape: tuple[int, ...], dim: int) -> None:
    rng = _rng(1)
    y = _rounded(softmax_oracle(rng.standard_normal(shape), dim), dtype)
    ly = _rounded(log_softmax_oracle(rng.standard_normal(shape), dim), dtype)
    g = _rounded(rng.standard_normal(shape), dtype)
    dx = K[cops.softmax_backward](_np(y, dtype), _np(g, dtype), dim=dim)
    _close(dx, y * (g - (g * y).sum(axis=dim, keepdims=True)), dtype, 4)
    dlx = K[cops.log_softmax_backward](_np(ly, dtype), _np(g, dtype), dim=dim)
    _close(dlx, g - np.exp(ly) * g.sum(axis=dim, keepdims=True), dtype, 8)


@pytest.mark.parametrize("dtype", FLOATS)
def test_softmax_family_agrees_with_the_decomposition_on_nan_and_inf_rows(dtype: str) -> None:
    x = _rng(2).standard_normal((6, 9)) * 3
    x[1, 3] = np.nan
    x[2, :] = -np.inf
    x[3, 4] = np.inf
    x[4, ::2] = -np.inf
    g = _rng(3).standard_normal((6, 9))
    xt, gt = ember.tensor(x, dtype=getattr(ember, dtype)), ember.tensor(g, dtype=xt_dtype(dtype))
    for fn in (F.softmax, F.log_softmax):
        a, b = _both(lambda fn=fn: fn(xt, -1))
        assert np.array_equal(np.isnan(_f64(a)), np.isnan(_f64(b)))
        _agree(a, b, dtype, 4)
        assert np.isnan(_f64(a)[1:4]).all() and np.isfinite(_f64(a)[[0, 5]]).all()
    y = F.softmax(ember.tensor(x[[0, 4, 5]], dtype=getattr(ember, dtype)), -1)
    a, b = _both(lambda: F.softmax_backward(y, gt[[0, 4, 5]], -1))
    _agree(a, b, dtype, 4)
    ly = F.log_softmax(ember.tensor(x[[0, 5]], dtype=getattr(ember, dtype)), -1)
    a, b = _both(lambda: F.log_softmax_backward(ly, gt[[0, 5]], -1))
    _agree(a, b, dtype, 8)


def xt_dtype(dtype: str) -> ember.DType:
    return getattr(ember, dtype)  # type: ignore[no-any-return]


@pytest.mark.parametrize("op", [cops.softmax, cops.log_softmax])
def test_softmax_kernels_on_zero_size_and_0d_inputs(op: Any) -> None:
    assert K[op](np.zeros((0, 4), np.float32), dim=1).shape == (0, 4)
    assert K[op](np.zeros((3, 0), np.float32), dim=1).shape == (3, 0)
    assert K[op](np.zeros((3, 0), np.float32), dim=0).shape == (3, 0)
    out = K[op](np.array(2.5), dim=0)
    assert out.shape == () and out == (1.0 if op is cops.softmax else 0.0)
    back = cops.softmax_backward if op is cops.softmax else cops.log_softmax_backward
    assert K[back](np.zeros((0, 4)), np.zeros((0, 4)), dim=1).shape == (0, 4)


# -- layer norm / RMS norm ----------------------------------------------------------------------


def layer_norm_oracle(x: np.ndarray, ndim: int, w: np.ndarray | None, b: np.ndarray | None,
                      eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    axes = tuple(range(x.ndim - ndim, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    y = y * w if w is not None else y
    y = y + b if b is not None else y
    return y, mu.reshape(x.shape[:x.ndim - ndim]), 1 / np.sqrt(var + eps).reshape(
        x.shape[:x.ndim - ndim])


NORM_CASES = [((4, 10), 1), ((2, 3, 8), 2), ((16,), 1), ((3, 5, 4), 1)]


@pytest.mark.parametrize("affine", ["none", "weight", "bias", "both"])
@pytest.mark.parametrize("shape,ndim", NORM_CASES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_layer_norm_and_its_backward_match_the_oracle(dtype: str, shape: tuple[int, ...],
                                                      ndim: int, affine: str) -> None:
    rng = _rng(4)
    norm = shape[len(shape) - ndim:]
    x = _rounded(rng.standard_normal(shape) * 3 + 1, dtype)
    w = _rounded(rng.standard_normal(norm), dtype) if affine in ("weight", "both") else None
    b = _rounded(rng.standard_normal(norm), dtype) if affine in ("bias", "both") else None
    g = _rounded(rng.standard_normal(shape), dtype)
    args = [_np(t, dtype) for t in (x, w, b) if t is not None]
    y, mean, rstd = K[cops.layer_norm](*args, ndim=ndim, eps=1e-5, weight=w is not None,
                                       bias=b is not None)
    want_y, want_mean, want_rstd = layer_norm_oracle(x, ndim, w, b, 1e-5)
    assert mean.dtype == rstd.dtype == STAT[dtype] and mean.shape == shape[:len(shape) - ndim]
    _close(y, want_y, dtype, 8)
    _close(mean, want_mean, "float32" if dtype != "float64" else dtype, 4)
    _close(rstd, want_rstd, "float32" if dtype != "float64" else dtype, 4)
    # backward from the float64 statistics (stats in their own dtype)
    mean_in, rstd_in = want_mean.astype(STAT[dtype]), want_rstd.astype(STAT[dtype])
    mean_in, rstd_in = mean_in.astype(np.float64), rstd_in.astype(np.float64)
    wargs = [_np(w, dtype)] if w is not None else []
    dx, dw, db = K[cops.layer_norm_backward](
        _np(g, dtype), _np(x, dtype), mean_in.astype(STAT[dtype]), rstd_in.astype(STAT[dtype]),
        *wargs, ndim=ndim, weight=w is not None, affine=affine != "none")
    axes = tuple(range(len(shape) - ndim, len(shape)))
    lead = tuple(range(len(shape) - ndim))
    keep = shape[:len(shape) - ndim] + (1,) * ndim
    xhat = (x - mean_in.reshape(keep)) * rstd_in.reshape(keep)
    h = g * w if w is not None else g
    want_dx = rstd_in.reshape(keep) * (h - h.mean(axis=axes, keepdims=True)
                                       - xhat * (h * xhat).mean(axis=axes, keepdims=True))
    _close(dx, want_dx, dtype, 16)
    if affine == "none":
        assert dw.shape == db.shape == (0,)
    else:
        assert dw.shape == db.shape == norm and dw.dtype == db.dtype == _np(x, dtype).dtype
        _close(dw, (g * xhat).sum(axis=lead), dtype, 16 * shape[0])
        _close(db, g.sum(axis=lead), dtype, 16 * shape[0])


@pytest.mark.parametrize("weight", [False, True])
@pytest.mark.parametrize("shape,ndim", NORM_CASES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_rms_norm_and_its_backward_match_the_oracle(dtype: str, shape: tuple[int, ...],
                                                    ndim: int, weight: bool) -> None:
    rng = _rng(5)
    norm = shape[len(shape) - ndim:]
    axes = tuple(range(len(shape) - ndim, len(shape)))
    lead = tuple(range(len(shape) - ndim))
    x = _rounded(rng.standard_normal(shape) * 2, dtype)
    w = _rounded(rng.standard_normal(norm), dtype) if weight else None
    g = _rounded(rng.standard_normal(shape), dtype)
    wargs = [_np(w, dtype)] if w is not None else []
    y, rstd = K[cops.rms_norm](_np(x, dtype), *wargs, ndim=ndim, eps=1e-6, weight=weight)
    r = 1 / np.sqrt((x * x).mean(axis=axes, keepdims=True) + 1e-6)
    assert rstd.dtype == STAT[dtype] and rstd.shape == shape[:len(shape) - ndim]
    _close(y, x * r * (w if w is not None else 1.0), dtype, 8)
    _close(rstd, r.reshape(rstd.shape), "float32" if dtype != "float64" else dtype, 4)
    r_in = r.astype(STAT[dtype])
    dx, dw = K[cops.rms_norm_backward](_np(g, dtype), _np(x, dtype), r_in.reshape(rstd.shape),
                                       *wargs, ndim=ndim, weight=weight)
    r64 = r_in.astype(np.float64)
    h = g * w if w is not None else g
    _close(dx, r64 * (h - x * r64 ** 2 * (h * x).mean(axis=axes, keepdims=True)), dtype, 16)
    if weight:
        _close(dw, (g * x * r64).sum(axis=lead), dtype, 16 * shape[0])
    else:
        assert dw.shape == (0,)


@pytest.mark.parametrize("dtype", FLOATS)
def test_norms_agree_with_the_decomposition_with_gradients(dtype: str) -> None:
    rng = _rng(6)
    x = rng.standard_normal((6, 4, 8)) * 2
    x[1, 2, 3] = np.nan
    x[2, 0, :] = 5.0  # a constant row: zero variance
    w, b, gw = rng.standard_normal(8), rng.standard_normal(8), rng.standard_normal((6, 4, 8))
    dt = xt_dtype(dtype)

    def run(norm: str) -> list[np.ndarray]:
        xt = ember.tensor(x, dtype=dt, device=AD, requires_grad=True)
        wt = ember.tensor(w, dtype=dt, device=AD, requires_grad=True)
        bt = ember.tensor(b, dtype=dt, device=AD, requires_grad=True)
        y = (F.layer_norm(xt, 8, wt, bt, eps=1e-5) if norm == "layer"
             else F.rms_norm(xt, [8], wt, eps=1e-6))
        grads = (y * ember.tensor(gw, dtype=dt, device=AD)).sum().backward()
        out = [_f64(y), _f64(grads[xt]), _f64(grads[wt])]
        return [*out, _f64(grads[bt])] if norm == "layer" else out

    for norm in ("layer", "rms"):
        fused, plain = _both(lambda norm=norm: run(norm))
        for a, c in zip(fused, plain, strict=True):
            assert np.array_equal(np.isnan(a), np.isnan(c))
            _agree(a, c, dtype, 16)


def test_norm_kernels_on_zero_size_inputs() -> None:
    y, mean, rstd = K[cops.layer_norm](np.zeros((0, 5), np.float32), ndim=1, eps=1e-5,
                                       weight=False, bias=False)
    assert y.shape == (0, 5) and mean.shape == rstd.shape == (0,)
    y, mean, rstd = K[cops.layer_norm](np.zeros((3, 0)), ndim=1, eps=1e-5, weight=False,
                                       bias=False)
    assert y.shape == (3, 0) and np.isnan(mean).all() and np.isnan(rstd).all()
    dx, dw, db = K[cops.layer_norm_backward](np.zeros((0, 5)), np.zeros((0, 5)), np.zeros(0),
                                             np.zeros(0), ndim=1, weight=False, affine=True)
    assert dx.shape == (0, 5) and (dw == 0).all() and dw.shape == db.shape == (5,)
    y, rstd = K[cops.rms_norm](np.zeros((0, 2, 3)), ndim=2, eps=1e-6, weight=False)
    assert y.shape == (0, 2, 3) and rstd.shape == (0,)


def test_norm_kernels_name_bad_inputs() -> None:
    with pytest.raises(ShapeError, match=r"layer_norm: weight of shape \(4,\)"):
        K[cops.layer_norm](np.ones((2, 5)), np.ones(4), ndim=1, eps=1e-5, weight=True,
                           bias=False)
    with pytest.raises(ShapeError, match=r"rms_norm_backward: g and x must share one shape"):
        K[cops.rms_norm_backward](np.ones((2, 5)), np.ones((2, 4)), np.ones(2), ndim=1,
                                  weight=False)
    with pytest.raises(DTypeError, match="layer_norm_backward: inputs must share one dtype"):
        K[cops.layer_norm_backward](np.ones((2, 5), np.float32), np.ones((2, 5)), np.ones(2),
                                    np.ones(2), ndim=1, weight=False, affine=False)
    with pytest.raises(ShapeError, match=r"layer_norm_backward: rstd of shape \(3,\)"):
        K[cops.layer_norm_backward](np.ones((2, 5)), np.ones((2, 5)), np.ones(2), np.ones(3),
                                    ndim=1, weight=False, affine=False)


# -- cross entropy ------------------------------------------------------------------------------


def ce_oracle(z: np.ndarray, t: np.ndarray, ignore: int, s: float, reduction: str
              ) -> tuple[np.ndarray, np.ndarray]:
    m = z.shape[0]
    mx = z.max(axis=1, keepdims=True)
    lse = np.log(np.exp(z - mx).sum(axis=1)) + mx[:, 0]
    loss = np.zeros(m)
    for r in range(m):
        if t[r] == ignore:
            continue
        logp = z[r] - lse[r]
        loss[r] = -(1 - s) * logp[t[r]] - s * logp.mean()
    valid = (t != ignore).sum()
    out = {"none": loss, "sum": loss.sum(), "mean": loss.sum() / valid if valid else np.nan}
    return np.asarray(out[reduction]), lse


def ce_grad_oracle(z: np.ndarray, t: np.ndarray, ignore: int, s: float, reduction: str,
                   g: np.ndarray) -> np.ndarray:
    m, c = z.shape
    p = softmax_oracle(z, 1)
    out = np.zeros_like(z)
    count = (t != ignore).sum()
    for r in range(m):
        if t[r] == ignore:
            continue
        d = p[r] - s / c
        d[t[r]] -= 1 - s
        scale = g[r] if reduction == "none" else (g / count if reduction == "mean" else g)
        out[r] = d * scale
    return out


@pytest.mark.parametrize("smoothing", [0.0, 0.15])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_cross_entropy_and_its_backward_match_the_oracle(dtype: str, reduction: str,
                                                         smoothing: float) -> None:
    rng = _rng(7)
    z = _rounded(rng.standard_normal((9, 11)) * 3, dtype)
    t = rng.integers(0, 11, 9)
    t[[2, 5]] = -100
    loss, lse, count = K[cops.cross_entropy](_np(z, dtype), t, ignore_index=-100,
                                             label_smoothing=smoothing, reduction=reduction)
    want, want_lse = ce_oracle(z, t, -100, smoothing, reduction)
    assert loss.dtype == _np(z, dtype).dtype and loss.shape == want.shape
    assert lse.dtype == count.dtype == STAT[dtype] and count.shape == () and count == 7
    _close(loss, want, dtype, 8)
    _close(lse, want_lse, "float32" if dtype != "float64" else dtype, 4)
    g = _rounded(rng.standard_normal(9) if reduction == "none" else np.array(1.7), dtype)
    dz = K[cops.cross_entropy_backward](_np(g, dtype), _np(z, dtype), t, lse, count,
                                        ignore_index=-100, label_smoothing=smoothing,
                                        reduction=reduction)
    assert dz.dtype == _np(z, dtype).dtype and dz.shape == z.shape
    assert (dz[[2, 5]] == 0).all()
    _close(dz, ce_grad_oracle(z, t, -100, smoothing, reduction, g), dtype, 8)


@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_cross_entropy_agrees_with_the_decomposition_with_gradients(
        dtype: str, reduction: str, smoothing: float) -> None:
    rng = _rng(8)
    z = rng.standard_normal((2, 5, 3)) * 3  # [N, C, d]: the class axis is not last
    z[1, :, 2] = -np.inf  # a row of -inf logits: nan loss, as the decomposition
    z[0, 1, 0] = np.nan
    t = rng.integers(0, 5, (2, 3))
    t[0, 2] = 7  # ignore_index
    w = rng.standard_normal((2, 3))
    dt = xt_dtype(dtype)

    def run() -> list[np.ndarray]:
        zt = ember.tensor(z, dtype=dt, device=AD, requires_grad=True)
        loss = F.cross_entropy(zt, ember.tensor(t, device=AD), ignore_index=7,
                               reduction=reduction, label_smoothing=smoothing)
        scalar = (loss * ember.tensor(w, dtype=dt, device=AD)).sum() if reduction == "none" \
            else loss * 1.3
        return [_f64(loss), _f64(scalar.backward()[zt])]

    fused, plain = _both(run)
    for a, b in zip(fused, plain, strict=True):
        assert np.array_equal(np.isnan(a), np.isnan(b))
        _agree(a, b, dtype, 8)


def test_cross_entropy_ignored_rows_add_exactly_zero_even_when_not_finite() -> None:
    z = np.array([[1.0, 2.0, 0.5], [np.nan, 1.0, np.inf]])
    t = np.array([1, -1])
    loss, lse, count = K[cops.cross_entropy](z, t, ignore_index=-1, label_smoothing=0.1,
                                             reduction="sum")
    want, _ = ce_oracle(z[:1], t[:1], -1, 0.1, "sum")
    assert count == 1 and np.isclose(loss, want)
    dz = K[cops.cross_entropy_backward](np.array(1.0), z, t, lse, count, ignore_index=-1,
                                        label_smoothing=0.1, reduction="sum")
    assert (dz[1] == 0).all() and np.isfinite(dz).all()


def test_cross_entropy_on_zero_rows_and_all_ignored() -> None:
    z = np.zeros((0, 4), np.float32)
    t = np.zeros(0, np.int64)
    for reduction, want in (("sum", 0.0), ("none", None)):
        loss, lse, count = K[cops.cross_entropy](z, t, ignore_index=-100, label_smoothing=0.0,
                                                 reduction=reduction)
        assert lse.shape == (0,) and count == 0
        assert loss.shape == (0,) if want is None else loss == want
    loss, _, count = K[cops.cross_entropy](np.ones((2, 3)), np.array([-100, -100]),
                                           ignore_index=-100, label_smoothing=0.0,
                                           reduction="mean")
    assert count == 0 and np.isnan(loss)  # 0 / 0, as the decomposition


def test_cross_entropy_names_bad_targets() -> None:
    with pytest.raises(IndexError, match=r"cross_entropy: target class out of range \[0, 3\)"):
        K[cops.cross_entropy](np.ones((2, 3)), np.array([0, 3]), ignore_index=-100,
                              label_smoothing=0.0, reduction="mean")
    with pytest.raises(ShapeError, match=r"cross_entropy: expected logits \[M, C\] and target"):
        K[cops.cross_entropy](np.ones((2, 3)), np.array([0, 1, 2]), ignore_index=-100,
                              label_smoothing=0.0, reduction="mean")
    with pytest.raises(ValueError, match="cross_entropy: reduction must be"):
        K[cops.cross_entropy](np.ones((2, 3)), np.array([0, 1]), ignore_index=-100,
                              label_smoothing=0.0, reduction="avg")


# -- gradients against finite differences on autodiff<cpu> -----------------------------------


def test_softmax_family_gradients_match_finite_differences() -> None:
    assert ember.device(AD).implements(cops.softmax)
    assert ember.device(AD).implements(cops.log_softmax)
    x = _rng(9).standard_normal((3, 5)) * 2
    check_grads(lambda t: F.softmax(t, -1), [x])
    check_grads(lambda t: F.softmax(t, 0), [x])
    check_grads(lambda t: F.log_softmax(t, -1), [x])
    check_grads(lambda t: F.log_softmax(t.reshape(3, 5, 1), 1), [x])


def test_layer_norm_gradients_match_finite_differences() -> None:
    assert ember.device(AD).implements(cops.layer_norm)
    rng = _rng(10)
    x, w, b = rng.standard_normal((3, 2, 4)), rng.standard_normal((2, 4)), rng.standard_normal(
        (2, 4))
    check_grads(lambda t, u, v: F.layer_norm(t, (2, 4), u, v), [x, w, b])
    check_grads(lambda t, u: F.layer_norm(t, 4, u), [x, w[0]])
    check_grads(lambda t: F.layer_norm(t, 4), [x])
    check_grads(lambda t, u: F.rms_norm(t, 4, u), [x, w[1]])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_gradients_match_finite_differences(reduction: str) -> None:
    assert ember.device(AD).implements(cops.cross_entropy)
    rng = _rng(11)
    z = rng.standard_normal((5, 4)) * 2
    t = np.array([0, 3, -100, 1, 3])
    check_grads(lambda u: F.cross_entropy(u, ember.tensor(t, device=AD), reduction=reduction,
                                          label_smoothing=0.1), [z])
    check_grads(lambda u: F.cross_entropy(u, ember.tensor(t[:4].reshape(2, 2), device=AD),
                                          reduction=reduction),
                [rng.standard_normal((2, 4, 2))])


def _grad_of(f: Callable[..., Any]) -> Callable[..., Any]:
    """``x -> d sum(f(x) * weights) / dx``, recorded so that it can be differentiated again."""

    def grad(x: Any) -> Any:
        with ember.enable_grad():  # check_grads evaluates under no_grad for its differences
            y = f(x)
            w = ember.tensor(np.linspace(-1.0, 1.5, y.numel()).reshape(y.shape), device=AD)
            return (y * w).sum().backward(create_graph=True)[x]

    return grad


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layer_norm", "rms_norm",
                                  "cross_entropy"])
def test_second_derivatives_through_the_kernels_match_finite_differences(name: str) -> None:
    # the forward kernels' statistics (mean, rstd, lse) must not freeze the second derivative
    t = ember.tensor(np.array([0, 3, 1]), device=AD)
    f = {"softmax": lambda x: F.softmax(x, -1), "log_softmax": lambda x: F.log_softmax(x, 0),
         "layer_norm": lambda x: F.layer_norm(x, 4), "rms_norm": lambda x: F.rms_norm(x, 4),
         "cross_entropy": lambda x: F.cross_entropy(x, t, label_smoothing=0.1) * x.sum()}[name]
    check_grads(_grad_of(f), [_rng(20).standard_normal((3, 4))], atol=1e-4, rtol=1e-3)


# -- linear, clamp, pooling and convolution weight gradients ----------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
def test_linear_matches_the_oracle_and_the_decomposition(dtype: str) -> None:
    rng = _rng(12)
    x, w, b = (_rounded(rng.standard_normal(s), dtype) for s in ((6, 5), (3, 5), (3,)))
    out = K[cops.linear](_np(x, dtype), _np(w, dtype), _np(b, dtype))
    assert out.dtype == _np(x, dtype).dtype
    _close(out, x @ w.T + b, dtype, 8)
    dt = xt_dtype(dtype)
    a, c = _both(lambda: F.linear(*(ember.tensor(v, dtype=dt) for v in (x, w, b))))
    _agree(a, c, dtype, 4)
    with pytest.raises(ShapeError, match=r"linear: expected x \[N, in\]"):
        K[cops.linear](np.ones((2, 4)), np.ones((3, 5)), np.ones(3))


@pytest.mark.parametrize("bounds", [(0.0, None), (None, 0.25), (-0.5, 0.5)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_clamp_backward_matches_the_oracle_and_autodiff(dtype: str, bounds: tuple[Any, Any]
                                                        ) -> None:
    lo, hi = bounds
    rng = _rng(13)
    x = _rounded(rng.standard_normal((4, 7)), dtype)
    x[0, 0] = np.nan
    x[1, :2] = [0.0, 0.25]  # on the bounds: the gradient passes
    x = _rounded(x, dtype)
    g = _rounded(rng.standard_normal((4, 7)), dtype)
    inside = np.ones(x.shape, bool)
    if lo is not None:
        inside &= x >= lo
    if hi is not None:
        inside &= x <= hi
    out = K[cops.clamp_backward](_np(g, dtype), _np(x, dtype), min=lo, max=hi)
    assert out.dtype == _np(g, dtype).dtype
    np.testing.assert_array_equal(_f64(out), np.where(inside, g, 0.0))
    dt = xt_dtype(dtype)

    def run() -> np.ndarray:
        xt = ember.tensor(x, dtype=dt, device=AD, requires_grad=True)
        return _f64((xt.clamp(lo, hi) * ember.tensor(g, dtype=dt, device=AD)).sum()
                    .backward()[xt])

    a, b = _both(run)
    np.testing.assert_array_equal(a, b)


def maxpool_grad_oracle(g: np.ndarray, idx: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    n, c, h, w = shape
    out = np.zeros((n, c, h * w))
    for i in range(n):
        for j in range(c):
            np.add.at(out[i, j], idx[i, j].reshape(-1), g[i, j].reshape(-1))
    return out.reshape(shape)


@pytest.mark.parametrize("geom", [dict(kernel_size=2), dict(kernel_size=3, stride=1, padding=1),
                                  dict(kernel_size=(3, 2), stride=(2, 1), dilation=(1, 2),
                                       ceil_mode=True)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_max_pool2d_backward_matches_the_oracle_and_autodiff(dtype: str, geom: dict[str, Any]
                                                             ) -> None:
    rng = _rng(14)
    x = rng.standard_normal((2, 3, 7, 6))
    dt = xt_dtype(dtype)
    values, idx = F.max_pool2d(ember.tensor(x, dtype=dt), return_indices=True, **geom)
    g = _rounded(rng.standard_normal(values.shape), dtype)
    # the forward's geometry: the kernel's guard checks g's shape against it (issue 41)
    pair = lambda v: v if isinstance(v, tuple) else (v, v)  # noqa: E731
    k = pair(geom["kernel_size"])
    params = dict(kernel_size=k, stride=pair(geom.get("stride", k)),
                  padding=pair(geom.get("padding", 0)), dilation=pair(geom.get("dilation", 1)),
                  ceil_mode=geom.get("ceil_mode", False))
    dx = K[cops.max_pool2d_backward](_np(g, dtype), idx.payload, _np(x, dtype), **params)
    assert dx.dtype == _np(x, dtype).dtype and dx.shape == x.shape
    _close(dx, maxpool_grad_oracle(g, idx.numpy(), x.shape), dtype, 4)

    def run() -> np.ndarray:
        xt = ember.tensor(x, dtype=dt, device=AD, requires_grad=True)
        out = F.max_pool2d(xt, **geom)
        return _f64((out * ember.tensor(g, dtype=dt, device=AD)).sum().backward()[xt])

    a, b = _both(run)
    _agree(a, b, dtype, 4)


def maxpool_first_max_grad(x: np.ndarray, g: np.ndarray, k: int, s: int, p: int) -> np.ndarray:
    """Each window's gradient added at its first maximum (float64 loops; square windows)."""
    h, w = x.shape[2:]
    out = np.zeros(x.shape)
    for i, j, oy, ox in np.ndindex(*g.shape):
        best, at = -np.inf, None
        for a in range(k):
            for b in range(k):
                y, z = oy * s - p + a, ox * s - p + b
                if 0 <= y < h and 0 <= z < w and (at is None or x[i, j, y, z] > best):
                    best, at = x[i, j, y, z], (y, z)
        assert at is not None
        out[i, j, at[0], at[1]] += g[i, j, oy, ox]
    return out


def test_max_pool2d_without_indices_runs_the_values_kernel_and_autodiff_still_has_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # on cpu (no gradient can be asked for) the values-only kernel runs; on autodiff<cpu> the
    # indices kernel does, and the gradient lands on each window's first maximum
    cpu = ember.device("cpu")
    calls: list[str] = []
    kernels = cpu.backend.kernels
    for op in (cops.max_pool2d_values, ember.ops.nn.max_pool2d):
        monkeypatch.setitem(kernels, op, (lambda f, name: lambda *a, **kw: (
            calls.append(name), f(*a, **kw))[1])(kernels[op], op.name))
    rng = _rng(15)
    x = rng.standard_normal((2, 3, 9, 8))
    x[0, 1, 2:4, 2:4] = 1.5  # ties: the first position wins
    geom = dict(kernel_size=3, stride=2, padding=1)
    want = ember.tensor(x, device="cpu")
    values = F.max_pool2d(want, **geom)
    assert calls == ["max_pool2d_values"]
    np.testing.assert_array_equal(
        values.numpy(), F.max_pool2d(want, return_indices=True, **geom)[0].numpy())
    calls.clear()
    xt = ember.tensor(x, device=AD, requires_grad=True)
    out = F.max_pool2d(xt, **geom)
    assert calls == ["max_pool2d"]
    g = rng.standard_normal(out.shape)
    dx = (out * ember.tensor(g, device=AD)).sum().backward()[xt].numpy()
    np.testing.assert_allclose(dx, maxpool_first_max_grad(x, g, 3, 2, 1), rtol=1e-12,
                               atol=1e-12)
    np.testing.assert_array_equal(out.numpy(), values.numpy())


def conv_weight_grad_oracle(g: np.ndarray, x: np.ndarray, wshape: tuple[int, ...],
                            stride: tuple[int, int], padding: tuple[int, int],
                            dilation: tuple[int, int], groups: int) -> np.ndarray:
    o, cg, kh, kw = wshape
    og = o // groups
    xp = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    oh, ow = g.shape[2:]
    dw = np.zeros(wshape)
    for oc in range(o):
        grp = oc // og
        for c in range(cg):
            for i in range(kh):
                for j in range(kw):
                    r0, c0 = i * dilation[0], j * dilation[1]
                    patch = xp[:, grp * cg + c, r0:r0 + (oh - 1) * stride[0] + 1:stride[0],
                               c0:c0 + (ow - 1) * stride[1] + 1:stride[1]]
                    dw[oc, c, i, j] = (g[:, oc] * patch).sum()
    return dw


CONV = [((2, 4, 7, 6), (6, 4, 3, 3), (1, 1), (1, 1), (1, 1), 1),
        ((2, 4, 9, 8), (4, 2, 3, 2), (2, 1), (0, 1), (1, 2), 2),
        ((1, 3, 5, 5), (2, 3, 1, 1), (2, 2), (0, 0), (1, 1), 1)]


@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups", CONV)
@pytest.mark.parametrize("dtype", FLOATS)
def test_conv2d_weight_grad_matches_the_oracle_and_autodiff(
        dtype: str, xs: tuple[int, ...], ws: tuple[int, ...], stride: tuple[int, int],
        padding: tuple[int, int], dilation: tuple[int, int], groups: int) -> None:
    rng = _rng(15)
    x, w = _rounded(rng.standard_normal(xs), dtype), _rounded(rng.standard_normal(ws), dtype)
    dt = xt_dtype(dtype)
    out = F.conv2d(ember.tensor(x, dtype=dt), ember.tensor(w, dtype=dt), stride=stride,
                   padding=padding, dilation=dilation, groups=groups)
    g = _rounded(rng.standard_normal(out.shape), dtype)
    dw = K[cops.conv2d_weight_grad](_np(g, dtype), _np(x, dtype), _np(w, dtype), stride=stride,
                                    padding=padding, dilation=dilation, groups=groups)
    assert dw.dtype == _np(w, dtype).dtype and dw.shape == w.shape
    want = conv_weight_grad_oracle(g, x, ws, stride, padding, dilation, groups)
    _close(dw, want, dtype, 8 * math.sqrt(g.size))

    def run() -> np.ndarray:
        xt = ember.tensor(x, dtype=dt, device=AD)
        wt = ember.tensor(w, dtype=dt, device=AD, requires_grad=True)
        y = F.conv2d(xt, wt, stride=stride, padding=padding, dilation=dilation, groups=groups)
        return _f64((y * ember.tensor(g, dtype=dt, device=AD)).sum().backward()[wt])

    a, b = _both(run)
    _agree(a, b, dtype, 4 * math.sqrt(g.size))


def test_conv2d_weight_grad_names_mismatched_shapes() -> None:
    with pytest.raises(ShapeError, match=r"^conv2d_weight_grad: g must have the convolution.s "
                       r"output shape \(2, 6, 3, 3\) \(input shape\(s\) \(2, 5, 3, 3\)"):
        K[cops.conv2d_weight_grad](np.ones((2, 5, 3, 3)), np.ones((2, 4, 5, 5)),
                                   np.ones((6, 4, 3, 3)), stride=(1, 1), padding=(0, 0),
                                   dilation=(1, 1), groups=1)


# -- Adam ---------------------------------------------------------------------------------------


adam_oracle = adam_step  # the float64 oracle of one update


ADAM = [dict(wd=0.0, decoupled=False, maximize=False), dict(wd=0.1, decoupled=False,
                                                            maximize=True),
        dict(wd=0.05, decoupled=True, maximize=False)]


@pytest.mark.parametrize("opts", ADAM)
@pytest.mark.parametrize("dtype", FLOATS)
def test_adam_kernels_match_the_oracle(dtype: str, opts: dict[str, Any]) -> None:
    rng = _rng(16)
    shapes = [(3, 4), (5,), (), (0, 2)]
    tensors = [[_rounded(rng.standard_normal(s), dtype) for s in shapes] for _ in range(3)]
    ps, gs, ms = tensors
    vs = [_rounded(np.abs(rng.standard_normal(s)), dtype) for s in shapes]
    t, lr, b1, b2, eps = 3, 0.01, 0.9, 0.999, 1e-8
    params = dict(lr=lr, beta1=b1, beta2=b2, eps=eps, weight_decay=opts["wd"],
                  decoupled=opts["decoupled"], maximize=opts["maximize"],
                  step_size=lr / (1 - b1 ** t), bias_correction2_sqrt=math.sqrt(1 - b2 ** t))
    wants = [adam_oracle(p, g, m, v, t, lr, b1, b2, eps, opts["wd"], opts["decoupled"],
                         opts["maximize"]) for p, g, m, v in zip(ps, gs, ms, vs, strict=True)]
    inputs = [[_np(a, dtype) for a in group] for group in (ps, gs, ms, vs)]
    outs = K[cops.adam_steps](*(a for group in inputs for a in group), **params)
    n = len(shapes)
    assert len(outs) == 3 * n
    for i, want in enumerate(wants):
        single = K[cops.adam_step](*(group[i] for group in inputs), **params)
        step = np.asarray(t, np.float32)
        capt = K[cops.adam_step_capturable](
            *(group[i] for group in inputs), step, lr=lr, beta1=b1, beta2=b2, eps=eps,
            weight_decay=opts["wd"], decoupled=opts["decoupled"], maximize=opts["maximize"])
        for got in ((outs[i], outs[n + i], outs[2 * n + i]), single, capt):
            for a, w in zip(got, want, strict=True):
                assert a.dtype == inputs[0][i].dtype and a.shape == shapes[i]
                _close(a, w, dtype, 4)
    # kernels never write into their inputs
    for group, orig in zip(inputs, (ps, gs, ms, vs), strict=True):
        for a, o in zip(group, orig, strict=True):
            np.testing.assert_array_equal(_f64(a), o)


def test_adam_steps_names_mismatched_tensors() -> None:
    params = dict(lr=0.1, beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.0, decoupled=False,
                  maximize=False, step_size=1.0, bias_correction2_sqrt=0.1)
    with pytest.raises(ShapeError, match="adam_steps: parameter, gradient and moments"):
        K[cops.adam_steps](np.ones(2), np.ones(3), np.ones(2), np.ones(2), **params)
    with pytest.raises(ValueError, match="adam_steps: expected four lists of n tensors"):
        K[cops.adam_steps](np.ones(2), np.ones(2), np.ones(2), **params)


@contextmanager
def counting(op: Any) -> Iterator[list[int]]:
    """Count the calls of ``op``'s cpu kernel."""
    kernels = ember.device("cpu").backend.kernels
    kernel, calls = kernels[op], [0]

    def counted(*args: Any, **params: Any) -> Any:
        calls[0] += 1
        return kernel(*args, **params)

    kernels[op] = counted
    try:
        yield calls
    finally:
        kernels[op] = kernel


@pytest.mark.parametrize("opts", [dict(cls="Adam", weight_decay=0.0),
                                  dict(cls="AdamW", weight_decay=0.1),
                                  dict(cls="Adam", weight_decay=0.1, capturable=True),
                                  dict(cls="Adam", weight_decay=0.0, maximize=True)])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_adam_optimizer_on_the_kernels_agrees_with_the_op_by_op_update(
        dtype: str, opts: dict[str, Any]) -> None:
    opts = dict(opts)
    cls = getattr(ember.optim, opts.pop("cls"))
    rng = _rng(17)
    shapes = [(4, 3), (3,), (2, 2, 2)]
    init = [rng.standard_normal(s) for s in shapes]
    grads = [[rng.standard_normal(s) for s in shapes] for _ in range(3)]
    dt = xt_dtype(dtype)

    def run() -> list[np.ndarray]:
        ps = [ember.tensor(a, dtype=dt) for a in init]
        opt = cls(ps, lr=0.05, **opts)
        for step in grads:
            opt.step({p: ember.tensor(g, dtype=dt) for p, g in zip(ps, step, strict=True)})
        return [_f64(p) for p in ps]

    # one op a step for all parameters (capturable: they share the step count on the device)
    op = cops.adam_steps_capturable if opts.get("capturable") else cops.adam_steps
    with counting(op) as calls:
        fused = run()
    assert calls[0] == 3
    with decomposed():
        plain = run()
    for a, b in zip(fused, plain, strict=True):
        _agree(a, b, dtype, 4)


# -- erf ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
def test_erf_matches_the_c_library_within_two_ulps(dtype: str) -> None:
    x = np.concatenate([np.linspace(-6.5, 6.5, 4001), np.geomspace(1e-30, 1e-2, 50),
                        -np.geomspace(1e-30, 1e-2, 50), [0.0, -0.0, np.inf, -np.inf, 30.0]])
    xr = _rounded(x, dtype)
    got = ember.tensor(xr, dtype=xt_dtype(dtype)).erf()
    assert got.dtype == xt_dtype(dtype)
    want = np.array([math.erf(v) for v in xr])
    # ulps of the dtype at the C library's value: scipy's float64 erf is within 2 of it (both
    # are within ~1 of the truth), its float32 erf within ~1.05; half types round that float32
    # result, so they land on a neighbour of the value
    bits, emin = {"float64": (52, -1022), "float32": (23, -126), "float16": (10, -14),
                  "bfloat16": (7, -126)}[dtype]
    with np.errstate(divide="ignore"):
        exponent = np.maximum(np.floor(np.log2(np.abs(want))), emin)
    ulp = 2.0 ** (exponent - bits)
    err = np.abs(_f64(got) - want)
    bad = err > (2.05 if dtype == "float64" else 1.1) * ulp
    assert not bad.any(), (xr[bad], err[bad] / ulp[bad])
    nan = ember.tensor([np.nan], dtype=xt_dtype(dtype)).erf()
    assert np.isnan(_f64(nan)).all()
    assert _f64(ember.tensor(0.5, dtype=xt_dtype(dtype)).erf()).shape == ()
