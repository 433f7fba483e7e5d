"""Elementwise composites under PyTorch's names: ``square``, ``exp2``, ``log2``, ``log10``,
``isfinite``, ``fmod``, ``frac``, ``hypot``, ``logaddexp``, ``lerp``, ``xlogy``, ``logit``,
``nan_to_num``, ``heaviside``, ``addcmul``, ... and the nan-skipping reductions ``nansum`` and
``nanmean``, with ``count_nonzero``.

Each is written with ember's primitives, so it runs (and differentiates) on every device.
"""

from __future__ import annotations

import math
from typing import Any

from . import _dtype as dt, _elementwise as _ew, _reduction as _red
from ._apply import Scalar, as_tensor_pair, cast, to_float
from ._errors import DTypeError
from ._tensor import Tensor

__all__ = ["addcdiv", "addcmul", "count_nonzero", "deg2rad", "exp2", "float_power", "fmod",
           "frac", "heaviside", "hypot", "isfinite", "isneginf", "isposinf", "lerp", "log10",
           "log2", "logaddexp", "logit", "nan_to_num", "nanmean", "nansum", "rad2deg", "square",
           "xlogy"]

_LN2 = math.log(2.0)
_LN10 = math.log(10.0)


def _floats(name: str, x: Tensor) -> None:
    if x._dtype.kind != "f":
        raise DTypeError(f"{name} needs a floating-point tensor, got {x._dtype.name}")


def square(x: Tensor) -> Tensor:
    """``x * x``; integer tensors stay integer and bool gives int64, as PyTorch.

    Examples
    --------
    >>> import ember
    >>> ember.square(ember.tensor([-3, 2])).tolist()
    [9, 4]
    """
    return x * x


def exp2(x: Tensor) -> Tensor:
    """``2 ** x`` (integers give float32).

    Examples
    --------
    >>> import ember
    >>> ember.exp2(ember.tensor([0, 3])).tolist()
    [1.0, 8.0]
    """
    return _ew.pow(2.0, to_float(x))


def log2(x: Tensor) -> Tensor:
    """Base-2 logarithm (integers give float32)."""
    return _ew.log(x) * (1.0 / _LN2)


def log10(x: Tensor) -> Tensor:
    """Base-10 logarithm (integers give float32)."""
    return _ew.log(x) * (1.0 / _LN10)


def isfinite(x: Tensor) -> Tensor:
    """True where ``x`` is neither nan nor infinite (always true for integers)."""
    if x._dtype.kind != "f":
        return _ew.ne(x, x) == 0  # all true, on x's device and shape
    return _ew.logical_not(_ew.logical_or(_ew.isnan(x), _ew.isinf(x)))


def isposinf(x: Tensor) -> Tensor:
    """True where ``x`` is ``+inf``."""
    return _ew.logical_and(_ew.isinf(x), x > 0)


def isneginf(x: Tensor) -> Tensor:
    """True where ``x`` is ``-inf``."""
    return _ew.logical_and(_ew.isinf(x), x < 0)


