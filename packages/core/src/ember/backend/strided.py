"""Strided views as the device backends keep them: shape, strides and offset in elements.

A backend whose arrays are views of a device buffer (OpenCL's ``CLArray``, WebGPU's
``WGArray``) plans its index arithmetic on the host with these: the dense strides of a shape,
an array seen broadcast to a larger shape, and the merging of axes every operand walks
contiguously, so that a dense map compiles to ``p[o + i]`` with no index arithmetic at all.
`StridedView` gives an array class the properties all of them need from ``shape`` and
``strides``.

>>> collapse((2, 3, 4), [(12, 4, 1), (0, 4, 1)])
([2, 12], [[12, 1], [0, 1]])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

import numpy as np

__all__ = ["StridedView", "broadcast_strides", "broadcast_view", "cat_parts", "collapse",
           "contiguous_strides", "flip", "is_float", "pad_interior", "padded_shape", "permute",
           "slice_view"]


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """The row-major strides (in elements) of a dense array of ``shape``."""
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def broadcast_strides(shape: Sequence[int], strides: Sequence[int],
                      target: Sequence[int]) -> tuple[int, ...]:
    """The strides of an array of ``shape`` seen broadcast to ``target`` (numpy's rule: leading
    axes added, size-1 axes that grow step 0)."""
    lead = len(target) - len(shape)
    out = [0] * lead
    for n, s, t in zip(shape, strides, target[lead:], strict=True):
        out.append(0 if n == 1 and t != 1 else s)
    return tuple(out)


class _Viewable(Protocol):
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int

    def view(self, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> Any: ...


V = TypeVar("V", bound=_Viewable)


def broadcast_view(x: V, shape: Sequence[int]) -> V:
    """``x`` seen with ``shape`` (see `broadcast_strides`); ``x.view`` builds the view."""
    out: V = x.view(tuple(shape), broadcast_strides(x.shape, x.strides, shape), x.offset)
    return out


def permute(x: V, dims: Sequence[int]) -> V:
    """``x`` with its axes in the order ``dims`` (no data moves)."""
    out: V = x.view(tuple(x.shape[d] for d in dims), tuple(x.strides[d] for d in dims),
                    x.offset)
    return out


def slice_view(x: V, starts: Sequence[int], stops: Sequence[int], steps: Sequence[int]) -> V:
    """``x[a:b:c, ...]`` per axis, with ``starts``/``stops``/``steps`` already normalised
    (non-negative, in range; ``steps`` may be negative) as `ember.ops.movement.slice` gives
    them."""
    offset = x.offset
    shape, strides = [], []
    for s, a, b, c in zip(x.strides, starts, stops, steps, strict=True):
        m = len(range(a, b, c))
        shape.append(m)
        strides.append(s * c)
        if m:
            offset += a * s
    out: V = x.view(tuple(shape), tuple(strides), offset)
    return out


def flip(x: V, dims: Sequence[int]) -> V:
    """``x`` reversed along ``dims``: negative strides from each axis's last element."""
    offset = x.offset
    strides = list(x.strides)
    for d in dims:
        if x.shape[d] > 0:
            offset += (x.shape[d] - 1) * strides[d]
        strides[d] = -strides[d]
    out: V = x.view(x.shape, tuple(strides), offset)
    return out


def padded_shape(shape: Sequence[int], widths: Sequence[tuple[int, int]]) -> tuple[int, ...]:
    """The shape of an array of ``shape`` padded by ``widths`` (``(before, after)`` per axis)."""
    return tuple(n + a + b for n, (a, b) in zip(shape, widths, strict=True))


def pad_interior(out: V, shape: Sequence[int], widths: Sequence[tuple[int, int]]) -> V:
    """The view of the padded ``out`` (`padded_shape`) where the array of ``shape`` goes."""
    return slice_view(out, [a for a, _ in widths],
                      [a + n for n, (a, _) in zip(shape, widths, strict=True)], [1] * len(shape))


def cat_parts(out: V, sizes: Sequence[int], dim: int) -> list[V]:
    """The views of ``out`` that hold the parts of a concatenation along ``dim``, the parts
    being ``sizes`` long along it."""
    parts, start = [], 0
    for n in sizes:
        starts = [0] * len(out.shape)
        stops = list(out.shape)
        starts[dim], stops[dim] = start, start + n
        parts.append(slice_view(out, starts, stops, [1] * len(out.shape)))
        start += n
    return parts


def collapse(shape: Sequence[int], strides: Sequence[Sequence[int]]
             ) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 axes and merge neighbours every operand steps through contiguously.

    ``strides`` holds one stride tuple per operand; the result is the merged shape and each
    operand's merged strides.
    """
    keep = [d for d, n in enumerate(shape) if n != 1]
    dims = [shape[d] for d in keep]
    sts = [[s[d] for d in keep] for s in strides]
    i = 0
    while i + 1 < len(dims):
        if all(s[i] == s[i + 1] * dims[i + 1] for s in sts):
            dims[i] *= dims[i + 1]
            for s in sts:
                s[i] = s[i + 1]
                del s[i + 1]
            del dims[i + 1]
        else:
            i += 1
    return dims, sts


def is_float(dtype: np.dtype[Any]) -> bool:
    """Whether the numpy ``dtype`` is a floating type (ml_dtypes' bfloat16 reports kind ``V``)."""
    dt = np.dtype(dtype)
    return dt.kind == "f" or dt.name == "bfloat16"


class StridedView:
    """What an array class with ``shape`` and ``strides`` (in elements) gets for free:
    ``size``, ``ndim`` and ``is_contiguous``.  Subclasses declare their own ``__slots__``."""

    __slots__ = ()
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def is_contiguous(self) -> bool:
        """Whether the view is dense and row-major (size-1 axes may have any stride)."""
        return all(s == c for s, c, n in zip(self.strides, contiguous_strides(self.shape),
                                             self.shape, strict=True) if n != 1)
