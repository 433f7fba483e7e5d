"""Neural-network kernels in PyTorch layouts (NCL / NCHW, OIHW weights).

conv2d gathers receptive fields with an im2col kernel into ``[N, C*kh*kw, OH*OW]`` and runs
the batched matmul kernel on it (groups are a second batch axis); transposed convolutions are
convolutions of the zero-dilated, padded input with the flipped kernel; interpolation
composes index_select and elementwise kernels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from ember.backend.geometry import interpolate, pool_output_size
from ember.backend.strided import slice_view
from ember.ops import composite as cops
from ember.ops import nn

from ._array import DeviceArray, contiguous_strides, dtype_name
from ._codegen import contiguous, copy_into, elementwise, exact_compare
from .linalg import matmul
from .movement import _index_select, reshape

if TYPE_CHECKING:
    from .backend import TritonBackend

__all__ = ["KERNELS", "conv2d", "conv_transpose2d"]

Pair = tuple[int, int]


def _acc(dt: np.dtype[Any]) -> Any:
    import triton.language as tl

    return tl.float64 if dtype_name(dt) == "float64" else tl.float32


def conv2d(be: TritonBackend, x: DeviceArray, w: DeviceArray, stride: Pair = (1, 1),
           padding: Pair = (0, 0), dilation: Pair = (1, 1), groups: int = 1) -> DeviceArray:
    """2-D cross-correlation of ``x[N, C, H, W]`` with ``w[O, C/groups, kh, kw]``."""
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    ck = cg * kh * kw
    cols = _im2col(be, x, (n, groups, ck, oh * ow), (oh, ow), (kh, kw), stride, padding,
                   dilation, batch_inner=False)
    wg = reshape(be, w, (groups, o // groups, ck))
    wb = wg.view((n, groups, o // groups, ck), (0, *wg.strides), wg.offset)
    out = matmul(be, wb, cols)  # [N, G, O/G, OH*OW]
    return out.view((n, o, oh, ow), (o * oh * ow, oh * ow, ow, 1), out.offset)


def _wide(*arrays: DeviceArray) -> bool:
    """Whether a gather over ``arrays`` needs 64-bit indices: any of them holds, or its
    strides may reach, 2**31 elements or more (a cheap bound; `kernels.nn.offsets`)."""
    for a in arrays:
        if a.size >= _INT32 or (a.shape and len(a.shape) * max(a.shape)
                                * max(map(abs, a.strides)) >= _INT32):
            return True
    return False


_INT32 = (1 << 31) - 1


def _gather(be: TritonBackend, name: str, total: int, arrays: tuple[DeviceArray, ...],
            scalars: tuple[int, ...], **meta: Any) -> None:
    """Launch the gather kernel ``name`` (`kernels.nn`) over ``total`` outputs, by a key of
    its own (`TritonBackend.launch_planned`): ``scalars`` hold every size and stride."""
    block = be.block_size(total)
    wide = _wide(*arrays)
    key = (name, total, scalars, wide, *[a.dtype for a in arrays], *meta.values())
    be.launch_planned(key, getattr(be.module("nn"), name), (-(-total // block),), arrays,
                      (total, *scalars), WIDE=wide, BLOCK=block, **meta)


def _im2col(be: TritonBackend, x: DeviceArray, shape: tuple[int, ...], out_hw: Pair,
            kernel: Pair, stride: Pair, padding: Pair, dilation: Pair,
            batch_inner: bool) -> DeviceArray:
    """x's patches: ``[N, G, C/G*kh*kw, OH*OW]``, or with ``batch_inner``
    ``[C*kh*kw, N, OH*OW]`` (both as the flat array ``shape``)."""
    n, c, h, wd = x.shape
    cols = be.empty(shape, x.dtype)
    total = cols.size
    if total:
        _gather(be, "im2col", total, (cols, x), (n, c, h, wd, *out_hw, *kernel, *stride,
                                                 *padding, *dilation, *x.strides),
                BATCH_INNER=batch_inner)
    return cols


def conv2d_weight_grad(be: TritonBackend, g: DeviceArray, x: DeviceArray, w: DeviceArray,
                       stride: Pair = (1, 1), padding: Pair = (0, 0),
                       dilation: Pair = (1, 1), groups: int = 1) -> DeviceArray:
    """``dw`` of ``conv2d(x, w)`` given the output's gradient ``g``
    (`ember.ops.composite.conv2d_weight_grad`): per group one matmul
    ``g[Og, N*OH*OW] @ patches[N*OH*OW, C/G*kh*kw]``, whose result is ``dw``'s layout."""
    n, c, _, _ = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = g.shape[2:]
    og, p, ck = o // groups, oh * ow, cg * kh * kw
    cols = _im2col(be, x, (c * kh * kw, n, p), (oh, ow), (kh, kw), stride, padding, dilation,
                   batch_inner=True)
    # cols[(c, i, j), n, p] seen as [G, N*P, CK]; g as [G, Og, N*P] (a copy: n moves inward)
    b = cols.view((groups, n * p, ck), (ck * n * p, 1, n * p), cols.offset)
    gt = contiguous(be, reshape(be, g, (n, groups, og, p)).transpose((1, 2, 0, 3)))
    a = gt.view((groups, og, n * p), (og * n * p, n * p, 1), gt.offset)
    out = matmul(be, a, b)  # [G, Og, CK]
    return out.view((o, cg, kh, kw), contiguous_strides((o, cg, kh, kw)), out.offset)


