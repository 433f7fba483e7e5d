"""Order statistics and paired reductions under PyTorch's names: ``median``, ``quantile``,
``aminmax``, ``var_mean``, ``std_mean``; composites of ``sort``, slices and reductions."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

from . import _elementwise as _ew, _manipulation as _mv, _pointwise as _pw, _reduction as _red
from ._apply import normalize_dim
from ._errors import DTypeError, ShapeError
from ._reduction import ValuesIndices
from ._tensor import Tensor

__all__ = ["MinMax", "aminmax", "median", "quantile", "std_mean", "var_mean"]

_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


class MinMax(NamedTuple):
    """What ``aminmax`` returns, as PyTorch's ``return_types.aminmax``."""

    min: Tensor
    max: Tensor


def aminmax(x: Tensor, *, dim: int | None = None, keepdim: bool = False) -> MinMax:
    """``(amin, amax)`` over ``dim`` (every axis when None)."""
    return MinMax(_red.amin(x, dim, keepdim), _red.amax(x, dim, keepdim))


def var_mean(x: Tensor, dim: Any = None, keepdim: bool = False, *, correction: int = 1,
             unbiased: bool | None = None) -> tuple[Tensor, Tensor]:
    """``(var, mean)`` over ``dim``."""
    return (_red.var(x, dim, keepdim, correction=correction, unbiased=unbiased),
            _red.mean(x, dim, keepdim))


def std_mean(x: Tensor, dim: Any = None, keepdim: bool = False, *, correction: int = 1,
             unbiased: bool | None = None) -> tuple[Tensor, Tensor]:
    """``(std, mean)`` over ``dim``."""
    return (_red.std(x, dim, keepdim, correction=correction, unbiased=unbiased),
            _red.mean(x, dim, keepdim))


def median(x: Tensor, dim: int | None = None, keepdim: bool = False) -> Any:
    """The lower median (of an even count, the smaller of the two middle values, as PyTorch);
    nan if a value is nan.  With ``dim``, ``(values, indices)``.

    Examples
    --------
    >>> import ember
    >>> ember.median(ember.tensor([4.0, 1.0, 3.0, 2.0])).item()
    2.0
    """
    if dim is None:
        flat = x.reshape(-1)
        if flat.shape[0] == 0:
            if x._dtype.kind != "f":
                raise ShapeError("median: the input is empty")
            from ._creation import full

            return full((), math.nan, dtype=x._dtype, device=x._device)
        return median(flat, 0).values
    d = normalize_dim(dim, x.ndim)
    n = x.shape[d] if x.ndim else 1
    if n == 0:
        raise ShapeError(f"median: cannot take the median over axis {d} of size 0 "
                         f"(shape {x.shape})")
    v, i = _mv.sort(x, d, stable=True)
    k = (n - 1) // 2
    values, indices = (_mv.narrow(t, d, k, 1) if x.ndim else t for t in (v, i))
    if x._dtype.kind == "f":
        nan = _ew.isnan(x)
        has_nan = _red.any(nan, d, keepdim=True) if x.ndim else nan
        values = _ew.where(has_nan, math.nan, values)
        if x.ndim:
            indices = _ew.where(has_nan, _red.argmax(nan, d, keepdim=True), indices)
    if x.ndim and not keepdim:
        values, indices = _mv.squeeze(values, d), _mv.squeeze(indices, d)
    return ValuesIndices(values, indices)


def quantile(x: Tensor, q: float | Sequence[float] | Tensor, dim: int | None = None,
             keepdim: bool = False, *, interpolation: str = "linear") -> Tensor:
    """The ``q``-th quantiles over ``dim`` (of every value when None), as ``torch.quantile``:
    position ``q * (n - 1)`` among the sorted values, between neighbours by ``interpolation``
    (``linear``, ``lower``, ``higher``, ``midpoint``, ``nearest``); nan if a value is nan.
    A 1-D ``q`` puts the quantiles on a new first axis.

    Examples
    --------
    >>> import ember
    >>> ember.quantile(ember.tensor([1.0, 2.0, 4.0, 8.0]), 0.5).item()
    3.0
    """
    if x._dtype.kind != "f":
        raise DTypeError(f"quantile: expected a floating point input, got {x._dtype.name}")
    if interpolation not in _INTERPOLATIONS:
        raise ValueError(f"quantile: interpolation must be one of {_INTERPOLATIONS}, got "
                         f"{interpolation!r}")
    if isinstance(q, Tensor):
        if q.ndim > 1:
            raise ShapeError(f"quantile: q must be a scalar or 1-D, got shape {q.shape}")
        qs, one = [float(v) for v in q.reshape(-1).tolist()], q.ndim == 0
    elif isinstance(q, int | float):
        qs, one = [float(q)], True
    else:
        qs, one = [float(v) for v in q], False
    bad = [v for v in qs if not 0.0 <= v <= 1.0]
    if bad:
        raise ValueError(f"quantile: q must lie in [0, 1], got {bad[0]}")
    src = x.reshape(-1) if dim is None else x
    d = 0 if dim is None else normalize_dim(dim, x.ndim)
    n = src.shape[d] if src.ndim else 1
    if n == 0:
        raise ShapeError(f"quantile: cannot take quantiles over an empty axis (shape {x.shape})")
    srt = _mv.sort(src, d).values if src.ndim else src.reshape(1)
    if not src.ndim:
        src, d = src.reshape(1), 0
    nan = _red.any(_ew.isnan(src), d, keepdim=True)

    def at(k: int) -> Tensor:
        return _mv.narrow(srt, d, k, 1)

    outs = []
    for qv in qs:
        pos = qv * (n - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        if interpolation == "lower":
            r = at(lo)
        elif interpolation == "higher":
            r = at(hi)
        elif interpolation == "nearest":
            r = at(round(pos))  # half to even, as PyTorch's round
        elif interpolation == "midpoint":
            r = at(lo) if lo == hi else (at(lo) + at(hi)) * 0.5
        else:
            r = at(lo) if lo == hi else _pw.lerp(at(lo), at(hi), pos - lo)
        r = _ew.where(nan, math.nan, r)
        if dim is None:
            r = r.reshape(*(1,) * x.ndim) if keepdim else r.reshape(())
        elif not keepdim:
            r = _mv.squeeze(r, d)
        outs.append(r)
    return outs[0] if one else _mv.stack(outs, 0)
