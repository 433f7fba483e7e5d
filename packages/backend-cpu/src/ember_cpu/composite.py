"""Composite ops as one numpy kernel each (`ember.ops.composite`): the softmax family, the
norms, cross entropy and their backwards, ``linear``, ``clamp_backward``, the pooling and
convolution weight gradients, and (from `ember_cpu.optim`) the fused optimizer steps.

core's decompositions of these run five to twenty primitive ops, each a Python dispatch of
10-30 µs and a fresh temporary; here each op is one dispatch and a few numpy passes, updating
its own temporaries in place (never its inputs).  float32 computes in float32 and float64 in
float64; float16 / bfloat16 compute in float32 and round once at the end, and their row
statistics (``mean``, ``rstd``, ``lse``, ``count``) stay float32, as the op docstrings say.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from ember.backend import DTypeError, ShapeError, rows
from ember.ops import check_shapes
from ember.ops import composite as cops

from . import _blas, _conv_jit, _rows, optim
from ._common import F32, F64, LOW, quiet, wide
from ._jit import clamp_grad
from .nn import shifted_cols

__all__ = ["KERNELS"]

_EMPTY_AXIS = "has no elements along dim"


def _stat(dt: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype of a row statistic of a ``dt`` input."""
    return F32 if dt in LOW else dt


def _out(a: np.ndarray, dt: np.dtype[Any]) -> np.ndarray:
    """``a`` (a kernel's own float32/float64 buffer) in the output dtype ``dt``."""
    return a.astype(dt) if a.dtype != dt else a


def _float(op: str, *arrays: np.ndarray) -> None:
    """Raise unless every array has the first one's floating dtype."""
    dt = arrays[0].dtype
    if dt.kind != "f" and dt not in LOW:
        raise DTypeError(f"{op}: needs floating-point inputs, got {dt}")
    for a in arrays[1:]:
        if a.dtype != dt:
            raise DTypeError(f"{op}: inputs must share one dtype, got "
                             f"{', '.join(str(b.dtype) for b in arrays)}")


def _same_shape(op: str, a: np.ndarray, b: np.ndarray, names: str) -> None:
    if a.shape != b.shape:
        raise ShapeError(f"{op}: {names} must share one shape, got {a.shape} and {b.shape}")


def _axis(op: str, x: np.ndarray, dim: int) -> int:
    if not 0 <= dim < max(x.ndim, 1):
        raise ShapeError(f"{op}: dim {dim} out of range for input of shape {x.shape}")
    return dim


def _ir(name: str, arrays: list[np.ndarray], params: dict[str, Any]) -> list[np.ndarray] | None:
    """The outputs of row kernel ``name`` from its row program (`ember_cpu._rows`, numba),
    or ``None`` while that is not compiled yet (the caller's numpy path runs meanwhile).

    The kernels that call this are those whose compiled row program is faster than their
    numpy path (docs/architecture.md has the figures); the softmax family's forward, its
    log-softmax backward and cross entropy stay numpy's: numba's ``exp`` is scalar here."""
    return _rows.run(rows.expand(name, [a.dtype.name for a in arrays], params), arrays)


# -- softmax family -----------------------------------------------------------------------------

#: rows this short are reduced column by column: numpy's reductions along a short last axis
#: pay ~30 ns a row (a [16384, 4] max takes ~0.6 ms, the column loop ~0.05 ms)
_SHORT = 8


def _rsum(a: np.ndarray, axis: int) -> np.ndarray:
    """``a.sum(axis, keepdims=True)``."""
    c = a.shape[axis]
    if axis == a.ndim - 1 and 1 < c <= _SHORT:
        out = a[..., :1].copy()
        for j in range(1, c):
            out += a[..., j:j + 1]
        return out
    total: np.ndarray = a.sum(axis=axis, keepdims=True)
    return total


def _rmax(a: np.ndarray, axis: int) -> np.ndarray:
    """``a.max(axis, keepdims=True)`` (nan wins, as numpy's)."""
    c = a.shape[axis]
    if axis == a.ndim - 1 and 1 < c <= _SHORT:
        out = a[..., :1].copy()
        for j in range(1, c):
            np.maximum(out, a[..., j:j + 1], out=out)
        return out
    top: np.ndarray = a.max(axis=axis, keepdims=True)
    return top


