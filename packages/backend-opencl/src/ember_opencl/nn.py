"""Neural-network kernels in PyTorch layouts (NCL / NCHW, OIHW weights).

conv2d gathers receptive fields into an im2col matrix ``[N, G, C/G*kh*kw, OH*OW]`` and hands it
to the tiled matmul with the weight broadcast over the batch (stride 0, no copy); transposed
convolutions are convolutions of the zero-dilated input with the flipped kernel.  Pools are
direct kernels, one work-item per output.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ember.backend.movement import StridedKernels, conv2d_columns, conv2d_size
from ember.ops import nn

from . import movement
from .linalg import matmul
from .runtime import CLArray, Runtime, compute_type, ctype, is_float, load_expr, store_expr
from .strided import contiguous, copy_into, run_map

__all__ = ["conv2d", "kernels"]

Pair = tuple[int, int]
I64 = np.dtype(np.int64)

# One work-item per row of the im2col matrix and output row ``oh``: it writes ``OW``
# neighbouring columns, so the index arithmetic (divisions) happens once per row, not per
# element, and the writes are contiguous.
_IM2COL = """
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void im2col(__global {t}* cols, __global const {t}* x, long xo, long xs0, long xs1,
            long xs2, long xs3, int C, int H, int W, int kh, int kw, int sh,
            int sw, int ph, int pw, int dh, int dw, int OH, int OW)
{{
    int oh = get_global_id(0);
    long row = get_global_id(1);
    int j = row % kw; long r = row / kw;
    int q = r % kh; r /= kh;
    int c = r % C; long n = r / C;
    int h = oh * sh - ph + q * dh;
    __global {t}* out = cols + (row * OH + oh) * OW;
    if (h < 0 || h >= H) {{
        for (int ow = 0; ow < OW; ow++) out[ow] = 0;
        return;
    }}
    __global const {t}* src = x + xo + n * xs0 + c * xs1 + h * xs2;
    for (int ow = 0; ow < OW; ow++) {{
        int w = ow * sw - pw + j * dw;
        out[ow] = (w >= 0 && w < W) ? src[w * xs3] : ({t})0;
    }}
}}
"""


def conv2d(rt: Runtime, x: CLArray, w: CLArray, stride: Pair = (1, 1), padding: Pair = (0, 0),
           dilation: Pair = (1, 1), groups: int = 1) -> CLArray:
    n, c, h, wd = x.shape
    _, cg, kh, kw = w.shape
    oh, ow = conv2d_size(x.shape, w.shape, stride, padding, dilation)
    cols = rt.empty((n, groups, cg * kh * kw, oh * ow), x.dtype)
    if cols.size:
        k = rt.kernel(_IM2COL.format(t=ctype(x.dtype)), "im2col")
        rt.launch(k, (oh, n * c * kh * kw), (1, 1), cols.buffer, x.buffer,
                  np.int64(x.offset), *map(np.int64, x.strides),
                  *map(np.int32, (c, h, wd, kh, kw, *stride, *padding, *dilation, oh, ow)))
    return conv2d_columns(cols, contiguous(rt, w), groups, (oh, ow),
                          lambda a, b: matmul(rt, a, b))


# -- pooling ----------------------------------------------------------------------------------

_POOL_HEAD = """
__kernel void pool(__global {t}* out, __global long* outi, __global const {t}* x, long xo,
                   long xs0, long xs1, long xs2, long xs3, long C, long H, long W, long OH,
                   long OW, long kh, long kw, long sh, long sw, long ph, long pw, long dh,
                   long dw, int include_pad, long total)
{{
    long i = get_global_id(0);
    if (i >= total) return;
    long ow = i % OW, r = i / OW;
    long oh = r % OH; r /= OH;
    long c = r % C, n = r / C;
    __global const {t}* xp = x + xo + n * xs0 + c * xs1;
    long h0 = oh * sh - ph, w0 = ow * sw - pw;
    {body}
}}
"""

_MAX_BODY = """
    {c} best = 0; long bi = -1;
    for (long q = 0; q < kh; q++) {{
        long hh = h0 + q * dh;
        if (hh < 0 || hh >= H) continue;
        for (long j = 0; j < kw; j++) {{
            long ww = w0 + j * dw;
            if (ww < 0 || ww >= W) continue;
            {c} v = {load};
            if (bi < 0 || ({nan_keep} v > best) {nan_take}) {{ best = v; bi = hh * W + ww; }}
        }}
    }}
    out[i] = {store_best}; outi[i] = bi;
