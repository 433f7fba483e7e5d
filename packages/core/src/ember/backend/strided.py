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
           "slice_view", "view_strides", "walk"]


_STRIDES: dict[tuple[int, ...], tuple[int, ...]] = {}


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """The row-major strides (in elements) of a dense array of ``shape``, cached per shape
    (shapes recur in a training loop; the cache stops growing at 65,536 of them)."""
    if type(shape) is not tuple:
        shape = tuple(shape)
    got = _STRIDES.get(shape)
    if got is not None:
        return got
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(int(n), 1)
    got = tuple(reversed(strides))
    if len(_STRIDES) < 65536:
        _STRIDES[tuple(map(int, shape))] = got
    return got


def view_strides(shape: Sequence[int], strides: Sequence[int],
                 new: Sequence[int]) -> tuple[int, ...] | None:
    """Strides that show an array of ``shape``/``strides`` as ``new`` (same size) without
    moving data, or ``None`` (a reshape must copy).  Runs of old axes that map onto runs of
    new axes must each be contiguous among themselves; size-1 axes go anywhere.

    >>> view_strides((2, 3), (1, 2), (3, 2)) is None, view_strides((4, 6), (12, 2), (2, 2, 6))
    (True, (24, 12, 2))
    """
    new = tuple(new)
    if tuple(strides) == contiguous_strides(shape) or 0 in shape:
        return contiguous_strides(new)
    old = [(n, s) for n, s in zip(shape, strides, strict=True) if n != 1]
    out = [1] * len(new)
    oi = ni = 0
    while oi < len(old) and ni < len(new):
        oj, nj = oi + 1, ni + 1
        osize, nsize = old[oi][0], new[ni]
        while osize != nsize:
            if nsize < osize:
                nsize *= new[nj]
                nj += 1
            else:
                osize *= old[oj][0]
                oj += 1
        if any(old[k][1] != old[k + 1][0] * old[k + 1][1] for k in range(oi, oj - 1)):
            return None
        out[nj - 1] = old[oj - 1][1]
        for k in range(nj - 1, ni, -1):
            out[k - 1] = out[k] * new[k]
        oi, ni = oj, nj
    return tuple(out)


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
S = TypeVar("S", bound="StridedView")


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


def walk(shape: Sequence[int], inputs: Sequence[_Viewable], outputs: Sequence[_Viewable],
         most: int, what: str) -> tuple[list[int], list[list[int]]]:
    """The iteration space of a kernel that walks ``shape``, reading ``inputs`` (broadcast to
    it) and writing the views ``outputs``: the merged axes (`collapse`) and each operand's
    strides over them, inputs first; ``what`` (e.g. ``"opencl: elementwise kernels"``) names
    the kernel in the error raised when more than ``most`` axes remain."""
    dims, sts = collapse(shape, [*(broadcast_strides(x.shape, x.strides, shape)
                                   for x in inputs), *(o.strides for o in outputs)])
    if len(dims) > most:
        raise NotImplementedError(f"{what} walk at most {most} axes, got {len(dims)} after "
                                  "merging")
    return dims, sts


def is_float(dtype: np.dtype[Any]) -> bool:
    """Whether the numpy ``dtype`` is a floating type (ml_dtypes' bfloat16 reports kind ``V``)."""
    dt = np.dtype(dtype)
    return dt.kind == "f" or dt.name == "bfloat16"


class StridedView:
    """The one strided view of the device backends: ``shape``, ``strides`` and ``offset`` in
    elements over some buffer.  An array class (OpenCL's ``CLArray``, WebGPU's ``WGArray``,
    Triton's ``DeviceArray``) adds its buffer and dtype, declares its own ``__slots__`` and
    implements ``view(shape, strides, offset)`` (another view of the same buffer); it gets
    ``size``, ``ndim``, ``is_contiguous`` and the data-free view ops (``permute``,
    ``broadcast_to``, ``slice``, ``flip``) from here."""

    __slots__ = ()
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int

    def view(self: S, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> S:
        raise NotImplementedError

    def permute(self: S, dims: Sequence[int]) -> S:
        return permute(self, dims)

    def broadcast_to(self: S, shape: Sequence[int]) -> S:
        return broadcast_view(self, shape)

    def slice(self: S, starts: Sequence[int], stops: Sequence[int], steps: Sequence[int]) -> S:
        return slice_view(self, starts, stops, steps)

    def flip(self: S, dims: Sequence[int]) -> S:
        return flip(self, dims)

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
