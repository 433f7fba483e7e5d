"""The data-movement loops of convolution and max-pooling, compiled with numba (first use).

numpy builds an im2col matrix from a 6-D ``sliding_window_view`` with one strided copy whose
innermost run is one output row (8 elements for an 8x8 image): most of a small convolution's
time went there, not into the GEMM.  Here each loop writes its output in order, reads the
padding as zeros instead of padding a copy of the input, and the transposed direction (col2im)
adds each column back with no scatter.  Max-pooling takes each window's maximum and its
position in one pass (no padded copy, no ``argmax`` over a window view, no index arithmetic
afterwards), and its backward adds each gradient at its index.

float32 and float64 only (callers widen float16/bfloat16 first and keep numpy for the rest);
compiled once per process and cached on disk beside this file (``cache=True``), fast-math
without "no nans / no infs" (nan must win max-pooling windows as in PyTorch).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["avg_pool2d", "col2im", "epilogue", "epilogue_sum", "im2col", "max_pool2d",
           "max_pool2d_backward", "max_pool2d_values"]

Geometry = tuple[int, int, int, int, int, int, int, int]  # kh, kw, sh, sw, ph, pw, dh, dw


@functools.cache
def _loops() -> dict[str, Callable[..., Any]]:
    import numba
    import numpy as np

    fast = {"nsz", "arcp", "contract", "afn", "reassoc"}
    jit = numba.njit(cache=True, fastmath=fast, error_model="numpy", nogil=True)

    @jit
    def im2col(x: Any, cols: Any, batch_major: bool, kh: int, kw: int, sh: int, sw: int,
               ph: int, pw: int, dh: int, dw: int) -> None:
        # cols[n, (c*kh + i)*kw + j] (or cols[(c*kh + i)*kw + j, n]) [oy, ox]
        #   = x[n, c, oy*sh - ph + i*dh, ox*sw - pw + j*dw]
        n_, c_, h, w = x.shape
        oh, ow = cols.shape[2], cols.shape[3]
        kk = c_ * kh * kw
        flat = cols.reshape(cols.size)
        zero = cols.dtype.type(0)
        for n in range(n_):
            for c in range(c_):
                for i in range(kh):
                    for j in range(kw):
                        k = (c * kh + i) * kw + j
                        base = ((n * kk + k) if batch_major else (k * n_ + n)) * oh * ow
                        c0 = j * dw - pw
                        # the output columns whose input column lies inside x
                        lo = min(-(c0 // sw) if c0 < 0 else 0, ow)
                        hi = min(max((w - 1 - c0) // sw + 1, lo), ow)
                        for oy in range(oh):
                            r = oy * sh - ph + i * dh
                            at = base + oy * ow
                            if r < 0 or r >= h:
                                for ox in range(ow):
                                    flat[at + ox] = zero
                                continue
                            for ox in range(lo):
                                flat[at + ox] = zero
                            if sw == 1:  # contiguous on both sides: vectorises
                                src = x[n, c, r]
                                for ox in range(lo, hi):
                                    flat[at + ox] = src[ox + c0]
                            else:
                                for ox in range(lo, hi):
                                    flat[at + ox] = x[n, c, r, ox * sw + c0]
                            for ox in range(hi, ow):
                                flat[at + ox] = zero

    @jit
    def col2im(cols: Any, out: Any, kh: int, kw: int, sh: int, sw: int, ph: int, pw: int,
               dh: int, dw: int) -> None:
        # out[n, c, y*sh - ph + i*dh, x*sw - pw + j*dw] += cols[n, (c*kh + i)*kw + j, y, x]
        n_, c_, h, w = out.shape
        ih, iw = cols.shape[2], cols.shape[3]
        for n in range(n_):
            for c in range(c_):
                for i in range(kh):
                    for j in range(kw):
                        k = (c * kh + i) * kw + j
                        c0 = j * dw - pw
                        for y in range(ih):
                            r = y * sh - ph + i * dh
                            if r < 0 or r >= h:
                                continue
                            for x in range(iw):
                                col = x * sw + c0
                                if col >= 0 and col < w:
                                    out[n, c, r, col] += cols[n, k, y, x]

    @jit
    def max_pool(x: Any, values: Any, indices: Any, kh: int, kw: int, sh: int, sw: int,
                 ph: int, pw: int, dh: int, dw: int) -> None:
        # the first maximum of each window's positions inside x, or its first nan; a window
        # with none inside gets -inf at its first position (PyTorch's rule for padding)
        n_, c_, h, w = x.shape
        oh, ow = values.shape[2], values.shape[3]
        for n in range(n_):
            for c in range(c_):
                for oy in range(oh):
                    h0 = oy * sh - ph
                    for ox in range(ow):
                        w0 = ox * sw - pw
                        best = x.dtype.type(-np.inf)
                        at = -1
                        for i in range(kh):
                            r = h0 + i * dh
                            if r < 0 or r >= h:
                                continue
                            for j in range(kw):
                                col = w0 + j * dw
                                if col < 0 or col >= w:
                                    continue
                                v = x[n, c, r, col]
                                if at < 0 or v > best or (v != v and best == best):
                                    best = v
                                    at = r * w + col
                        if at < 0:
                            fr = h0 + ((max(-h0, 0) + dh - 1) // dh) * dh
                            fc = w0 + ((max(-w0, 0) + dw - 1) // dw) * dw
                            at = fr * w + fc
                        values[n, c, oy, ox] = best
                        indices[n, c, oy, ox] = at

    @jit
    def max_pool_values(x: Any, out: Any, c0: int, c1: int, kh: int, kw: int, sh: int,
                        sw: int, ph: int, pw: int, dh: int, dw: int) -> None:
        # out[n, c, oy, ox] = max over the window at (oy*sh - ph, ox*sw - pw) of x for the
        # channels c0:c1; positions in the padding are left out (a window wholly inside it
        # gets -inf); a nan in a window wins.  Per output row: the maxima down the window's
        # rows first (contiguous, vectorised, into a line whose padding columns hold -inf),
        # then along the line with the stride (no padded copy of x)
        n_, _, h, w = x.shape
        oh, ow = out.shape[2], out.shape[3]
        low = x.dtype.type(-np.inf)
        span = max((ow - 1) * sw + (kw - 1) * dw + 1, pw + w)
        line = np.empty(span, x.dtype)
        for q in range(span):
            line[q] = low
        inner = line[pw:pw + w]
        for n in range(n_):
            for c in range(c0, c1):
                p = x[n, c]
                for oy in range(oh):
                    dst = out[n, c, oy]
                    first = True
                    for i in range(kh):
                        r = oy * sh - ph + i * dh
                        if r < 0 or r >= h:
                            continue
                        src = p[r]
                        if first:
                            for q in range(w):
                                inner[q] = src[q]
                            first = False
                        else:
                            for q in range(w):
                                v = src[q]
                                m = inner[q]
                                inner[q] = v if v > m or v != v else m
                    if first:  # every row of the window lies in the padding
                        for ox in range(ow):
                            dst[ox] = low
                        continue
                    if sw == 2 and kw == 3 and dw == 1:  # an image's stem: a stride known
                        for ox in range(ow):               # here vectorises (5x faster)
                            a, b, d = line[ox * 2], line[ox * 2 + 1], line[ox * 2 + 2]
                            m = b if b > a or b != b else a
                            dst[ox] = d if d > m or d != d else m
                        continue
                    for ox in range(ow):
                        dst[ox] = line[ox * sw]
                    for j in range(1, kw):
                        for ox in range(ow):
                            v = line[ox * sw + j * dw]
                            m = dst[ox]
                            dst[ox] = v if v > m or v != v else m

    @jit
    def avg_pool(x: Any, out: Any, c0: int, c1: int, kh: int, kw: int, sh: int, sw: int,
                 ph: int, pw: int, inv_h: Any, inv_w: Any) -> None:
        # out[n, c, oy, ox] = (sum of x over the window at (oy*sh - ph, ox*sw - pw), padding
        # read as 0) * inv_h[oy] * inv_w[ox] for the channels c0:c1.  Per output row: the
        # sums down the window's rows first (contiguous, vectorised, into a zero-bordered
        # line), then along the line with the stride (no padded copy of x)
        n_, _, h, w = x.shape
        oh, ow = out.shape[2], out.shape[3]
        zero = x.dtype.type(0)
        span = max((ow - 1) * sw + kw, pw + w)
        line = np.empty(span, x.dtype)
        for q in range(span):
            line[q] = zero
        inner = line[pw:pw + w]
        for n in range(n_):
            for c in range(c0, c1):
                p = x[n, c]
                for oy in range(oh):
                    dst = out[n, c, oy]
                    for q in range(w):
                        inner[q] = zero
                    for i in range(kh):
                        r = oy * sh - ph + i
                        if r < 0 or r >= h:
                            continue
                        src = p[r]
                        for q in range(w):
                            inner[q] += src[q]
                    k = inv_h[oy]
                    if sw == 1 and kw == 3:  # Inception's 3x3 stride-1 pooling: vectorises
                        for ox in range(ow):
                            dst[ox] = (line[ox] + line[ox + 1] + line[ox + 2]) * (
                                k * inv_w[ox])
                        continue
                    for ox in range(ow):
                        acc = zero
                        for j in range(kw):
                            acc += line[ox * sw + j]
                        dst[ox] = acc * (k * inv_w[ox])

    @jit
    def max_pool_backward(g: Any, indices: Any, out: Any) -> bool:
        # out[plane, indices[plane, k]] += g[plane, k]; False on an index outside the plane
        planes, hw = out.shape
        for p in range(planes):
            for k in range(g.shape[1]):
                at = indices[p, k]
                if at < 0 or at >= hw:
                    return False
                out[p, at] += g[p, k]
        return True

    @numba.njit(cache=True, fastmath=fast, error_model="numpy", nogil=True, inline="always")
    def affine_row(src: Any, dst: Any, res: Any, k: Any, c: Any, relu: bool) -> None:
        # dst[q] = src[q] * k + c (+ res[q] unless res is None), then ReLU when relu (which
        # keeps nan, as np.maximum does); numba compiles the None case without the addition;
        # inlined into its callers' loops (a call per row would cost 3x the epilogue's time)
        zero = dst.dtype.type(0)
        for q in range(dst.size):
            v = src[q] * k + c
            if res is not None:
                v += res[q]
            dst[q] = zero if relu and v < zero else v

    @jit
    def epilogue(y: Any, out: Any, scale: Any, shift: Any, residual: Any, relu: bool) -> None:
        # out[n, o] = max(y * scale[o] + shift[o] + residual[n, o], 0) over [H, W] planes in
        # one pass; y may be a strided view and may be out itself; an empty scale / residual
        # is left out
        n_, o_, h_, _ = y.shape
        scaled, added = scale.size > 0, residual.size > 0
        for n in range(n_):
            for o in range(o_):
                k = scale[o] if scaled else y.dtype.type(1)
                for r in range(h_):
                    if added:
                        affine_row(y[n, o, r], out[n, o, r], residual[n, o, r], k, shift[o],
                                   relu)
                    else:
                        affine_row(y[n, o, r], out[n, o, r], None, k, shift[o], relu)

    @jit
    def epilogue_sum(parts: Any, out: Any, scale: Any, shift: Any, residual: Any,
                     relu: bool) -> None:
        # out[n, o] = max((parts[0] + parts[1] + ...)[n, o] * scale[o] + shift[o] +
        # residual[n, o], 0) over [N, O, L] arrays, the parts summed in their order
        p_, n_, o_, l_ = parts.shape
        scaled, added = scale.size > 0, residual.size > 0
        acc = np.empty(l_, out.dtype)
        for n in range(n_):
            for o in range(o_):
                k = scale[o] if scaled else out.dtype.type(1)
                first = parts[0, n, o]
                for q in range(l_):
                    acc[q] = first[q]
                for p in range(1, p_):
                    src = parts[p, n, o]
                    for q in range(l_):
                        acc[q] += src[q]
                if added:
                    affine_row(acc, out[n, o], residual[n, o], k, shift[o], relu)
                else:
                    affine_row(acc, out[n, o], None, k, shift[o], relu)

    return {"im2col": im2col, "col2im": col2im, "max_pool": max_pool,
            "max_pool_values": max_pool_values, "avg_pool": avg_pool,
            "max_pool_backward": max_pool_backward, "epilogue": epilogue,
            "epilogue_sum": epilogue_sum}


def im2col(x: Any, cols: Any, geometry: Geometry, batch_major: bool = True) -> None:
    """Fill ``cols`` (C-contiguous ``[N, C*kh*kw, OH, OW]``, or ``[C*kh*kw, N, OH, OW]`` when
    not ``batch_major``) with the receptive fields of ``x[N, C, H, W]`` (C-contiguous);
    positions in the padding read as 0."""
    _loops()["im2col"](x, cols, batch_major, *geometry)


def col2im(cols: Any, out: Any, geometry: Geometry) -> None:
    """Add ``cols[N, C*kh*kw, IH, IW]`` into ``out[N, C, H, W]`` at the positions im2col
    reads them from (the transpose of `im2col`); the padding's share is dropped."""
    _loops()["col2im"](cols, out, *geometry)


