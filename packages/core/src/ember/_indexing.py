"""``x[key]`` and ``x[key] = v`` with NumPy's semantics, built from primitives.

Basic indexing (ints, slices with any step, ``None``, ``...``) becomes one ``slice`` and one
``reshape``.  Advanced indexing (integer tensors or lists, boolean masks) merges the indexed axes
and uses ``index_select`` on a computed linear index; the result axes go where NumPy puts them
(in place when the advanced indices are adjacent, in front otherwise).  Assignment is functional:
the tensor is rebound to a new value, other tensors are unaffected.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from . import _dtype as dt
from ._apply import apply, broadcast_shapes, cast
from ._checks import check_range, out_of_bounds
from ._errors import DTypeError, ShapeError
from .ops import movement as mv

if TYPE_CHECKING:
    from ._tensor import Tensor

__all__ = ["getitem", "setitem"]


def _is_tensorlike(item: Any) -> bool:
    from ._tensor import Tensor

    return isinstance(item, (Tensor, list)) or (
        hasattr(item, "__array__") and not isinstance(item, (int, slice)))


def _normalize_key(x: Tensor, key: Any) -> list[Any]:
    from ._creation import tensor
    from ._tensor import Tensor

    items = list(key) if isinstance(key, tuple) else [key]
    out: list[Any] = []
    for item in items:
        if isinstance(item, bool):
            item = tensor(item, device=x.device)
        elif isinstance(item, tuple):  # a sequence inside the key indexes as a list does
            item = (tensor(list(item), device=x.device) if item
                    else tensor([], dtype=dt.int64, device=x.device))
        elif _is_tensorlike(item) and not isinstance(item, Tensor):
            item = tensor(item, device=x.device)
        elif hasattr(item, "__index__") and not isinstance(item, (int, Tensor)):
            item = int(item.__index__())
        out.append(item)
    consumed = 0
    for item in out:
        if item is None or item is Ellipsis:
            continue
        consumed += item.ndim if isinstance(item, Tensor) and item._dtype is dt.bool_ else 1
    ellipses = [i for i, item in enumerate(out) if item is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if consumed > x.ndim:
        raise IndexError(f"too many indices for a tensor of {x.ndim} dimension(s) "
                         f"(shape {x.shape}): {consumed} given")
    fill = [slice(None)] * (x.ndim - consumed)
    if ellipses:
        out[ellipses[0]:ellipses[0] + 1] = fill
    else:
        out += fill
    return out


def _basic(x: Tensor, items: tuple[Any, ...]) -> Tensor | None:
    """``x[items]`` for plain ints and slices only (the common case), as the general path
    computes it (one ``slice``, one ``reshape``); None for any other key."""
    shape = x._data.shape
    k = len(items)
    if k > len(shape):
        return None
    starts, stops, steps, out_shape = [], [], [], []
    whole = True
    for dim in range(k):
        item, n = items[dim], shape[dim]
        kind = type(item)
        if kind is int:
            i = item + n if item < 0 else item
            if not 0 <= i < n:
                return None  # the general path raises, after checking the rest of the key
            starts.append(i)
            stops.append(i + 1)
            steps.append(1)
            whole = False
        elif kind is slice:
            start, stop, step = item.indices(n)
            starts.append(start)
            stops.append(stop)
            steps.append(step)
            size = len(range(start, stop, step))
            out_shape.append(size)
            whole = whole and start == 0 and step == 1 and size == n
        else:
            return None
    rest = list(shape[k:])
    y = x if whole else apply(mv.slice, x, starts=(*starts, *[0] * len(rest)),
                              stops=(*stops, *rest), steps=(*steps, *[1] * len(rest)))
    target = (*out_shape, *rest)
    if target != tuple(y._data.shape):
        y = apply(mv.reshape, y, shape=target)
    return y


def getitem(x: Tensor, key: Any, op: str = "index") -> Tensor:
    """``x[key]``; ``op`` names the operation in errors (``index_put`` for `setitem`)."""
    if type(key) is int:  # x[i], as in a loop over a sequence's steps
        shape = x._data.shape
        if shape:
            n = shape[0]
            i = key + n if key < 0 else key
            if 0 <= i < n:
                rest = tuple(shape[1:])
                k = len(rest)
                y: Tensor = apply(mv.slice, x, starts=(i, *[0] * k), stops=(i + 1, *rest),
                                  steps=(1,) * (k + 1))
                return apply(mv.reshape, y, shape=rest)  # type: ignore[no-any-return]
    basic = _basic(x, key if type(key) is tuple else (key,))
    if basic is not None:
        return basic
    from ._tensor import Tensor

    items = _normalize_key(x, key)
    # expand boolean masks into one integer index per masked axis
    expanded: list[Any] = []
    axis = 0  # the axis of x that ``item`` indexes
    for item in items:
        if isinstance(item, Tensor) and item._dtype is dt.bool_:
            if item.ndim == 0:  # x[True] adds an axis of 1, x[False] of 0
                expanded.append(None)
                if not item.item():
                    expanded.append("empty")
                continue
            _check_mask(op, x, item, axis)
            coords = apply(mv.nonzero, item)
            expanded += [coords[:, i] for i in range(item.ndim)]
            axis += item.ndim
        else:
            expanded.append(item)
            axis += item is not None
    starts, stops, steps, out_shape, adv = [], [], [], [], []
    dim = 0
    empty_axis = False
    for item in expanded:
        if item is None:
            out_shape.append(1)
            continue
        if isinstance(item, str):
            empty_axis = True
            continue
        n = x.shape[dim]
        if isinstance(item, int):
            i = item + n if item < 0 else item
            if not 0 <= i < n:
                raise IndexError(f"index {item} is out of bounds for axis {dim} with size {n}")
            starts.append(i)
            stops.append(i + 1)
            steps.append(1)
        elif isinstance(item, slice):
            start, stop, step = item.indices(n)
            starts.append(start)
            stops.append(stop)
            steps.append(step)
            out_shape.append(len(range(start, stop, step)))
        elif isinstance(item, Tensor):
            if item._dtype.kind not in "iu":
                raise DTypeError(f"tensors used as indices must be integer or bool, "
                                 f"got {item._dtype.name}")
            starts.append(0)
            stops.append(n)
            steps.append(1)
            adv.append((len(out_shape), item, n, dim))
            out_shape.append(n)
        else:
            raise IndexError(f"unsupported index {item!r} of type {type(item).__name__}")
        dim += 1
    y = x
    if any((s, e, k) != (0, n, 1) for s, e, k, n in zip(starts, stops, steps, x.shape,
                                                      strict=True)):
        y = apply(mv.slice, x, starts=tuple(starts), stops=tuple(stops), steps=tuple(steps))
    if empty_axis:
        out_shape[-1:] = [0]
    y = y.reshape(out_shape) if tuple(out_shape) != y.shape else y
    if adv:
        y = _advanced(y, adv, op)
    return y


def _check_mask(op: str, x: Tensor, mask: Tensor, axis: int) -> None:
    """A boolean mask must match the axes of ``x`` it covers, as in PyTorch (numpy too)."""
    for i, m in enumerate(mask.shape):
        if axis + i >= x.ndim or x.shape[axis + i] != m:
            raise IndexError(
                f"{op}: the shape of the mask {list(mask.shape)} at index {i} does not match "
                f"the shape of the indexed tensor {list(x.shape)} at index {axis + i}")


def _advanced(y: Tensor, adv: list[tuple[int, Tensor, int, int]], op: str) -> Tensor:
    from ._elementwise import where

    positions = [p for p, _, _, _ in adv]
    idx = [cast(t, dt.int64) for _, t, _, _ in adv]
    for t, (_, _, n, dim) in zip(idx, adv, strict=True):
        # indices wrap once: [-n, n) is valid; the merged linear index below cannot tell
        check_range(op, t, -n, n, out_of_bounds(dim, n))
    idx = [where(t < 0, t + n, t) for t, (_, _, n, _) in zip(idx, adv, strict=True)]
    try:
        bshape = broadcast_shapes(*(t.shape for t in idx))
    except ShapeError as exc:
        raise IndexError(f"shape mismatch: indexing tensors could not be broadcast: {exc}") \
            from None
    adjacent = positions == list(range(positions[0], positions[0] + len(positions)))
    if not adjacent:
        rest = [d for d in range(y.ndim) if d not in positions]
        y = y.permute(*positions, *rest)
        positions = list(range(len(positions)))
    first = positions[0]
    sizes = [y.shape[p] for p in positions]
    lin = None
    stride = 1
    for t, n in zip(reversed(idx), reversed(sizes), strict=True):
        term = t * stride if stride != 1 else t
        lin = term if lin is None else lin + term
        stride *= n
    assert lin is not None
    merged = y.reshape(*y.shape[:first], math.prod(sizes), *y.shape[first + len(sizes):])
    flat = lin.expand(bshape).reshape(-1)
    picked = apply(mv.index_select, merged, flat, dim=first)
    return picked.reshape(*y.shape[:first], *bshape,  # type: ignore[no-any-return]
                          *y.shape[first + len(sizes):])


def setitem(x: Tensor, key: Any, value: Any) -> Tensor:
    """The value ``x`` has after ``x[key] = value`` (a new tensor; ``x`` is not touched)."""
    from ._creation import arange, tensor
    from ._elementwise import where
    from ._tensor import Tensor

    if not isinstance(value, Tensor):
        value = tensor(value, dtype=x.dtype, device=x.device)
    value = cast(value, x._dtype)
    if isinstance(key, Tensor) and key._dtype is dt.bool_ and key.shape == x.shape and \
            value.ndim == 0:
        return where(key, value, x)
    positions = getitem(arange(math.prod(x.shape), device=x.device).reshape(x.shape), key,
                        "index_put")
    try:
        value = value.expand(positions.shape)
    except ShapeError:
        raise ShapeError(f"cannot assign a value of shape {value.shape} to an index selecting "
                         f"shape {positions.shape}") from None
    flat = x.reshape(-1)
    out = apply(mv.scatter, flat, positions.reshape(-1), value.reshape(-1), dim=0)
    return out.reshape(x.shape)  # type: ignore[no-any-return]
