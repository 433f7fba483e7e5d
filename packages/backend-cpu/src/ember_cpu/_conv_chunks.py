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
- *filter blocks* otherwise (few output positions, many filters: ResNet's 7x7 blocks): the
  im2col matrix is copied first, split by channels, then each thread multiplies one block of
  filters by all of it and finishes those output channels.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from . import _blas, _conv_jit, _workers
from ._scratch import scratch

__all__ = ["BAND_FILTER_BYTES", "fused_im2col", "padded"]

Pair = tuple[int, int]

#: filter banks of at most this many bytes are multiplied band by band (each band's GEMM
#: packs them again)
BAND_FILTER_BYTES = 128 << 10
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
    whole = cols(x).reshape(n, k, oh * ow)
    # one block a thread: every block packs the whole im2col matrix again
    step = _workers.split(o, workers, 1)
    blocks = -(-o // step)

    def block(i: int) -> None:
        b, j = divmod(i, blocks)
        fs = slice(j * step, min(o, (j + 1) * step))
        _blas.gemm(wm[fs], whole[b], flat[b, fs], False)
        finish(b, fs, slice(None))

    with _blas.one_thread(0):
        _workers.run(block, n * blocks, workers)
    return out
