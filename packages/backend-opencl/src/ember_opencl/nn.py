"""Neural-network kernels in PyTorch layouts (NCL / NCHW, OIHW weights).

conv2d gathers receptive fields into an im2col matrix ``[N, G, C/G*kh*kw, OH*OW]`` and hands it
to the tiled matmul with the weight broadcast over the batch (stride 0, no copy); transposed
convolutions are convolutions of the zero-dilated input with the flipped kernel.  Pools are
direct kernels, one work-item per output.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from ember.backend.geometry import interpolate, pool_output_size
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
    o, cg, kh, kw = w.shape
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    kk = cg * kh * kw
    cols = rt.empty((n, groups, kk, oh * ow), x.dtype)
    if cols.size:
        k = rt.kernel(_IM2COL.format(t=ctype(x.dtype)), "im2col")
        rt.launch(k, (oh, n * c * kh * kw), (1, 1), cols.buffer, x.buffer,
                  np.int64(x.offset), *map(np.int64, x.strides),
                  *map(np.int32, (c, h, wd, kh, kw, *stride, *padding, *dilation, oh, ow)))
    wc = contiguous(rt, w)
    og = o // groups
    wv = wc.view((n, groups, og, kk), (0, og * kk, kk, 1), wc.offset)
    out = matmul(rt, wv, cols)
    return out.view((n, o, oh, ow), None or _dense((n, o, oh, ow)), out.offset)


def _dense(shape: tuple[int, ...]) -> tuple[int, ...]:
    from .runtime import contiguous_strides

    return contiguous_strides(shape)


def conv_transpose2d(rt: Runtime, x: CLArray, w: CLArray, stride: Pair = (1, 1),
                     padding: Pair = (0, 0), output_padding: Pair = (0, 0),
                     dilation: Pair = (1, 1), groups: int = 1) -> CLArray:
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    sh, sw = stride
    qh = dilation[0] * (kh - 1) - padding[0]
    qw = dilation[1] * (kw - 1) - padding[1]
    bh, bw = max(qh, 0), max(qw, 0)
    ah, aw = max(qh + output_padding[0], 0), max(qw + output_padding[1], 0)
    uh, uw = (h - 1) * sh + 1 if h else 0, (wd - 1) * sw + 1 if wd else 0
    up = movement._fill(rt, (n, c, uh + bh + ah, uw + bw + aw), x.dtype, 0)
    inner = movement.slice_view(up, (0, 0, bh, bw), (n, c, bh + uh, bw + uw), (1, 1, sh, sw))
    copy_into(rt, inner, x)
    ch0, cw0 = max(-qh, 0), max(-qw, 0)
    ch1, cw1 = max(-(qh + output_padding[0]), 0), max(-(qw + output_padding[1]), 0)
    if ch0 or cw0 or ch1 or cw1:
        up = movement.slice_view(up, (0, 0, ch0, cw0), (n, c, up.shape[2] - ch1,
                                                       up.shape[3] - cw1), (1, 1, 1, 1))
    cg = c // groups
    wg = movement.reshape(rt, w, (groups, cg, og, kh, kw))
    wt = movement.reshape(rt, movement.permute(wg, (0, 2, 1, 3, 4)), (groups * og, cg, kh, kw))
    wt = movement.flip(wt, (2, 3))
    return conv2d(rt, up, wt, (1, 1), (0, 0), dilation, groups)


def _unsqueeze2(x: CLArray) -> CLArray:
    """``[N, C, L]`` seen as ``[N, C, 1, L]``."""
    s = x.strides
    return x.view((x.shape[0], x.shape[1], 1, x.shape[2]), (s[0], s[1], 0, s[2]), x.offset)


def _squeeze2(x: CLArray) -> CLArray:
    s = x.strides
    return x.view((x.shape[0], x.shape[1], x.shape[3]), (s[0], s[1], s[3]), x.offset)


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


def _pool(rt: Runtime, body: str, x: CLArray, oh: int, ow: int, k: Pair, s: Pair, p: Pair,
          d: Pair, include_pad: bool, want_index: bool) -> tuple[CLArray, CLArray | None]:
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


def _interpolate(rt: Runtime, x: CLArray, size: tuple[int, ...], mode: str,
                 align_corners: bool | None) -> CLArray:
    def take(a: CLArray, index: np.ndarray, axis: int) -> CLArray:
        return movement.index_select(rt, a, rt.upload(index), axis)

    def lerp(lo: CLArray, hi: CLArray, lam: np.ndarray, axis: int) -> CLArray:
        shape = [1] * lo.ndim
        shape[axis] = lam.size
        lv = rt.upload(lam.astype(x.dtype).reshape(shape))
        return run_map(rt, "a * (1 - c) + b * c", [lo, hi, lv], shape=lo.shape)

    return interpolate(x, x.shape, size, mode, align_corners, take=take, lerp=lerp,
                       device="opencl")


def kernels(rt: Runtime) -> dict[Any, Any]:
    def conv1d(x: CLArray, w: CLArray, stride: Any = (1,), padding: Any = (0,),
               dilation: Any = (1,), groups: int = 1) -> CLArray:
        out = conv2d(rt, _unsqueeze2(x), _unsqueeze2(w), (1, stride[0]), (0, padding[0]),
                     (1, dilation[0]), groups)
        return _squeeze2(out)

    def conv_transpose1d(x: CLArray, w: CLArray, stride: Any = (1,), padding: Any = (0,),
                         output_padding: Any = (0,), dilation: Any = (1,),
                         groups: int = 1) -> CLArray:
        out = conv_transpose2d(rt, _unsqueeze2(x), _unsqueeze2(w), (1, stride[0]),
                               (0, padding[0]), (0, output_padding[0]), (1, dilation[0]), groups)
        return _squeeze2(out)

    def max_pool2d(x: CLArray, kernel_size: Pair = (1, 1), stride: Pair = (1, 1),
                   padding: Pair = (0, 0), dilation: Pair = (1, 1),
                   ceil_mode: bool = False) -> tuple[CLArray, CLArray]:
        h, w = x.shape[2:]
        oh = pool_output_size(h, kernel_size[0], stride[0], padding[0], dilation[0], ceil_mode)
        ow = pool_output_size(w, kernel_size[1], stride[1], padding[1], dilation[1], ceil_mode)
        v, i = _pool(rt, _MAX_BODY, x, oh, ow, kernel_size, stride, padding, dilation, True,
                     True)
        assert i is not None
        return v, i

    def avg_pool2d(x: CLArray, kernel_size: Pair = (1, 1), stride: Pair = (1, 1),
                   padding: Pair = (0, 0), ceil_mode: bool = False,
                   count_include_pad: bool = True) -> CLArray:
        h, w = x.shape[2:]
        oh = pool_output_size(h, kernel_size[0], stride[0], padding[0], 1, ceil_mode)
        ow = pool_output_size(w, kernel_size[1], stride[1], padding[1], 1, ceil_mode)
        return _pool(rt, _AVG_BODY, x, oh, ow, kernel_size, stride, padding, (1, 1),
                     count_include_pad, False)[0]

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

    def embedding(weight: CLArray, indices: CLArray) -> CLArray:
        flat = movement.reshape(rt, indices, (math.prod(indices.shape),))
        rows = movement.index_select(rt, weight, flat, 0)
        return rows.view((*indices.shape, weight.shape[1]),
                         _dense((*indices.shape, weight.shape[1])), rows.offset)

    return {
        nn.conv1d: conv1d,
        nn.conv2d: lambda x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1:
            conv2d(rt, x, w, stride, padding, dilation, groups),
        nn.conv_transpose1d: conv_transpose1d,
        nn.conv_transpose2d: lambda x, w, stride=(1, 1), padding=(0, 0), output_padding=(0, 0),
            dilation=(1, 1), groups=1: conv_transpose2d(rt, x, w, stride, padding,
                                                        output_padding, dilation, groups),
        nn.max_pool2d: max_pool2d,
        nn.avg_pool2d: avg_pool2d,
        nn.adaptive_avg_pool2d: adaptive_avg_pool2d,
        nn.embedding: embedding,
        nn.interpolate: lambda x, size=(), mode="nearest", align_corners=None:
            _interpolate(rt, x, size, mode, align_corners),
    }
