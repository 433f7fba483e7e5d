"""Elementwise kernels: most map straight to a numpy ufunc (no Python frame on the hot path)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from ember.ops import elementwise as ew
from scipy.special import erf as _erf

from ._common import F32, F64, LOW, quiet, widen

__all__ = ["KERNELS", "erf"]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # exp overflows to inf for very negative x, and 1 / (1 + inf) is the right limit, 0.
    # One buffer, updated in place: this runs on every activation of a network.
    t = np.negative(x, out=np.empty(np.shape(x), x.dtype))
    np.exp(t, out=t)
    t += 1.0
    np.reciprocal(t, out=t)
    out: np.ndarray = t.astype(x.dtype, copy=False)
    return out


def _rsqrt(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.reciprocal(np.sqrt(x))
    return out


@quiet
def erf(x: np.ndarray) -> np.ndarray:
    """The error function: scipy's, in float64 for float64 and float32 otherwise (within ~1 ulp
    of the C library's ``erf`` in both); float16 / bfloat16 round the float32 result."""
    if x.dtype == F64 or x.dtype == F32:
        return np.asarray(_erf(x))
    return np.asarray(_erf(x.astype(F32))).astype(x.dtype)


def _keep_ints(fn: Any) -> Any:
    """floor/ceil/trunc/round: the identity on integers (numpy would return floats)."""

    def kernel(x: np.ndarray) -> np.ndarray:
        return x if x.dtype.kind in "iub" else fn(x)

    return kernel


def _int_pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind not in "iu" or b.dtype.kind == "u" or not (b < 0).any():
        power: np.ndarray = np.power(a, b)
        return power
    # Note: numpy refuses negative integer powers; PyTorch truncates 1 / a**|b| toward zero
    neg = b < 0
    out = np.power(a, np.where(neg, 0, b))
    one = np.ones((), a.dtype)
    odd = (b % 2) != 0
    inv = np.where(a == 1, one, np.where(a == -1, np.where(odd, -one, one), np.zeros((), a.dtype)))
    return np.where(neg, inv, out)


def _shift(fn: Callable[..., np.ndarray]) -> Any:
    def kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.dtype.kind == "b":  # numpy shifts bools as int8
            return fn(a.view(np.uint8), b.view(np.uint8)).astype(np.bool_)
        return fn(a, b)

    return kernel


def _clamp(x: np.ndarray, min: Any = None, max: Any = None) -> np.ndarray:
    # Note: nan stays nan (numpy's and PyTorch's clip); bounds are cast to x's dtype first
    dt = x.dtype
    lo = None if min is None else np.asarray(min).astype(dt)
    hi = None if max is None else np.asarray(max).astype(dt)
    if lo is None and hi is None:
        return x
    if dt not in LOW:
        # one-sided bounds (relu): maximum/minimum are ~2x faster than clip, same nan rule
        if hi is None and lo is not None:
            above: np.ndarray = np.maximum(x, lo)
            return above
        if lo is None and hi is not None:
            below: np.ndarray = np.minimum(x, hi)
            return below
    src = x.astype(F32) if dt in LOW else x
    return np.asarray(np.clip(src, lo, hi)).astype(dt, copy=False)


def _float(fn: Any) -> Any:
    """A float-only unary function: quiet, and computed in float32 for bfloat16 inputs."""
    return quiet(widen(fn))


KERNELS: dict[Any, Any] = {
    # float functions
    ew.exp: quiet(np.exp), ew.expm1: quiet(np.expm1), ew.log: quiet(np.log),
    ew.log1p: quiet(np.log1p), ew.sqrt: quiet(np.sqrt), ew.rsqrt: _float(_rsqrt),
    ew.sin: quiet(np.sin), ew.cos: quiet(np.cos), ew.tan: quiet(np.tan),
    ew.tanh: quiet(np.tanh), ew.asin: quiet(np.arcsin), ew.acos: quiet(np.arccos),
    ew.atan: quiet(np.arctan), ew.sinh: quiet(np.sinh), ew.cosh: quiet(np.cosh),
    ew.erf: erf, ew.sigmoid: _float(_sigmoid), ew.reciprocal: quiet(np.reciprocal),
    # numeric
    ew.neg: np.negative, ew.abs: np.absolute, ew.sign: np.sign,
    ew.floor: _keep_ints(np.floor), ew.ceil: _keep_ints(np.ceil),
    ew.round: _keep_ints(np.rint), ew.trunc: _keep_ints(np.trunc),
    # predicates
    ew.logical_not: np.logical_not, ew.isnan: np.isnan, ew.isinf: np.isinf,
    ew.bitwise_not: np.invert,
    # binary arithmetic.  Note: add/sub/mul stay bare ufuncs, the hottest ops, so inf - inf
    # or 0 * inf there raise numpy's RuntimeWarning unless the caller silences numpy.
    ew.add: np.add, ew.sub: np.subtract, ew.mul: np.multiply,
    ew.floordiv: quiet(np.floor_divide), ew.remainder: quiet(np.remainder),
    ew.pow: quiet(_int_pow), ew.div: quiet(np.true_divide), ew.atan2: quiet(np.arctan2),
    # ml_dtypes' bfloat16 loops flag nan operands of these as invalid: keep them quiet
    ew.maximum: quiet(np.maximum), ew.minimum: quiet(np.minimum),
    ew.eq: np.equal, ew.ne: np.not_equal, ew.lt: quiet(np.less), ew.le: quiet(np.less_equal),
    ew.gt: quiet(np.greater), ew.ge: quiet(np.greater_equal),
    ew.logical_and: np.logical_and, ew.logical_or: np.logical_or,
    ew.logical_xor: np.logical_xor,
    ew.bitwise_and: np.bitwise_and, ew.bitwise_or: np.bitwise_or,
    ew.bitwise_xor: np.bitwise_xor, ew.left_shift: _shift(np.left_shift),
    ew.right_shift: _shift(np.right_shift),
    ew.where: np.where, ew.clamp: quiet(_clamp),
}