def _exp_rows(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(exp(w - shift), shift, sum of the former)`` along ``axis`` (keepdims), where
    ``shift`` is each row's first value, or its maximum where that does not do.

    Each row is first shifted by its first value, not its maximum: the sum is then at least 1
    (nothing underflows that the maximum would have kept) and the maximum, a slow reduction,
    is needed only where the sum overflowed or a row holds nan or inf; those rows' results are
    then recomputed with it, which gives nan exactly where core's decomposition does.
    """
    shift = np.take(w, [0], axis=axis)
    e = np.subtract(w, shift)
    np.exp(e, out=e)
    s = _rsum(e, axis)
    if not np.isfinite(s).all():
        shift = _rmax(w, axis)
        np.subtract(w, shift, out=e)
        np.exp(e, out=e)
        s = _rsum(e, axis)
    return e, shift, s


# -- softmax family -----------------------------------------------------------------------------


@quiet
def softmax(x: np.ndarray, dim: int) -> np.ndarray:
    """``exp(x - max) / sum(exp(x - max))`` along ``dim``."""
    _float("softmax", x)
    if x.ndim == 0:
        return softmax(x.reshape(1), 0).reshape(())
    _axis("softmax", x, dim)
    if x.size == 0:
        return np.empty(x.shape, x.dtype)
    e, _, s = _exp_rows(wide(x), dim)
    e /= s
    return _out(e, x.dtype)


@quiet
def log_softmax(x: np.ndarray, dim: int) -> np.ndarray:
    """``x - max - log(sum(exp(x - max)))`` along ``dim``."""
    _float("log_softmax", x)
    if x.ndim == 0:
        return log_softmax(x.reshape(1), 0).reshape(())
    _axis("log_softmax", x, dim)
    if x.size == 0:
        return np.empty(x.shape, x.dtype)
    w = wide(x)
    _, shift, s = _exp_rows(w, dim)
    np.log(s, out=s)
    s += shift
    return _out(np.subtract(w, s), x.dtype)


def _rows_pair(op: str, y: np.ndarray, g: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    _float(op, y, g)
    _same_shape(op, y, g, "y and g")
    _axis(op, y, dim)
    return wide(y), wide(g)


@quiet
def softmax_backward(y: np.ndarray, g: np.ndarray, dim: int) -> np.ndarray:
    """``y * (g - sum(g * y, dim))``."""
    if y.ndim == 0:
        return softmax_backward(y.reshape(1), g.reshape(1), 0).reshape(())
    yw, gw = _rows_pair("softmax_backward", y, g, dim)
    if dim == y.ndim - 1 and y.size:
        out = _ir("softmax_backward", [y, g], {})
        if out is not None:
            return out[0]
    t = np.multiply(gw, yw)
    if t.size:
        np.subtract(gw, _rsum(t, dim), out=t)
        t *= yw
    return _out(t, y.dtype)


@quiet
def log_softmax_backward(y: np.ndarray, g: np.ndarray, dim: int) -> np.ndarray:
    """``g - exp(y) * sum(g, dim)``."""
    if y.ndim == 0:
        return log_softmax_backward(y.reshape(1), g.reshape(1), 0).reshape(())
    yw, gw = _rows_pair("log_softmax_backward", y, g, dim)
    t = np.exp(yw)
    if t.size:
        t *= _rsum(gw, dim)
        np.subtract(gw, t, out=t)
    return _out(t, y.dtype)


# -- layer norm / RMS norm ----------------------------------------------------------------------


def _norm_rows(op: str, x: np.ndarray, ndim: int) -> tuple[tuple[int, ...], int, np.ndarray]:
    """The leading shape, the row length and ``x`` as float32/64 ``[rows, n]``."""
    if not 1 <= ndim <= x.ndim:
        raise ShapeError(f"{op}: ndim={ndim} normalised axes for input of shape {x.shape}")
    lead = x.shape[:x.ndim - ndim]
    n = math.prod(x.shape[x.ndim - ndim:])
    return lead, n, wide(x).reshape(math.prod(lead), n)


def _affine(op: str, x: np.ndarray, ndim: int, name: str, t: np.ndarray) -> np.ndarray:
    """A weight or bias checked against the normalised shape, flat, in the compute dtype."""
    shape = x.shape[x.ndim - ndim:]
    if t.shape != shape or t.dtype != x.dtype:
        raise ShapeError(f"{op}: {name} of shape {t.shape} and dtype {t.dtype} must have the "
                         f"normalised shape {shape} and the input's dtype {x.dtype}")
    return wide(t).reshape(-1)


def _row_stat(op: str, stat: np.ndarray, x: np.ndarray, lead: tuple[int, ...],
              name: str) -> np.ndarray:
    if stat.shape != lead:
        raise ShapeError(f"{op}: {name} of shape {stat.shape} does not match input "
                         f"{x.shape} without its normalised axes ({lead})")
    return stat.reshape(-1, 1)


@quiet
def layer_norm(x: np.ndarray, *wb: np.ndarray, ndim: int, eps: float, weight: bool,
               bias: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``((x - mean) * rstd) * weight + bias`` over the last ``ndim`` axes, with
    ``rstd = 1 / sqrt(var + eps)`` (biased variance); returns ``(y, mean, rstd)``."""
    _float("layer_norm", x)
    if len(wb) != int(weight) + int(bias):
        raise ValueError(f"layer_norm: weight={weight}, bias={bias} but {len(wb)} optional "
                         f"inputs")
    lead, n, rows = _norm_rows("layer_norm", x, ndim)
    w = _affine("layer_norm", x, ndim, "weight", wb[0]) if weight else None
    b = _affine("layer_norm", x, ndim, "bias", wb[-1]) if bias else None
    sd = _stat(x.dtype)
    if n == 0:  # the mean of nothing: nan statistics, as numpy's mean
        nan = np.full(lead, np.nan, sd)
        return np.empty(x.shape, x.dtype), nan, nan.copy()
    got = _ir("layer_norm", [x.reshape(*lead, n), *(t.reshape(n) for t in wb)],
              {"eps": eps, "weight": weight, "bias": bias})
    if got is not None:
        return got[0].reshape(x.shape), got[1], got[2]
    mean = _rsum(rows, 1)
    mean /= n
    c = np.subtract(rows, mean)
    sq = np.multiply(c, c)
    var = _rsum(sq, 1)
    var /= n
    var += eps
    rstd = np.sqrt(var, out=var)
    np.reciprocal(rstd, out=rstd)
    y = np.multiply(c, rstd, out=c)
    if w is not None:
        y *= w
    if b is not None:
        y += b
    return (_out(y, x.dtype).reshape(x.shape), _out(mean.reshape(lead), sd),
            _out(rstd.reshape(lead), sd))


@quiet
def layer_norm_backward(g: np.ndarray, x: np.ndarray, mean: np.ndarray, rstd: np.ndarray,
                        *w: np.ndarray, ndim: int, weight: bool, affine: bool
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dx, dweight, dbias)``: with ``xhat = (x - mean) * rstd`` and ``h = g * weight``,
    ``dx = rstd * (h - mean(h) - xhat * mean(h * xhat))``, ``dweight = sum(g * xhat)``,
    ``dbias = sum(g)`` over the leading axes (empty ``(0,)`` unless ``affine``)."""
    op = "layer_norm_backward"
    _float(op, g, x)
    _same_shape(op, g, x, "g and x")
    lead, n, xr = _norm_rows(op, x, ndim)
    gr = wide(g).reshape(xr.shape)
    m = _row_stat(op, mean, x, lead, "mean")
    r = _row_stat(op, rstd, x, lead, "rstd")
    wf = _affine(op, x, ndim, "weight", w[0]) if weight else None
    shape = x.shape[x.ndim - ndim:]
    got = None if not n else _ir(op, [g.reshape(xr.shape), x.reshape(xr.shape), mean.reshape(-1),
                                      rstd.reshape(-1), *(t.reshape(n) for t in w)],
                                 {"weight": weight})
    if got is not None:
        dx = got[0].reshape(x.shape)
        if not affine:
            return dx, np.empty((0,), x.dtype), np.empty((0,), x.dtype)
        xhat = np.subtract(xr, m)
        xhat *= r
        xhat *= gr
        return (dx, _out(xhat.sum(axis=0), x.dtype).reshape(shape),
                _out(gr.sum(axis=0), x.dtype).reshape(shape))
    xhat = np.subtract(xr, m)
    xhat *= r
    t = np.multiply(gr, xhat)
    if affine:
        dw = _out(t.sum(axis=0), x.dtype).reshape(shape)
        db = _out(gr.sum(axis=0), x.dtype).reshape(shape)
    else:
        dw = db = np.empty((0,), x.dtype)
    h = gr if wf is None else gr * wf
    if wf is not None:
        np.multiply(h, xhat, out=t)  # t = h * xhat (it was g * xhat)
    if n:
        b = _rsum(t, 1)
        b /= n
        a = _rsum(h, 1)
        a /= n
        np.subtract(h, a, out=t)
        xhat *= b
        t -= xhat
        t *= r
    return _out(t, x.dtype).reshape(x.shape), dw, db


@quiet
def rms_norm(x: np.ndarray, *w: np.ndarray, ndim: int, eps: float,
             weight: bool) -> tuple[np.ndarray, np.ndarray]:
    """``x * rstd * weight`` with ``rstd = 1 / sqrt(mean(x**2) + eps)`` over the last ``ndim``
    axes; returns ``(y, rstd)``."""
    _float("rms_norm", x)
    if len(w) != int(weight):
        raise ValueError(f"rms_norm: weight={weight} but {len(w)} optional inputs")
    lead, n, rows = _norm_rows("rms_norm", x, ndim)
    wf = _affine("rms_norm", x, ndim, "weight", w[0]) if weight else None
    sd = _stat(x.dtype)
    if n == 0:
        return np.empty(x.shape, x.dtype), np.full(lead, np.nan, sd)
    got = _ir("rms_norm", [x.reshape(*lead, n), *(t.reshape(n) for t in w)],
              {"eps": eps, "weight": weight})
    if got is not None:
        return got[0].reshape(x.shape), got[1]
    y = np.multiply(rows, rows)
    ms = _rsum(y, 1)
    ms /= n
    ms += eps
    rstd = np.sqrt(ms, out=ms)
    np.reciprocal(rstd, out=rstd)
    np.multiply(rows, rstd, out=y)
    if wf is not None:
        y *= wf
    return _out(y, x.dtype).reshape(x.shape), _out(rstd.reshape(lead), sd)


@quiet
def rms_norm_backward(g: np.ndarray, x: np.ndarray, rstd: np.ndarray, *w: np.ndarray,
                      ndim: int, weight: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(dx, dweight)``: with ``h = g * weight``, ``dx = rstd * (h - x * rstd**2 *
    mean(h * x))`` and ``dweight = sum(g * x * rstd)`` (empty ``(0,)`` without a weight)."""
    op = "rms_norm_backward"
    _float(op, g, x)
    _same_shape(op, g, x, "g and x")
    lead, n, xr = _norm_rows(op, x, ndim)
    gr = wide(g).reshape(xr.shape)
    r = _row_stat(op, rstd, x, lead, "rstd")
    wf = _affine(op, x, ndim, "weight", w[0]) if weight else None
    shape = x.shape[x.ndim - ndim:]
    got = None if not n else _ir(op, [g.reshape(xr.shape), x.reshape(xr.shape),
                                      rstd.reshape(-1), *(t.reshape(n) for t in w)],
                                 {"weight": weight})
    if got is not None:
        dx = got[0].reshape(x.shape)
        if wf is None:
            return dx, np.empty((0,), x.dtype)
        t = np.multiply(xr, r)
        t *= gr
        return dx, _out(t.sum(axis=0), x.dtype).reshape(shape)
    xs = np.multiply(xr, r)  # x * rstd
    if wf is not None:
        t = np.multiply(gr, xs)
        dw = _out(t.sum(axis=0), x.dtype).reshape(shape)
        h = gr * wf
    else:
        dw, h = np.empty((0,), x.dtype), gr
    if n:
        t = np.multiply(h, xs)
        c = _rsum(t, 1)  # mean(h * x) * rstd
        c /= n
        xs *= c
        np.subtract(h, xs, out=t)
        t *= r
    else:
        t = np.empty(gr.shape, gr.dtype)
    return _out(t, x.dtype).reshape(x.shape), dw


# -- cross entropy ------------------------------------------------------------------------------

_REDUCTIONS = ("mean", "sum", "none")


def _check_targets(op: str, z: np.ndarray, t: np.ndarray, ignore_index: int,
                   reduction: str) -> np.ndarray:
    """The mask of rows whose target is not ignored, after checking shapes and classes."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if z.ndim != 2 or t.shape != z.shape[:1]:
        raise ShapeError(f"{op}: expected logits [M, C] and target [M], got {z.shape} and "
                         f"{t.shape}")
    if t.dtype.kind not in "iu":
        raise DTypeError(f"{op}: target must be integer class indices, got {t.dtype}")
    valid: np.ndarray = t != ignore_index
    if t.size:
        picked = t[valid]
        if picked.size and (picked.min() < 0 or picked.max() >= z.shape[1]):
            raise IndexError(f"{op}: target class out of range [0, {z.shape[1]}) (min "
                             f"{picked.min()}, max {picked.max()}) for logits {z.shape}")
    return valid


@quiet
def cross_entropy(z: np.ndarray, t: np.ndarray, ignore_index: int, label_smoothing: float,
                  reduction: str, float32_loss: bool = False
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(loss, lse, count)`` of integer targets: each row's loss is ``(1 - s) (lse - z[t]) +
    s (lse - mean(z))`` (``s`` the label smoothing), 0 on ignored rows; the loss in ``z``'s
    dtype, or in the statistics' with ``float32_loss``.

    Note: an ignored row adds exactly 0 even where its logits are nan or inf (PyTorch skips
    it, as the Triton kernel does); core's decomposition multiplies it by 0, which keeps nan.
    """
    op = "cross_entropy"
    _float(op, z)
    valid = _check_targets(op, z, t, ignore_index, reduction)
    m, c = z.shape
    sd = _stat(z.dtype)
    if c == 0 and m:
        raise ShapeError(f"{op}: logits {z.shape} have no classes")
    rows = np.arange(m)
    safe = np.where(valid, t, 0)
    if m:
        shifted, shift, lse_s = _exp_rows(wide(z), 1)
        np.log(lse_s, out=lse_s)  # log(sum(exp(z - shift)))
        np.subtract(wide(z), shift, out=shifted)
        shift, lse_s = shift[:, 0], lse_s[:, 0]
    else:
        shifted = np.empty((0, c), _stat(z.dtype))
        shift = lse_s = np.empty(0, shifted.dtype)
    loss = lse_s - shifted[rows, safe]
    if label_smoothing:
        smooth = _rsum(shifted, 1)[:, 0]
        smooth *= -label_smoothing / c
        smooth += lse_s * label_smoothing
        loss *= 1.0 - label_smoothing
        loss += smooth
    loss[~valid] = 0.0
    lse = lse_s + shift
    count = np.asarray(np.count_nonzero(valid), sd)
    ld = sd if float32_loss else z.dtype
    if reduction == "none":
        out = _out(loss, ld)
    else:
        total = loss.sum()
        out = np.asarray(total / count if reduction == "mean" else total).astype(ld)
    return out, _out(lse, sd), count


@quiet
def cross_entropy_backward(g: np.ndarray, z: np.ndarray, t: np.ndarray, lse: np.ndarray,
                           count: np.ndarray, ignore_index: int, label_smoothing: float,
                           reduction: str) -> np.ndarray:
    """``(softmax(z) - (1 - s) onehot(t) - s / C) * scale`` with ``scale`` = ``g / count``
    (mean), ``g`` (sum) or ``g[row]`` (none); exactly 0 on ignored rows."""
    op = "cross_entropy_backward"
    if g.dtype == F32 and z.dtype in LOW:  # the float32 loss of half logits (autocast)
        _float(op, z)
    else:
        _float(op, g, z)
    valid = _check_targets(op, z, t, ignore_index, reduction)
    m, c = z.shape
    want = (m,) if reduction == "none" else ()
    if g.shape != want or lse.shape != (m,) or count.shape != ():
        raise ShapeError(f"{op}: g {g.shape}, lse {lse.shape}, count {count.shape} do not fit "
                         f"logits {z.shape} with reduction={reduction!r}")
    w = wide(z)
    d = np.subtract(w, lse.astype(w.dtype, copy=False)[:, None])
    np.exp(d, out=d)
    if label_smoothing:
        d -= label_smoothing / c
    rows = np.nonzero(valid)[0]
    d[rows, t[rows]] -= 1.0 - label_smoothing
    scale = wide(g).astype(w.dtype, copy=True)
    if reduction == "mean":
        scale /= count.astype(w.dtype)
    if reduction == "none":
        d *= scale[:, None]
        d[~valid] = 0.0
    else:
        d *= scale
        if rows.size != m:
            d[~valid] = 0.0
    return _out(d, z.dtype)


# -- layers' maths ------------------------------------------------------------------------------


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``x @ w.T + b``: the bias added in place to the matmul's own result."""
    _float("linear", x, w, b)
    if x.ndim != 2 or w.ndim != 2 or b.shape != w.shape[:1] or x.shape[1] != w.shape[1]:
        raise ShapeError(f"linear: expected x [N, in], weight [out, in], bias [out], got "
                         f"{x.shape}, {w.shape}, {b.shape}")
    out = _blas.matmul(wide(x), wide(w).T, 2 * x.shape[0] * w.shape[0] * w.shape[1])
    out += wide(b)
    return _out(out, x.dtype)


@quiet  # bfloat16 flags nan comparisons as invalid
def clamp_backward(g: np.ndarray, x: np.ndarray, min: Any = None, max: Any = None
                   ) -> np.ndarray:
    """``g`` where ``min <= x <= max`` (bounds in ``x``'s dtype, as ``clamp``), else 0."""
    _float("clamp_backward", g, x)
    _same_shape("clamp_backward", g, x, "g and x")
    if min is None and max is None:
        return g
    if g.dtype == x.dtype and g.dtype in (F32, F64):  # one compiled pass
        lo = -np.inf if min is None else float(np.asarray(min).astype(x.dtype))
        hi = np.inf if max is None else float(np.asarray(max).astype(x.dtype))
        return clamp_grad(g, x, lo, hi)
    inside = None
    if min is not None:
        inside = np.greater_equal(x, np.asarray(min).astype(x.dtype))
    if max is not None:
        below = np.less_equal(x, np.asarray(max).astype(x.dtype))
        inside = below if inside is None else np.logical_and(inside, below, out=inside)
    out = np.zeros(g.shape, g.dtype)
    np.copyto(out, g, where=inside)
    return out


def max_pool2d_backward(g: np.ndarray, indices: np.ndarray, x: np.ndarray,
                        kernel_size: Any = None, stride: Any = None, padding: Any = None,
                        dilation: Any = None, ceil_mode: bool = False) -> np.ndarray:
    """Each window's gradient added at the position its index names in the ``H*W`` plane
    (the window geometry is already in ``indices``)."""
    op = "max_pool2d_backward"
    check_shapes(cops.max_pool2d_backward, [g.shape, indices.shape, x.shape], dict(
        kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation,
        ceil_mode=ceil_mode))
    _float(op, g, x)
    if (x.ndim != 4 or g.ndim != 4 or indices.shape != g.shape or g.shape[:2] != x.shape[:2]
            or indices.dtype.kind not in "iu"):
        raise ShapeError(f"{op}: expected g and integer indices [N, C, OH, OW] and x "
                         f"[N, C, H, W], got {g.shape}, {indices.shape} {indices.dtype}, "
                         f"{x.shape}")
    n, c, h, w = x.shape
    planes, hw = n * c, h * w
    if g.size == 0 or hw == 0:
        return np.zeros(x.shape, x.dtype)
    gw = wide(g)
    if gw.dtype == np.float32 or gw.dtype == np.float64:
        dx = np.zeros((planes, hw), gw.dtype)
        if not _conv_jit.max_pool2d_backward(
                np.ascontiguousarray(gw).reshape(planes, -1),
                np.ascontiguousarray(indices, np.int64).reshape(planes, -1), dx):
            raise IndexError(f"{op}: indices out of range [0, {hw}) for x {x.shape}")
        return _out(dx, x.dtype).reshape(x.shape)
    flat = indices.reshape(planes, -1).astype(np.int64)
    if flat.min() < 0 or flat.max() >= hw:
        raise IndexError(f"{op}: indices out of range [0, {hw}) for x {x.shape}")
    flat += (np.arange(planes, dtype=np.int64) * hw)[:, None]
    dx = np.bincount(flat.reshape(-1), weights=wide(g).reshape(-1), minlength=planes * hw)
    return dx.astype(x.dtype).reshape(x.shape)


def conv2d_weight_grad(g: np.ndarray, x: np.ndarray, w: np.ndarray, stride: Any = (1, 1),
                       padding: Any = (0, 0), dilation: Any = (1, 1),
                       groups: int = 1) -> np.ndarray:
    """``dw[O, C/groups, kh, kw]``: per group one matmul of ``g`` with the im2col matrix of
    ``x`` (every receptive field, batch and output positions on the contracted axis)."""
    op = "conv2d_weight_grad"
    # im2col's compiled loop has no bounds checks: the rule keeps every tap inside x
    check_shapes(cops.conv2d_weight_grad, [g.shape, x.shape, w.shape],
                 dict(stride=stride, padding=padding, dilation=dilation, groups=groups))
    _float(op, g, x, w)
    o, cg, kh, kw = w.shape if w.ndim == 4 else (0, 0, 0, 0)
    if (x.ndim != 4 or g.ndim != 4 or w.ndim != 4 or g.shape[:2] != (x.shape[0], o)
            or x.shape[1] != cg * groups or o % groups):
        raise ShapeError(f"{op}: g {g.shape}, x {x.shape} and w {w.shape} (groups={groups}) "
                         f"are not a conv2d's output gradient, input and weight")
    n = x.shape[0]
    oh, ow = g.shape[2:]
    kdim = cg * kh * kw
    if g.size == 0 or kdim == 0:
        return np.zeros(w.shape, w.dtype)
    xw, gw = wide(x), wide(g)
    full = [(x.shape[2 + a] + 2 * padding[a] - dilation[a] * ((kh, kw)[a] - 1) - 1)
            // stride[a] + 1 for a in (0, 1)]
    if oh > full[0] or ow > full[1]:
        raise ShapeError(f"{op}: g {g.shape} is larger than conv2d's output of x {x.shape}")
    if tuple(stride) == (1, 1):
        # the shifted-planes im2col (see `nn.shifted_cols`) and g laid out on its columns
        cols, hp, wp = shifted_cols(xw, (kh, kw), padding, dilation)
        gp = np.zeros((o, n, hp, wp), gw.dtype)
        gp[:, :, :oh, :ow] = gw.transpose(1, 0, 2, 3)
        # dw^T = cols @ gp^T per group (the faster orientation for OpenBLAS here)
        dwt = np.matmul(cols.reshape(groups, kdim, -1),
                        gp.reshape(groups, o // groups, -1).transpose(0, 2, 1))
        return _out(np.ascontiguousarray(dwt.transpose(0, 2, 1)), w.dtype).reshape(w.shape)
    # cols[G, cg*kh*kw, N*OH*OW] (im2col in one compiled pass, batch and output positions on
    # the contracted axis) and g as [G, O/G, N*OH*OW]: dw = g @ cols.T per group, one GEMM
    cols = np.empty((groups * kdim, n, oh, ow), xw.dtype)
    _conv_jit.im2col(np.ascontiguousarray(xw), cols,
                     (int(kh), int(kw), int(stride[0]), int(stride[1]), int(padding[0]),
                      int(padding[1]), int(dilation[0]), int(dilation[1])), batch_major=False)
    cols = cols.reshape(groups, kdim, n * oh * ow)
    gg: np.ndarray = gw.reshape(n, groups, o // groups, oh * ow).transpose(1, 2, 0, 3)
    gg = np.ascontiguousarray(gg).reshape(groups, o // groups, n * oh * ow)
    dw = np.matmul(gg, cols.transpose(0, 2, 1))
    return _out(dw, w.dtype).reshape(w.shape)


KERNELS: dict[Any, Any] = {
    cops.softmax: softmax,
    cops.log_softmax: log_softmax,
    cops.softmax_backward: softmax_backward,
    cops.log_softmax_backward: log_softmax_backward,
    cops.layer_norm: layer_norm,
    cops.layer_norm_backward: layer_norm_backward,
    cops.rms_norm: rms_norm,
    cops.rms_norm_backward: rms_norm_backward,
    cops.cross_entropy: cross_entropy,
    cops.cross_entropy_backward: cross_entropy_backward,
    cops.linear: linear,
    cops.clamp_backward: clamp_backward,
    cops.max_pool2d_backward: max_pool2d_backward,
    cops.conv2d_weight_grad: conv2d_weight_grad,
    **optim.KERNELS,
}
