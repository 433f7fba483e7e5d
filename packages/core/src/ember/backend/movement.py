"""The kernels a strided backend plans on the host from views and a few device primitives.

Movement ops (reshape, expand, permute, slice, flip, pad, cat, contiguous), embedding,
interpolation, conv1d and the transposed convolutions, and the pools' output geometry are the
same on every backend whose arrays are strided views of a device buffer
(`ember.backend.strided.StridedView`): they move no data, or write their inputs into views of
a fresh output, or call other kernels.  `StridedKernels` holds that planning once; a backend
hands it the primitives only it can run (fill, strided copy, index_select, lerp, conv2d, a
pool), each a function taking the backend's runtime first, and puts `StridedKernels.kernels`
in its table.

>>> import numpy as np
>>> from ember.backend.strided import StridedView
>>> class A(StridedView):
...     __slots__ = ("offset", "shape", "strides")
...     def __init__(self, shape, strides, offset=0):
...         self.shape, self.strides, self.offset = shape, strides, offset
...     def view(self, shape, strides, offset):
...         return A(tuple(shape), tuple(strides), offset)
>>> k = StridedKernels("demo", None)
>>> k.reshape(A((2, 3), (3, 1)).permute((1, 0)).permute((1, 0)), (3, 2)).strides
(2, 1)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from ..ops import movement as mv, nn
from .geometry import interpolate, pool_output_size
from .strided import (
    broadcast_view,
    cat_parts,
    contiguous_strides,
    flip,
    pad_interior,
    padded_shape,
    permute,
    slice_view,
    view_strides,
)

__all__ = ["StridedKernels", "conv2d_columns", "conv2d_size", "first_k"]

V = TypeVar("V", bound=Any)
Pair = tuple[int, int]


def first_k(x: V, k: int, dim: int) -> V:
    """The view of the first ``k`` entries of ``x`` along ``dim`` (topk of a sorted line)."""
    stops = list(x.shape)
    stops[dim] = k
    out: V = slice_view(x, [0] * x.ndim, stops, [1] * x.ndim)
    return out


def conv2d_size(x_shape: Sequence[int], w_shape: Sequence[int], stride: Pair, padding: Pair,
                dilation: Pair) -> Pair:
    """The output height and width of conv2d of ``x[N, C, H, W]`` by ``w[O, C/g, kh, kw]``."""
    return (pool_output_size(x_shape[2], w_shape[2], stride[0], padding[0], dilation[0], False),
            pool_output_size(x_shape[3], w_shape[3], stride[1], padding[1], dilation[1], False))


def conv2d_columns(cols: V, w: V, groups: int, size: Pair, matmul: Callable[[V, V], V]) -> V:
    """conv2d from its im2col matrix ``cols[N, G, C/G*kh*kw, OH*OW]`` and the dense weight
    ``w[O, C/G, kh, kw]``: the weight broadcast over the batch (stride 0, no copy) times the
    columns, seen as ``[N, O, OH, OW]``."""
    n = cols.shape[0]
    o, cg, kh, kw = w.shape
    kk, og = cg * kh * kw, o // groups
    out = matmul(w.view((n, groups, og, kk), (0, og * kk, kk, 1), w.offset), cols)
    shape = (n, o, *size)
    dense: V = out.view(shape, contiguous_strides(shape), out.offset)
    return dense


def _missing(name: str) -> Callable[..., Any]:
    def fn(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"StridedKernels: no {name} primitive was given")
    return fn


class StridedKernels(Generic[V]):
    """Movement, embedding, interpolation and convolution planning over the strided arrays
    ``V`` of one runtime ``rt``.

    The primitives (each called with ``rt`` first): ``fill(shape, dtype, value)`` a new
    array; ``copy_into(dst, src)`` ``src`` broadcast into the view ``dst``;
    ``index_select(x, index, dim)``; ``lerp(lo, hi, weight)`` ``lo * (1 - weight) + hi *
    weight`` with ``weight`` broadcast; ``conv2d(x, w, stride, padding, dilation, groups)``;
    ``pool2d(x, oh, ow, kernel, stride, padding, dilation, include_pad, want_index)`` (max
    with its indices when ``want_index``, else the average).  A table entry is made only for
    the ops whose primitives were given.  ``rt`` itself has ``empty(shape, dtype)`` and
    ``upload(host)``.
    """

    def __init__(self, device: str, rt: Any, *,
                 fill: Callable[..., V] | None = None,
                 copy_into: Callable[..., V] | None = None,
                 index_select: Callable[..., V] | None = None,
                 lerp: Callable[..., V] | None = None,
                 conv2d: Callable[..., V] | None = None,
                 pool2d: Callable[..., tuple[V, V | None]] | None = None) -> None:
        self.device, self.rt = device, rt
        prims = {"fill": fill, "copy_into": copy_into, "index_select": index_select,
                 "lerp": lerp, "conv2d": conv2d, "pool2d": pool2d}
        self._given = frozenset(k for k, f in prims.items() if f is not None)
        self._fill: Callable[..., V] = fill or _missing("fill")
        self._copy_into: Callable[..., V] = copy_into or _missing("copy_into")
        self._index_select: Callable[..., V] = index_select or _missing("index_select")
        self._lerp: Callable[..., V] = lerp or _missing("lerp")
        self._conv2d: Callable[..., V] = conv2d or _missing("conv2d")
        self._pool2d: Callable[..., tuple[V, V | None]] = pool2d or _missing("pool2d")

    # -- movement --------------------------------------------------------------------------

    def contiguous(self, x: V) -> V:
        """``x`` itself when dense, else a dense copy."""
        if x.is_contiguous():
            return x
        return self._copy_into(self.rt, self.rt.empty(x.shape, x.dtype), x)

    def reshape(self, x: V, shape: Sequence[int]) -> V:
        """A view where the strides allow one (as numpy's reshape), else a dense copy."""
        shape = tuple(shape)
        strides = view_strides(x.shape, x.strides, shape)
        if strides is not None:
            out: V = x.view(shape, strides, x.offset)
            return out
        src = self.contiguous(x)
        dense: V = src.view(shape, contiguous_strides(shape), src.offset)
        return dense

    def pad(self, x: V, widths: Sequence[tuple[int, int]], value: Any) -> V:
        out = self._fill(self.rt, padded_shape(x.shape, widths), x.dtype, value)
        self._copy_into(self.rt, pad_interior(out, x.shape, widths), x)
        return out

    def cat(self, xs: Sequence[V], dim: int) -> V:
        shape = list(xs[0].shape)
        shape[dim] = sum(x.shape[dim] for x in xs)
        out: V = self.rt.empty(tuple(shape), xs[0].dtype)
        for part, x in zip(cat_parts(out, [x.shape[dim] for x in xs], dim), xs, strict=True):
            self._copy_into(self.rt, part, x)
        return out

    # -- nn ----------------------------------------------------------------------------------

    def embedding(self, weight: V, indices: V) -> V:
        """Rows of ``weight`` (``[num, dim]``) picked by ``indices`` of any shape."""
        flat = self.reshape(indices, (indices.size,))
        rows = self._index_select(self.rt, weight, flat, 0)
        shape = (*indices.shape, weight.shape[1])
        out: V = rows.view(shape, contiguous_strides(shape), rows.offset)
        return out

    def interpolate(self, x: V, size: Sequence[int], mode: str,
                    align_corners: bool | None) -> V:
        """`ember.backend.geometry.interpolate` with index_select and lerp."""
        rt = self.rt

        def take(a: V, index: np.ndarray, axis: int) -> V:
            return self._index_select(rt, a, rt.upload(index), axis)

        def lerp(lo: V, hi: V, lam: np.ndarray, axis: int) -> V:
            shape = [1] * lo.ndim
            shape[axis] = lam.size
            return self._lerp(rt, lo, hi, rt.upload(lam.astype(x.dtype).reshape(shape)))

        out: V = interpolate(x, x.shape, size, mode, align_corners, take=take, lerp=lerp,
                             device=self.device)
        return out

    def conv_transpose2d(self, x: V, w: V, stride: Pair = (1, 1), padding: Pair = (0, 0),
                         output_padding: Pair = (0, 0), dilation: Pair = (1, 1),
                         groups: int = 1) -> V:
        """conv2d of the zero-dilated, padded (or cropped) input with the flipped kernel, its
        in and out channels swapped per group."""
        n, c, h, wd = x.shape
        _, og, kh, kw = w.shape
        sh, sw = stride
        qh = dilation[0] * (kh - 1) - padding[0]
        qw = dilation[1] * (kw - 1) - padding[1]
        bh, bw = max(qh, 0), max(qw, 0)
        ah, aw = max(qh + output_padding[0], 0), max(qw + output_padding[1], 0)
        uh, uw = (h - 1) * sh + 1 if h else 0, (wd - 1) * sw + 1 if wd else 0
        up = self._fill(self.rt, (n, c, uh + bh + ah, uw + bw + aw), x.dtype, 0)
        inner = slice_view(up, (0, 0, bh, bw), (n, c, bh + uh, bw + uw), (1, 1, sh, sw))
        self._copy_into(self.rt, inner, x)
        ch0, cw0 = max(-qh, 0), max(-qw, 0)
        ch1, cw1 = max(-(qh + output_padding[0]), 0), max(-(qw + output_padding[1]), 0)
        if ch0 or cw0 or ch1 or cw1:
            up = slice_view(up, (0, 0, ch0, cw0), (n, c, up.shape[2] - ch1, up.shape[3] - cw1),
                            (1, 1, 1, 1))
        cg = c // groups
        wg = self.reshape(w, (groups, cg, og, kh, kw))
        wt = self.reshape(permute(wg, (0, 2, 1, 3, 4)), (groups * og, cg, kh, kw))
        return self._conv2d(self.rt, up, flip(wt, (2, 3)), (1, 1), (0, 0), dilation, groups)

    def conv1d(self, x: V, w: V, stride: Any = (1,), padding: Any = (0,),
               dilation: Any = (1,), groups: int = 1) -> V:
        """conv2d of a height-1 image."""
        out = self._conv2d(self.rt, _unsqueeze2(x), _unsqueeze2(w), (1, stride[0]),
                           (0, padding[0]), (1, dilation[0]), groups)
        return _squeeze2(out)

    def conv_transpose1d(self, x: V, w: V, stride: Any = (1,), padding: Any = (0,),
                         output_padding: Any = (0,), dilation: Any = (1,),
                         groups: int = 1) -> V:
        out = self.conv_transpose2d(_unsqueeze2(x), _unsqueeze2(w), (1, stride[0]),
                                    (0, padding[0]), (0, output_padding[0]), (1, dilation[0]),
                                    groups)
        return _squeeze2(out)

    def max_pool2d(self, x: V, kernel_size: Pair = (1, 1), stride: Pair = (1, 1),
                   padding: Pair = (0, 0), dilation: Pair = (1, 1),
                   ceil_mode: bool = False) -> tuple[V, V]:
        h, w = x.shape[2:]
        oh = pool_output_size(h, kernel_size[0], stride[0], padding[0], dilation[0], ceil_mode)
        ow = pool_output_size(w, kernel_size[1], stride[1], padding[1], dilation[1], ceil_mode)
        v, i = self._pool2d(self.rt, x, oh, ow, kernel_size, stride, padding, dilation, True,
                            True)
        assert i is not None
        return v, i

    def avg_pool2d(self, x: V, kernel_size: Pair = (1, 1), stride: Pair = (1, 1),
                   padding: Pair = (0, 0), ceil_mode: bool = False,
                   count_include_pad: bool = True) -> V:
        h, w = x.shape[2:]
        oh = pool_output_size(h, kernel_size[0], stride[0], padding[0], 1, ceil_mode)
        ow = pool_output_size(w, kernel_size[1], stride[1], padding[1], 1, ceil_mode)
        return self._pool2d(self.rt, x, oh, ow, kernel_size, stride, padding, (1, 1),
                            count_include_pad, False)[0]

    # -- the table -----------------------------------------------------------------------------

    def kernels(self) -> dict[Any, Any]:
        """The table entries planned here whose primitives were given (a backend adds its own
        kernels beside them)."""
        given = self._given
        table: dict[Any, Any] = {
            mv.reshape: lambda x, shape=(): self.reshape(x, shape),
            mv.permute: lambda x, dims=(): permute(x, dims),
            mv.expand: lambda x, shape=(): broadcast_view(x, shape),
            mv.slice: lambda x, starts=(), stops=(), steps=(): slice_view(x, starts, stops,
                                                                          steps),
            mv.pad: lambda x, pad=(), value=0: self.pad(x, pad, value),
            mv.flip: lambda x, dims=(): flip(x, dims),
            mv.cat: lambda *xs, dim=0: self.cat(xs, dim),
            mv.contiguous: self.contiguous,
        }
        if "index_select" in given:
            table[nn.embedding] = self.embedding
            if "lerp" in given:
                table[nn.interpolate] = (lambda x, size=(), mode="nearest", align_corners=None:
                                         self.interpolate(x, size, mode, align_corners))
        if "conv2d" in given:
            conv2d = self._conv2d
            table.update({
                nn.conv2d: lambda x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
                groups=1: conv2d(self.rt, x, w, stride, padding, dilation, groups),
                nn.conv1d: self.conv1d,
                nn.conv_transpose1d: self.conv_transpose1d,
                nn.conv_transpose2d: self.conv_transpose2d,
            })
        if "pool2d" in given:
            table.update({nn.max_pool2d: self.max_pool2d, nn.avg_pool2d: self.avg_pool2d})
        return table


def _unsqueeze2(x: V) -> V:
    """``[N, C, L]`` seen as ``[N, C, 1, L]``."""
    s = x.strides
    out: V = x.view((x.shape[0], x.shape[1], 1, x.shape[2]), (s[0], s[1], 0, s[2]), x.offset)
    return out


def _squeeze2(x: V) -> V:
    s = x.strides
    out: V = x.view((x.shape[0], x.shape[1], x.shape[3]), (s[0], s[1], s[3]), x.offset)
    return out
