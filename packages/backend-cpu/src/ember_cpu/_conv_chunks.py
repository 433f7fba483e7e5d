"""`fused_conv2d` on the im2col path with its epilogue in the GEMMs' chunks.

Each chunk of work ends with the epilogue (scale, shift, residual, ReLU) of the outputs it
just wrote, while they are in cache, so a layer is one or two hand-offs to the helper threads
(`_workers`) instead of three (copy, GEMM, epilogue), and no thread waits for a serial
epilogue:

- *bands*, for small filter banks on large maps (an image's stem: 64 filters of 3x7x7 on
  112x112 outputs): a chunk is a band of output rows, whose receptive fields it copies into
  its own cache-sized work buffer and multiplies by the filters; the im2col matrix is never
  whole (on the development VM, one thread: ResNet-18's stem 2.55 -> 2.38 ms; on two, one
  hand-off where there were three);
- *channel blocks* otherwise on several threads (few output positions, many filters:
  ResNet's 14x14 and 7x7 blocks): the GEMM split along its inner dimension, each thread
  copying and multiplying the receptive fields of its own input channels into a partial
  result, the partials added with the epilogue (`_channel_blocks`);
- pointwise (1x1) convolutions (`fused_pointwise`): one block of filters a thread, over
  the (subsampled) input itself, each finishing its output channels.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from . import _blas, _conv_jit, _workers
from ._scratch import scratch

__all__ = ["BAND_FILTER_BYTES", "SPLIT_FLOPS", "fused_im2col", "fused_pointwise", "padded"]

Pair = tuple[int, int]

#: filter banks of at most this many bytes are multiplied band by band (each band's GEMM
#: packs them again)
BAND_FILTER_BYTES = 128 << 10
#: pointwise layers of fewer floating-point operations run on one thread
SPLIT_FLOPS = 1 << 26
#: about this many bytes of receptive fields a band copies (half of the L2 of a core)
_BAND_BYTES = 512 << 10


def padded(x: np.ndarray, padding: Pair) -> np.ndarray:
    """``x`` with a zero border of ``padding``, in a work buffer (`scratch`), or ``x`` itself
    when there is none; the border stays zero (only this caller writes buffers of this key,
    and only inside)."""
    ph, pw = padding
    if not ph and not pw:
        return x
    n, c, h, w = x.shape
    xp, _ = scratch(("conv2d.pad", ph, pw), (n, c, h + 2 * ph, w + 2 * pw), x.dtype, True)
    xp[:, :, ph:ph + h, pw:pw + w] = x
    return xp


def fused_im2col(x: np.ndarray, w: np.ndarray, stride: Pair, padding: Pair, dilation: Pair,
                 out_hw: Pair, scale: np.ndarray, shift: np.ndarray, residual: np.ndarray,
                 relu: bool, cols: Any) -> np.ndarray:
    """``relu(conv2d(x, w) * scale[o] + shift[o] + residual)`` (``scale`` or ``residual``
    empty: left out) for one group, ``x``, ``w`` and the rest of one float dtype `_blas.gemm`
    takes; ``cols(x)`` is the caller's whole im2col matrix ``[N, C, kh, kw, OH, OW]``, used
    on the filter-block path."""
    n, c, _, _ = x.shape
    o, _, kh, kw = w.shape
    oh, ow = out_hw
    (sh, sw), (dh, dw) = stride, dilation
    k = c * kh * kw
    dt = x.dtype
    wm = np.ascontiguousarray(w).reshape(o, k)
    out = np.empty((n, o, oh, ow), dt)
    flat = out.reshape(n, o, oh * ow)
    scaled, added = scale.size > 0, residual.size > 0
    workers = _workers.threads()

    def finish(b: int, fs: slice, rows: slice) -> None:  # the epilogue, in place
        y = out[b:b + 1, fs, rows]
        _conv_jit.epilogue(y, y, scale[fs] if scaled else scale, shift[fs],
                           residual[b:b + 1, fs, rows] if added else residual, relu)

    if o * k * dt.itemsize <= BAND_FILTER_BYTES:
        xp = padded(x, padding)
        _, s1, s2, s3 = xp.strides
        rows = max(1, min(oh, _BAND_BYTES // (k * ow * dt.itemsize)))
        bands = -(-oh // rows)

        def band(i: int) -> None:
            b, j = divmod(i, bands)
            y0, y1 = j * rows, min(oh, (j + 1) * rows)
            # this thread's buffer (scratch is per thread)
            fields, _ = scratch(("conv2d.band",), (c, kh, kw, y1 - y0, ow), dt)
            np.copyto(fields, as_strided(xp[b, :, y0 * sh:], fields.shape,
                                         (s1, dh * s2, dw * s3, sh * s2, sw * s3),
                                         writeable=False))
            _blas.gemm(wm, fields.reshape(k, (y1 - y0) * ow), flat[b, :, y0 * ow:y1 * ow],
                       False)
            finish(b, slice(None), slice(y0, y1))

        with _blas.one_thread(0):
            _workers.run(band, n * bands, workers)
        return out
    if workers > 1:
        return _channel_blocks(x, wm, (kh, kw), stride, padding, dilation, out_hw, scale,
                               shift, residual, relu, workers)
    # one thread: the whole im2col matrix, one GEMM an image, the epilogue in place
    whole = cols(x).reshape(n, k, oh * ow)
    with _blas.one_thread(0):
        for b in range(n):
            _blas.gemm(wm, whole[b], flat[b], False)
            finish(b, slice(None), slice(None))
    return out


def _channel_blocks(x: np.ndarray, wm: np.ndarray, k: Pair, stride: Pair, padding: Pair,
                    dilation: Pair, out_hw: Pair, scale: np.ndarray, shift: np.ndarray,
                    residual: np.ndarray, relu: bool, workers: int) -> np.ndarray:
    """The GEMM split along its inner dimension, one block of input channels a thread: a
    block pads its channels, copies their receptive fields into its rows of the im2col
    matrix and multiplies them by its columns of the filters into a partial result of its
    own; the partials are then added in order with the epilogue in one pass (the same sums
    whichever thread took a block).  Nothing is packed twice (a block of filters packs the
    whole im2col matrix, a band of rows all the filters) and the copy needs no stage of its
    own.  On two idle cores of the development VM (2026-12-06; filter blocks before):
    ResNet-18's 7x7 layers 1.13 -> 1.06 ms, 14x14 1.02 -> 0.89, the stride-2 layers
    0.77 -> 0.62 and 0.63 -> 0.53; more blocks (dynamic sharing) were slower for the
    larger sum, as was a second stage of threads for it."""
    n, c, h, wd = x.shape
    o = wm.shape[0]
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = k, stride, dilation, out_hw
    ph, pw = padding
    kk = kh * kw
    dt = x.dtype
    step = _workers.split(c, workers, 1)
    parts = -(-c // step)
    # the padded input's border stays zero: only this caller writes this key, only inside
    xp, _ = scratch(("conv2d.pad", ph, pw), (n, c, h + 2 * ph, wd + 2 * pw), dt, True)
    fields, _ = scratch(("conv2d.cols",), (n, c, kh, kw, oh, ow), dt)
    partial, _ = scratch(("conv2d.partials",), (parts, n, o, oh * ow), dt)
    s0, s1, s2, s3 = xp.strides
    view = as_strided(xp, fields.shape, (s0, s1, dh * s2, dw * s3, sh * s2, sw * s3),
                      writeable=False)
    rows = fields.reshape(n, c * kk, oh * ow)

    def block(i: int) -> None:
        c0, c1 = i * step, min(c, (i + 1) * step)
        if ph or pw:
            xp[:, c0:c1, ph:ph + h, pw:pw + wd] = x[:, c0:c1]
        np.copyto(fields[:, c0:c1], view[:, c0:c1])
        for b in range(n):
            _blas.gemm(wm[:, c0 * kk:c1 * kk], rows[b, c0 * kk:c1 * kk], partial[i, b], False)

    with _blas.one_thread(0):
        _workers.run(block, parts, workers)
    out = np.empty((n, o, oh, ow), dt)
    res = residual.reshape(n, o, oh * ow) if residual.size else np.empty((0, 0, 0), dt)
    _conv_jit.epilogue_sum(partial, out.reshape(n, o, oh * ow), scale, shift, res, relu)
    return out


def fused_pointwise(x: np.ndarray, w: np.ndarray, stride: Pair, scale: np.ndarray,
                    shift: np.ndarray, residual: np.ndarray, relu: bool) -> np.ndarray:
    """`fused_im2col` for a 1x1 kernel with no padding (one group): ``W[O, C] @ x[C, OH*OW]``
    per image, on the input subsampled by ``stride`` (one copy); one block of filters a
    thread, each GEMM followed by the epilogue of its output channels, so a layer is one
    hand-off.  A layer under `SPLIT_FLOPS` runs on the calling thread: ResNet's downsample
    convolutions (13-26 MFLOP, ~0.15 ms) took longer on two idle cores than on one (the
    helper's start and the GIL's hand-offs cost more than half the work saves)."""
    n, c = x.shape[:2]
    o = w.shape[0]
    xs = x[:, :, ::stride[0], ::stride[1]] if tuple(stride) != (1, 1) else x
    oh, ow = xs.shape[2:]
    cols = np.ascontiguousarray(xs).reshape(n, c, oh * ow)
    wm = np.ascontiguousarray(w).reshape(o, c)
    out = np.empty((n, o, oh, ow), x.dtype)
    flat = out.reshape(n, o, oh * ow)
    scaled, added = scale.size > 0, residual.size > 0
    workers = _workers.threads() if 2 * n * o * c * oh * ow >= SPLIT_FLOPS else 1
    step = _workers.split(o, workers, 1)
    blocks = -(-o // step)

    def block(i: int) -> None:
        b, j = divmod(i, blocks)
        fs = slice(j * step, min(o, (j + 1) * step))
        _blas.gemm(wm[fs], cols[b], flat[b, fs], False)
        y = out[b:b + 1, fs]
        _conv_jit.epilogue(y, y, scale[fs] if scaled else scale, shift[fs],
                           residual[b:b + 1, fs] if added else residual, relu)

    with _blas.one_thread(0):
        _workers.run(block, n * blocks, workers)
    return out
