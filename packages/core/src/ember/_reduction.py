"""Reductions (``sum``, ``mean``, ``amax``, ``var``, ``argmax``, ...) and scans."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from . import _dtype as dt
from ._apply import apply, cast, normalize_dim, normalize_dims, to_float
from .ops import reduction as red
from .ops._op import Op

if TYPE_CHECKING:
    from ._tensor import Tensor

__all__ = ["all", "amax", "amin", "any", "argmax", "argmin", "cumprod", "cumsum", "max",
           "mean", "min", "prod", "std", "sum", "var"]

Dim = int | Sequence[int] | None


class ValuesIndices(NamedTuple):
    """What ``max(dim=)``, ``min(dim=)``, ``sort`` and ``topk`` return, as in PyTorch."""

    values: Tensor
    indices: Tensor


def _axis(name: str, dim: Dim | Tensor, axis: Dim) -> Any:
    """``dim``, or PyTorch's alias ``axis`` (numpy's name, which PyTorch also accepts)."""
    if axis is None:
        return dim
    if dim is not None:
        raise TypeError(f"{name}() received both dim and its alias axis")
    return axis


def _reduce(op: Op, x: Tensor, dim: Dim, keepdim: bool, **params: object) -> Tensor:
    dims = normalize_dims(dim, x.ndim)
    if not dims:  # a 0-d tensor: reducing over nothing keeps it
        return x
    return apply(op, x, dims=dims, keepdim=keepdim, **params)  # type: ignore[no-any-return]


def _accumulator(x: Tensor, dtype: dt.DType | None) -> Tensor:
    if dtype is not None:
        return cast(x, dtype)
    # Note: like PyTorch, sums of bool and integer tensors accumulate in int64
    return cast(x, dt.int64) if x._dtype.kind in "biu" else x


def sum(x: Tensor, dim: Dim = None, keepdim: bool = False,  # PyTorch's name
        *, axis: Dim = None, dtype: dt.DType | None = None) -> Tensor:
    """Sum over ``dim`` (all axes when None).

    Examples
    --------
    >>> import ember
    >>> ember.tensor([[1, 2], [3, 4]]).sum(dim=0).tolist()
    [4, 6]
    """
    dim = _axis("sum", dim, axis)
    return _reduce(red.sum, _accumulator(x, dtype), dim, keepdim)


def prod(x: Tensor, dim: Dim = None, keepdim: bool = False,
         *, axis: Dim = None, dtype: dt.DType | None = None) -> Tensor:
    """Product over ``dim``."""
    dim = _axis("prod", dim, axis)
    return _reduce(red.prod, _accumulator(x, dtype), dim, keepdim)


def mean(x: Tensor, dim: Dim = None, keepdim: bool = False,
         *, axis: Dim = None, dtype: dt.DType | None = None) -> Tensor:
    """Mean over ``dim``; integer inputs are averaged in the default float."""
    dim = _axis("mean", dim, axis)
    return _reduce(red.mean, cast(x, dtype) if dtype else to_float(x), dim, keepdim)


def _check_nonempty(name: str, x: Tensor, dim: Dim) -> None:
    """Reductions without an identity (max, min, argmax, argmin) of nothing are errors, with
    PyTorch's types and wording (numpy's is "zero-size array to reduction operation")."""
    shape = tuple(x._data.shape)
    if 0 not in shape:
        return
    if dim is None:
        raise RuntimeError(f"{name}(): Expected reduction dim to be specified for "
                           f"input.numel() == 0 (an empty tensor of shape {shape}); specify "
                           "the reduction dim with the 'dim' argument")
    for d in normalize_dims(dim, len(shape)):
        if shape[d] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size "
                             f"(a tensor of shape {shape})")


def amax(x: Tensor, dim: Dim = None, keepdim: bool = False, *, axis: Dim = None) -> Tensor:
    """Largest value over ``dim`` (nan propagates); an empty ``dim`` is an error."""
    dim = _axis("amax", dim, axis)
    _check_nonempty("amax", x, dim)
    if x._dtype.kind == "b":
        return any(x, dim, keepdim)
    return _reduce(red.max, x, dim, keepdim)


def amin(x: Tensor, dim: Dim = None, keepdim: bool = False, *, axis: Dim = None) -> Tensor:
    """Smallest value over ``dim`` (nan propagates); an empty ``dim`` is an error."""
    dim = _axis("amin", dim, axis)
    _check_nonempty("amin", x, dim)
    if x._dtype.kind == "b":
        return all(x, dim, keepdim)
    return _reduce(red.min, x, dim, keepdim)


def max(x: Tensor, dim: int | Tensor | None = None,  # PyTorch's name
        keepdim: bool = False, *, axis: int | None = None) -> Tensor | ValuesIndices:
    """``max(x)``: the largest value; ``max(x, dim)``: (values, indices); ``max(x, y)``: maximum."""
    from ._elementwise import maximum

    return _extremum("max", maximum, amax, argmax, x, dim, keepdim, axis)


def min(x: Tensor, dim: int | Tensor | None = None,  # PyTorch's name
        keepdim: bool = False, *, axis: int | None = None) -> Tensor | ValuesIndices:
    """``min(x)``, ``min(x, dim)`` -> (values, indices), or ``min(x, y)``: minimum."""
    from ._elementwise import minimum

    return _extremum("min", minimum, amin, argmin, x, dim, keepdim, axis)


def _extremum(name: str, pairwise: Any, values: Any, arg: Any, x: Tensor,
              dim: int | Tensor | None, keepdim: bool, axis: int | None
              ) -> Tensor | ValuesIndices:
    """`max`/`min`: of two tensors (``pairwise``), of all of ``x`` (``values``), or the values
    and indices (``arg``) over ``dim``."""
    dim = _axis(name, dim, axis)
    from ._tensor import Tensor

    if isinstance(dim, Tensor):
        out: Tensor = pairwise(x, dim)
        return out
    _check_nonempty(name, x, dim)
    if dim is None:
        whole: Tensor = values(x)
        return whole
    return ValuesIndices(values(x, dim, keepdim), arg(x, dim, keepdim))


def _arg(op: Op, x: Tensor, dim: int | None, keepdim: bool) -> Tensor:
    _check_nonempty(op.name, x, dim)
    if x._dtype.kind == "b":  # any ordered integer will do: the device's smallest
        x = cast(x, dt.uint8 if x._device.supports(dt.uint8) else dt.int32)
    d = None if dim is None else normalize_dim(dim, x.ndim)
    return apply(op, x, dim=d, keepdim=keepdim)  # type: ignore[no-any-return]


def argmax(x: Tensor, dim: int | None = None, keepdim: bool = False, *,
           axis: int | None = None) -> Tensor:
    """Index of the largest value (the first one on ties), as int64."""
    dim = _axis("argmax", dim, axis)
    return _arg(red.argmax, x, dim, keepdim)


def argmin(x: Tensor, dim: int | None = None, keepdim: bool = False, *,
           axis: int | None = None) -> Tensor:
    """Index of the smallest value (the first one on ties), as int64."""
    dim = _axis("argmin", dim, axis)
    return _arg(red.argmin, x, dim, keepdim)


def any(x: Tensor, dim: Dim = None, keepdim: bool = False, *, axis: Dim = None) -> Tensor:
    """Whether any element over ``dim`` is non-zero."""
    dim = _axis("any", dim, axis)
    dims = normalize_dims(dim, x.ndim)
    if not dims:
        return cast(x, dt.bool_)
    return apply(red.any, x, dims=dims, keepdim=keepdim)  # type: ignore[no-any-return]


def all(x: Tensor, dim: Dim = None, keepdim: bool = False, *, axis: Dim = None) -> Tensor:
    """Whether every element over ``dim`` is non-zero."""
    dim = _axis("all", dim, axis)
    dims = normalize_dims(dim, x.ndim)
    if not dims:
        return cast(x, dt.bool_)
    return apply(red.all, x, dims=dims, keepdim=keepdim)  # type: ignore[no-any-return]


def var(x: Tensor, dim: Dim = None, keepdim: bool = False, *, axis: Dim = None,
        correction: int = 1, unbiased: bool | None = None) -> Tensor:
    """Variance over ``dim`` with Bessel's ``correction`` (1 by default, as in PyTorch)."""
    dim = _axis("var", dim, axis)
    if unbiased is not None:
        correction = int(unbiased)
    return _reduce(red.var, to_float(x), dim, keepdim, correction=correction)


def std(x: Tensor, dim: Dim = None, keepdim: bool = False, *, axis: Dim = None,
        correction: int = 1, unbiased: bool | None = None) -> Tensor:
    """Standard deviation over ``dim``."""
    dim = _axis("std", dim, axis)
    from ._elementwise import sqrt

    return sqrt(var(x, dim, keepdim, correction=correction, unbiased=unbiased))


def cumsum(x: Tensor, dim: int, *, dtype: dt.DType | None = None) -> Tensor:
    """Running sum along ``dim``."""
    x = _accumulator(x, dtype)
    return apply(red.cumsum, x, dim=normalize_dim(dim, x.ndim))  # type: ignore[no-any-return]


def cumprod(x: Tensor, dim: int, *, dtype: dt.DType | None = None) -> Tensor:
    """Running product along ``dim``."""
    x = _accumulator(x, dtype)
    return apply(red.cumprod, x, dim=normalize_dim(dim, x.ndim))  # type: ignore[no-any-return]