def fmod(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """C's remainder: ``a - trunc(a / b) * b``, with the sign of ``a`` (``remainder`` has the
    sign of ``b``).  Integer division by zero raises, as in PyTorch.

    Examples
    --------
    >>> import ember
    >>> ember.fmod(ember.tensor([-7, 7]), 3).tolist()
    [-1, 1]
    """
    x, y = as_tensor_pair(a, b)
    r = _ew.remainder(x, y)
    # r has the sign of y; where a and b differ in sign, C's result is r - y (exactly
    # representable, so the subtraction is exact)
    differ = _ew.logical_and(r != 0, _ew.ne(x < 0, y < 0))
    return _ew.where(differ, r - y, r)


def frac(x: Tensor) -> Tensor:
    """The fractional part, ``x - trunc(x)`` (with ``x``'s sign)."""
    _floats("frac", x)
    return x - _ew.trunc(x)


def hypot(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """``sqrt(a**2 + b**2)`` without overflow or underflow in the squares; infinite if either
    is infinite (even when the other is nan), as C's ``hypot``."""
    x, y = as_tensor_pair(a, b)
    _floats("hypot", x)
    ax, ay = _ew.abs(x), _ew.abs(y)
    m = _ew.maximum(ax, ay)
    scale = _ew.where(m == 0, 1.0, m)
    u, v = ax / scale, ay / scale
    out = m * _ew.sqrt(u * u + v * v)
    return _ew.where(_ew.logical_or(_ew.isinf(x), _ew.isinf(y)), math.inf, out)


def logaddexp(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """``log(exp(a) + exp(b))`` without overflow; the gradient is ``sigmoid(a - b)`` for ``a``
    (one half each at a tie), as PyTorch."""
    x, y = as_tensor_pair(a, b)
    _floats("logaddexp", x)
    # with an infinite or nan operand the answer is the larger one (nan if either is); the
    # formula runs on finite stand-ins there, so that inf - inf never happens
    finite = _ew.logical_and(isfinite(x), isfinite(y))
    xs, ys = _ew.where(finite, x, 0.0), _ew.where(finite, y, 0.0)
    out = _ew.maximum(xs, ys) + _ew.log1p(_ew.exp(-_ew.abs(xs - ys)))
    return _ew.where(finite, out, _ew.maximum(x, y))


def lerp(start: Tensor, end: Tensor | Scalar, weight: Tensor | Scalar) -> Tensor:
    """``start + weight * (end - start)``, computed from the nearer end as PyTorch does (so
    ``weight = 1`` gives ``end`` exactly)."""
    s, e = as_tensor_pair(start, end)
    diff = e - s
    if isinstance(weight, Tensor):
        return _ew.where(_ew.abs(weight) < 0.5, s + weight * diff, e - diff * (1 - weight))
    w = float(weight)
    return s + diff * w if abs(w) < 0.5 else e - diff * (1 - w)


def xlogy(x: Tensor | Scalar, y: Tensor | Scalar) -> Tensor:
    """``x * log(y)``, 0 where ``x`` is 0 (unless ``y`` is nan), as ``scipy.special.xlogy``."""
    a, b = as_tensor_pair(x, y)
    a, b = to_float(a), to_float(b)
    zero = _ew.logical_and(a == 0, _ew.logical_not(_ew.isnan(b)))
    # log(1) = 0 stands in for y where x is 0: no 0 * inf, no nan in the gradient
    return _ew.where(zero, 0.0, a * _ew.log(_ew.where(zero, 1.0, b)))


def logit(x: Tensor, eps: float | None = None) -> Tensor:
    """``log(x / (1 - x))``; with ``eps``, ``x`` is first clamped to ``[eps, 1 - eps]``."""
    p = to_float(x)
    if eps is not None:
        p = _ew.clamp(p, eps, 1.0 - eps)
    return _ew.log(p / (1.0 - p))


def nan_to_num(x: Tensor, nan: float = 0.0, posinf: float | None = None,
               neginf: float | None = None) -> Tensor:
    """nan, ``+inf`` and ``-inf`` replaced (by default by 0 and the dtype's largest and
    smallest finite values); integer tensors are returned as they are."""
    if x._dtype.kind != "f":
        return x
    info = _finfo(x._dtype)
    hi = float(info.max) if posinf is None else posinf
    lo = float(info.min) if neginf is None else neginf
    out = _ew.where(_ew.isnan(x), nan, x)
    return _ew.where(isposinf(x), hi, _ew.where(isneginf(x), lo, out))


def _finfo(d: dt.DType) -> Any:
    import numpy as np

    from ._host import numpy_dtype

    if d is dt.bfloat16:
        import ml_dtypes

        return ml_dtypes.finfo(ml_dtypes.bfloat16)  # type: ignore[no-untyped-call]  # untyped
    return np.finfo(numpy_dtype(d))


def deg2rad(x: Tensor) -> Tensor:
    """Degrees to radians (integers give float32)."""
    return to_float(x) * (math.pi / 180.0)


def rad2deg(x: Tensor) -> Tensor:
    """Radians to degrees (integers give float32)."""
    return to_float(x) * (180.0 / math.pi)


def heaviside(x: Tensor, values: Tensor | Scalar) -> Tensor:
    """0 where ``x < 0``, ``values`` where ``x == 0``, 1 where ``x > 0``."""
    if isinstance(values, Tensor) and values._dtype is not x._dtype:
        raise DTypeError(f"heaviside: x and values must have one dtype, got {x._dtype.name} "
                         f"and {values._dtype.name}")
    return _ew.where(x == 0, values, cast(x > 0, x._dtype))  # nan gives 0, as PyTorch


def float_power(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """``a ** b`` computed in float64, as PyTorch's ``float_power``."""
    x, y = as_tensor_pair(a, b)
    return _ew.pow(cast(x, dt.float64), cast(y, dt.float64))


def addcmul(x: Tensor, t1: Tensor, t2: Tensor, *, value: Scalar = 1) -> Tensor:
    """``x + value * t1 * t2``."""
    return x + (t1 * t2 if value == 1 else t1 * t2 * value)


def addcdiv(x: Tensor, t1: Tensor, t2: Tensor, *, value: Scalar = 1) -> Tensor:
    """``x + value * t1 / t2``; integer ``t1`` and ``t2`` are refused, as in PyTorch."""
    if t1._dtype.kind != "f" and t2._dtype.kind != "f":
        raise DTypeError("addcdiv: integer division of t1 by t2 is not supported; cast them "
                         f"to a floating dtype (got {t1._dtype.name} and {t2._dtype.name})")
    return x + (t1 / t2 if value == 1 else t1 / t2 * value)


# -- reductions ---------------------------------------------------------------------------------

def nansum(x: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """``sum`` with nan counted as zero.

    Examples
    --------
    >>> import ember
    >>> ember.nansum(ember.tensor([1.0, float("nan"), 2.0])).item()
    3.0
    """
    if x._dtype.kind == "f":
        x = _ew.where(_ew.isnan(x), 0.0, x)
    return _red.sum(x, dim, keepdim, dtype=dtype)


def nanmean(x: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """``mean`` of the values that are not nan (nan where every value is)."""
    if dtype is not None:
        x = cast(x, dt.as_dtype(dtype))
    _floats("nanmean", x)
    keep = _ew.logical_not(_ew.isnan(x))
    total = _red.sum(_ew.where(keep, x, 0.0), dim, keepdim)
    count = cast(_red.sum(keep, dim, keepdim), x._dtype)
    # no 0 / 0: a slice of nans gives nan as a constant.  Note: its gradient is 0 there
    # (PyTorch's is nan, from 0 / 0), and no inf * 0 warns in the backward pass
    return _ew.where(count == 0, math.nan, total / _ew.maximum(count, 1.0))


def count_nonzero(x: Tensor, dim: Any = None) -> Tensor:
    """The number of non-zero values (int64), over ``dim`` or the whole tensor."""
    return _red.sum(x != 0, dim)