"""

_AVG_BODY = """
    long h1 = min(h0 + kh, H + ph), w1 = min(w0 + kw, W + pw);
    long size = (h1 - h0) * (w1 - w0);
    long ha = max(h0, (long)0), hb = min(h1, H), wa = max(w0, (long)0), wb = min(w1, W);
    if (!include_pad) size = (hb - ha) * (wb - wa);
    {c} acc = 0;
    for (long hh = ha; hh < hb; hh++)
        for (long ww = wa; ww < wb; ww++) acc += {load};
    out[i] = {store_avg};
"""


def pool2d(rt: Runtime, x: CLArray, oh: int, ow: int, k: Pair, s: Pair, p: Pair, d: Pair,
           include_pad: bool, want_index: bool) -> tuple[CLArray, CLArray | None]:
    """max_pool2d with its indices (``want_index``) or avg_pool2d to ``[N, C, oh, ow]``."""
    body = _MAX_BODY if want_index else _AVG_BODY
    n, c, h, w = x.shape
    out = rt.empty((n, c, oh, ow), x.dtype)
    outi = rt.empty((n, c, oh, ow), I64) if want_index else rt.empty((1,), I64)
    fl = is_float(x.dtype)
    c_t = compute_type(x.dtype)
    src = _POOL_HEAD.format(t=ctype(x.dtype), body=body.format(
        t=ctype(x.dtype), c=c_t, load=load_expr(x.dtype, "xp[hh * xs2 + ww * xs3]"),
        store_best=store_expr(x.dtype, "best", c_t),
        store_avg=store_expr(x.dtype, f"acc / ({c_t})size", c_t),
        nan_keep="!isnan(best) &&" if fl else "", nan_take="|| (isnan(v) && !isnan(best))"
        if fl else ""))
    kern = rt.kernel(src, "pool")
    rt.launch1d(kern, out.size, out.buffer, outi.buffer, x.buffer, np.int64(x.offset),
              *map(np.int64, x.strides), *map(np.int64, (c, h, w, oh, ow, *k, *s, *p, *d)),
              np.int32(include_pad))
    return out, outi if want_index else None


_ADAPTIVE = """
__kernel void apool(__global {t}* out, __global const {t}* x, long xo, long xs0, long xs1,
                    long xs2, long xs3, long C, long H, long W, long OH, long OW, long total)
{{
    long i = get_global_id(0);
    if (i >= total) return;
    long ow = i % OW, r = i / OW;
    long oh = r % OH; r /= OH;
    long c = r % C, n = r / C;
    __global const {t}* xp = x + xo + n * xs0 + c * xs1;
    long h0 = (oh * H) / OH, h1 = ((oh + 1) * H + OH - 1) / OH;
    long w0 = (ow * W) / OW, w1 = ((ow + 1) * W + OW - 1) / OW;
    {c} acc = 0;
    for (long hh = h0; hh < h1; hh++)
        for (long ww = w0; ww < w1; ww++) acc += {load};
    out[i] = {store};
}}
"""


def kernels(rt: Runtime) -> dict[Any, Any]:
    """The nn kernels, and the views, copies and convolutions `StridedKernels` plans."""
    planned = StridedKernels("opencl", rt, fill=movement.fill, copy_into=copy_into,
                             index_select=movement.index_select, conv2d=conv2d,
                             pool2d=pool2d, lerp=lambda rt, lo, hi, w: run_map(
                                 rt, "a * (1 - c) + b * c", [lo, hi, w], shape=lo.shape))

    def adaptive_avg_pool2d(x: CLArray, output_size: Pair = (1, 1)) -> CLArray:
        n, c, h, w = x.shape
        oh, ow = output_size
        out = rt.empty((n, c, oh, ow), x.dtype)
        c_t = compute_type(x.dtype)
        src = _ADAPTIVE.format(
            t=ctype(x.dtype), c=c_t, load=load_expr(x.dtype, "xp[hh * xs2 + ww * xs3]"),
            store=store_expr(x.dtype, f"acc / ({c_t})((h1 - h0) * (w1 - w0))", c_t))
        rt.launch1d(rt.kernel(src, "apool"), out.size, out.buffer, x.buffer,
                  np.int64(x.offset), *map(np.int64, x.strides),
                  *map(np.int64, (c, h, w, oh, ow)))
        return out

    return {**planned.kernels(), nn.adaptive_avg_pool2d: adaptive_avg_pool2d}