def conv_transpose2d(be: TritonBackend, x: DeviceArray, w: DeviceArray, stride: Pair = (1, 1),
                     padding: Pair = (0, 0), output_padding: Pair = (0, 0),
                     dilation: Pair = (1, 1), groups: int = 1) -> DeviceArray:
    """The gradient of conv2d with respect to its input: ``w[C, O/groups, kh, kw]``."""
    from .creation import full

    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    q = [dilation[i] * ((kh, kw)[i] - 1) - padding[i] for i in range(2)]
    cg = c // groups
    wt = reshape(be, w, (groups, cg, og, kh, kw)).transpose((0, 2, 1, 3, 4))
    wt = reshape(be, wt, (groups * og, cg, kh, kw))
    st = wt.strides
    flipped = wt.view(wt.shape, (st[0], st[1], -st[2], -st[3]),
                      wt.offset + (kh - 1) * st[2] + (kw - 1) * st[3])
    if tuple(stride) == (1, 1) and min(q) >= 0 and not any(output_padding):
        # nothing to spread out and the same padding on both sides: im2col pads it
        return conv2d(be, x, flipped, (1, 1), (q[0], q[1]), dilation, groups)
    before = [max(q[i], 0) for i in range(2)]
    after = [max(q[i] + output_padding[i], 0) for i in range(2)]
    up = [((h, wd)[i] - 1) * stride[i] + 1 for i in range(2)]
    size = [before[i] + up[i] + after[i] for i in range(2)]
    buf = full(be, (n, c, size[0], size[1]), 0, x.dtype)
    st = buf.strides
    interior = buf.view((n, c, h, wd), (st[0], st[1], st[2] * stride[0], st[3] * stride[1]),
                        buf.offset + before[0] * st[2] + before[1] * st[3])
    if x.size:
        copy_into(be, x, interior)
    crop0 = [max(-q[i], 0) for i in range(2)]
    crop1 = [max(-(q[i] + output_padding[i]), 0) for i in range(2)]
    if any(crop0) or any(crop1):
        buf = slice_view(buf, (0, 0, crop0[0], crop0[1]),
                         (n, c, size[0] - crop1[0], size[1] - crop1[1]), (1, 1, 1, 1))
    return conv2d(be, buf, flipped, (1, 1), (0, 0), dilation, groups)


def _unsq(x: DeviceArray) -> DeviceArray:
    """``[N, C, L]`` as ``[N, C, 1, L]``."""
    return x.view((x.shape[0], x.shape[1], 1, x.shape[2]),
                  (x.strides[0], x.strides[1], 0, x.strides[2]), x.offset)


def _sq(x: DeviceArray) -> DeviceArray:
    return x.view((x.shape[0], x.shape[1], x.shape[3]), (x.strides[0], x.strides[1],
                                                          x.strides[3]), x.offset)


def _conv1d(be: TritonBackend, x: DeviceArray, w: DeviceArray, stride: tuple[int] = (1,),
            padding: tuple[int] = (0,), dilation: tuple[int] = (1,),
            groups: int = 1) -> DeviceArray:
    return _sq(conv2d(be, _unsq(x), _unsq(w), (1, stride[0]), (0, padding[0]),
                      (1, dilation[0]), groups))


def _conv_transpose1d(be: TritonBackend, x: DeviceArray, w: DeviceArray,
                      stride: tuple[int] = (1,), padding: tuple[int] = (0,),
                      output_padding: tuple[int] = (0,), dilation: tuple[int] = (1,),
                      groups: int = 1) -> DeviceArray:
    return _sq(conv_transpose2d(be, _unsq(x), _unsq(w), (1, stride[0]), (0, padding[0]),
                                (0, output_padding[0]), (1, dilation[0]), groups))


# -- pooling ----------------------------------------------------------------------------------

def _max_pool2d(be: TritonBackend, x: DeviceArray, kernel_size: Pair = (1, 1),
                stride: Pair = (1, 1), padding: Pair = (0, 0), dilation: Pair = (1, 1),
                ceil_mode: bool = False) -> tuple[DeviceArray, DeviceArray]:
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_size, stride, padding, dilation
    oh = pool_output_size(h, kh, sh, ph, dh, ceil_mode)
    ow = pool_output_size(w, kw, sw, pw, dw, ceil_mode)
    from .creation import cast

    dtype, x = x.dtype, exact_compare(be, x)
    out = be.empty((n, c, oh, ow), x.dtype)
    idx = be.empty((n, c, oh, ow), np.int64)
    total = out.size
    if total:
        _gather(be, "max_pool", total, (out, idx, x), (c, h, w, oh, ow, kh, kw, sh, sw, ph,
                                                       pw, dh, dw, *x.strides))
    return cast(be, out, dtype), idx