def max_pool2d(x: Any, values: Any, indices: Any, geometry: Geometry) -> None:
    """Each window's maximum into ``values[N, C, OH, OW]`` and its flat ``H*W`` position into
    ``indices`` (int64)."""
    _loops()["max_pool"](x, values, indices, *geometry)


def max_pool2d_values(x: Any, out: Any, channels: tuple[int, int], geometry: Geometry) -> None:
    """Each window's maximum (nan when it holds one; -inf for a window wholly in the
    padding) into ``out[N, C, OH, OW]`` from ``x[N, C, H, W]`` for channels
    ``channels[0]:channels[1]``; ``out`` may cover windows past the input's end
    (``ceil_mode``)."""
    _loops()["max_pool_values"](x, out, *channels, *geometry)


def avg_pool2d(x: Any, out: Any, channels: tuple[int, int], kernel: tuple[int, int],
               stride: tuple[int, int], padding: tuple[int, int], inv_h: Any,
               inv_w: Any) -> None:
    """Each window's sum (padding read as 0) times ``inv_h[oy] * inv_w[ox]`` (the inverse of
    its divisor) into ``out[N, C, OH, OW]`` from ``x[N, C, H, W]`` for channels
    ``channels[0]:channels[1]``; ``out`` may cover windows past the input's end
    (``ceil_mode``)."""
    _loops()["avg_pool"](x, out, *channels, *kernel, *stride, *padding, inv_h, inv_w)


def max_pool2d_backward(g: Any, indices: Any, out: Any) -> bool:
    """``out[P, H*W] += g[P, K]`` at ``indices[P, K]``; False (and ``out`` partly filled)
    when an index is outside ``[0, H*W)``."""
    return bool(_loops()["max_pool_backward"](g, indices, out))


def epilogue(y: Any, out: Any, scale: Any, shift: Any, residual: Any, relu: bool) -> None:
    """``out = y * scale[O] + shift[O] + residual``, then ReLU when ``relu``, over
    ``[N, O, H, W]`` arrays (``y`` any view, possibly ``out`` itself; ``out`` and ``residual``
    of one shape); an empty ``scale`` or ``residual`` is left out."""
    _loops()["epilogue"](y, out, scale, shift, residual, relu)


def epilogue_sum(parts: Any, out: Any, scale: Any, shift: Any, residual: Any,
                 relu: bool) -> None:
    """`epilogue` of the sum of ``parts[P, N, O, L]`` (added in their order) into
    ``out[N, O, L]`` (``residual`` of that shape, or empty)."""
    _loops()["epilogue_sum"](parts, out, scale, shift, residual, relu)