def _max_pool2d_backward(be: TritonBackend, g: DeviceArray, idx: DeviceArray, x: DeviceArray,
                         kernel_size: Pair = (1, 1), stride: Pair = (1, 1),
                         padding: Pair = (0, 0), dilation: Pair = (1, 1),
                         ceil_mode: bool = False) -> DeviceArray:
    """``dx`` of `max_pool2d` in one kernel (`ember.ops.composite.max_pool2d_backward`)."""
    _, c, h, w = x.shape
    oh, ow = g.shape[2:]
    dx = be.empty(x.shape, g.dtype)
    total = dx.size
    if total:
        g, idx = contiguous(be, g), contiguous(be, idx)  # the same strides for both
        _gather(be, "max_pool_backward", total, (dx, g, idx),
                (c, h, w, oh, ow, *kernel_size, *stride, *padding, *dilation, *g.strides),
                ACC=_acc(g.dtype))
    return dx


def _avg_pool2d(be: TritonBackend, x: DeviceArray, kernel_size: Pair = (1, 1),
                stride: Pair = (1, 1), padding: Pair = (0, 0), ceil_mode: bool = False,
                count_include_pad: bool = True) -> DeviceArray:
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw) = kernel_size, stride, padding
    oh = pool_output_size(h, kh, sh, ph, 1, ceil_mode)
    ow = pool_output_size(w, kw, sw, pw, 1, ceil_mode)
    out = be.empty((n, c, oh, ow), x.dtype)
    total = out.size
    if total:
        _gather(be, "avg_pool", total, (out, x), (c, h, w, oh, ow, kh, kw, sh, sw, ph, pw,
                                                  *x.strides),
                INCLUDE_PAD=bool(count_include_pad), ACC=_acc(x.dtype))
    return out


def _adaptive_avg_pool2d(be: TritonBackend, x: DeviceArray,
                         output_size: Pair = (1, 1)) -> DeviceArray:
    n, c, h, w = x.shape
    oh, ow = output_size
    out = be.empty((n, c, oh, ow), x.dtype)
    total = out.size
    if total:
        maxh = max(-(-((i + 1) * h) // oh) - (i * h) // oh for i in range(oh))
        maxw = max(-(-((i + 1) * w) // ow) - (i * w) // ow for i in range(ow))
        _gather(be, "adaptive_avg_pool", total, (out, x), (c, h, w, oh, ow, maxh, maxw,
                                                           *x.strides), ACC=_acc(x.dtype))
    return out


def _embedding(be: TritonBackend, weight: DeviceArray, indices: DeviceArray) -> DeviceArray:
    flat = reshape(be, indices, (indices.size,))
    rows = _index_select(be, weight, flat, 0)
    shape = (*indices.shape, weight.shape[1])
    return rows.view(shape, contiguous_strides(shape), rows.offset)


# -- interpolation ----------------------------------------------------------------------------

def _interpolate(be: TritonBackend, x: DeviceArray, size: tuple[int, ...] = (),
                 mode: str = "nearest", align_corners: bool | None = None) -> DeviceArray:
    if mode not in ("nearest", "linear", "bilinear"):
        raise ValueError(f"interpolate: unsupported mode {mode!r} on {be.name}")
    lam_dt = np.float64 if dtype_name(x.dtype) == "float64" else np.float32

    def take(a: DeviceArray, index: np.ndarray, axis: int) -> DeviceArray:
        return _index_select(be, a, be.memory.from_numpy(index), axis)

    def lerp(lo: DeviceArray, hi: DeviceArray, lam: np.ndarray, axis: int) -> DeviceArray:
        la = be.memory.from_numpy(lam.astype(lam_dt))
        lav = la.view(lo.shape, tuple(1 if i == axis else 0 for i in range(lo.ndim)), la.offset)
        return elementwise(be, "r = x0 * (1 - x2) + x1 * x2", [lo, hi, lav], x.dtype)

    out = interpolate(x, x.shape, size, mode, align_corners, take=take, lerp=lerp,
                      device=be.name)
    return contiguous(be, out)


KERNELS: dict[Any, Any] = {
    nn.conv1d: _conv1d,
    nn.conv2d: conv2d,
    nn.conv_transpose1d: _conv_transpose1d,
    nn.conv_transpose2d: conv_transpose2d,
    nn.max_pool2d: _max_pool2d,
    cops.max_pool2d_backward: _max_pool2d_backward,
    cops.conv2d_weight_grad: conv2d_weight_grad,
    nn.avg_pool2d: _avg_pool2d,
    nn.adaptive_avg_pool2d: _adaptive_avg_pool2d,
    nn.embedding: _embedding,
    nn.interpolate: _interpolate,
}
