"""Neural-network kernels in PyTorch layouts (NCL / NCHW, OIHW weights).

conv2d is an implicit GEMM (`ember_wgpu.conv`: the receptive fields gathered inside the matmul's
tile loads).  Where `conv.path` says ``im2col`` it gathers them into an im2col matrix
``[N, G, C/G*kh*kw, OH*OW]`` and hands it to the tiled matmul with the weight broadcast over
the batch (stride 0, no copy).  conv1d is conv2d of a height-1 image; transposed
convolutions are convolutions of the zero-dilated input with the flipped kernel (the OpenCL
backend's scheme).  Pools are direct kernels, one invocation per output.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.backend import ir
from ember.backend.geometry import interpolate, pool_output_size
from ember.ops import nn

from . import conv, movement
from .linalg import matmul
from .render import const
from .runtime import Runtime, WGArray, contiguous_strides
from .strided import contiguous, copy_into, load, run_indexed, run_map, store, wgsl_compute

__all__ = ["conv2d", "kernels"]

Pair = tuple[int, int]
I64 = np.dtype(np.int64)

# b0: x at (n, c); b1: the im2col element; i walks [N, C, kh, kw, OH, OW]
_IM2COL = """let OW = P[X]; let OH = P[X + 1]; let kw = P[X + 2]; let kh = P[X + 3];
var rr = i;
let ow = rr % OW; rr = rr / OW; let oh = rr % OH; rr = rr / OH;
let j = rr % kw; rr = rr / kw; let q = rr % kh;
let h = oh * P[X + 4] - P[X + 6] + q * P[X + 8];
let w = ow * P[X + 5] - P[X + 7] + j * P[X + 9];
var v = ZERO;
if (h >= 0 && h < P[X + 10] && w >= 0 && w < P[X + 11]) {
    v = b0[o0 + h * P[X + 12] + w * P[X + 13]];
}
b1[o1] = v;"""


def _raw_zero(dt: np.dtype[Any]) -> str:
    from .movement import _zero_raw

    return _zero_raw(dt)


def conv2d(rt: Runtime, x: WGArray, w: WGArray, stride: Pair = (1, 1), padding: Pair = (0, 0),
           dilation: Pair = (1, 1), groups: int = 1) -> WGArray:
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    kind = conv.path(rt, o // groups, n * oh * ow, cg * kh * kw, x.dtype, groups)
    if kind == "im2col":
        return _im2col_conv2d(rt, x, w, stride, padding, dilation, groups)
    return conv.conv2d(rt, x, w, stride, padding, dilation, groups, kind)


def _im2col_conv2d(rt: Runtime, x: WGArray, w: WGArray, stride: Pair, padding: Pair,
                   dilation: Pair, groups: int) -> WGArray:
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    kk = cg * kh * kw
    cols = rt.empty((n, groups, kk, oh * ow), x.dtype)
    if cols.size:
        flat = cols.view((n, c, kh, kw, oh, ow), contiguous_strides((n, c, kh, kw, oh, ow)), 0)
        xv = x.view(flat.shape, (x.strides[0], x.strides[1], 0, 0, 0, 0), x.offset)
        run_indexed(rt, _IM2COL.replace("ZERO", _raw_zero(x.dtype)), [xv], [flat],
                    [ow, oh, kw, kh, *stride, *padding, *dilation, h, wd, x.strides[2],
                     x.strides[3]])
    wc = contiguous(rt, w)
    og = o // groups
    wv = wc.view((n, groups, og, kk), (0, og * kk, kk, 1), wc.offset)
    out = matmul(rt, wv, cols)
    return out.view((n, o, oh, ow), contiguous_strides((n, o, oh, ow)), out.offset)


def conv_transpose2d(rt: Runtime, x: WGArray, w: WGArray, stride: Pair = (1, 1),
                     padding: Pair = (0, 0), output_padding: Pair = (0, 0),
                     dilation: Pair = (1, 1), groups: int = 1) -> WGArray:
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    sh, sw = stride
    qh = dilation[0] * (kh - 1) - padding[0]
    qw = dilation[1] * (kw - 1) - padding[1]
    bh, bw = max(qh, 0), max(qw, 0)
    ah, aw = max(qh + output_padding[0], 0), max(qw + output_padding[1], 0)
    uh, uw = (h - 1) * sh + 1 if h else 0, (wd - 1) * sw + 1 if wd else 0
    up = movement.fill(rt, (n, c, uh + bh + ah, uw + bw + aw), x.dtype, 0)
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


def _unsqueeze2(x: WGArray) -> WGArray:
    """``[N, C, L]`` seen as ``[N, C, 1, L]``."""
    s = x.strides
    return x.view((x.shape[0], x.shape[1], 1, x.shape[2]), (s[0], s[1], 0, s[2]), x.offset)


def _squeeze2(x: WGArray) -> WGArray:
    s = x.strides
    return x.view((x.shape[0], x.shape[1], x.shape[3]), (s[0], s[1], s[3]), x.offset)


# -- pooling ----------------------------------------------------------------------------------

# b0: x at (n, c); outputs at the output element; i walks [N, C, OH, OW].  Words: OW, OH, H,
# W, kh, kw, sh, sw, ph, pw, dh, dw, include_pad, x's strides along H and W.
_POOL_HEAD = """let OW = P[X]; let OH = P[X + 1]; let H = P[X + 2]; let W = P[X + 3];
let ow = i % OW; let oh = (i / OW) % OH;
let h0 = oh * P[X + 6] - P[X + 8]; let w0 = ow * P[X + 7] - P[X + 9];
let xs2 = P[X + 13]; let xs3 = P[X + 14];
"""

_MAX_BODY = """var best = ZERO; var bi = -1;
for (var q = 0; q < P[X + 4]; q = q + 1) {
    let hh = h0 + q * P[X + 10];
    if (hh < 0 || hh >= H) { continue; }
    for (var j = 0; j < P[X + 5]; j = j + 1) {
        let ww = w0 + j * P[X + 11];
        if (ww < 0 || ww >= W) { continue; }
        let v = LOAD;
        if (bi < 0 || TAKE) { best = v; bi = hh * W + ww; }
    }
}
b1[o1] = STORE;
b2[o2] = i64(bi);"""

_AVG_BODY = """let h1 = min(h0 + P[X + 4], H + P[X + 8]); let w1 = min(w0 + P[X + 5], W + P[X + 9]);
var size = (h1 - h0) * (w1 - w0);
let ha = max(h0, 0); let hb = min(h1, H); let wa = max(w0, 0); let wb = min(w1, W);
if (P[X + 12] == 0) { size = (hb - ha) * (wb - wa); }
var acc = ZERO;
for (var hh = ha; hh < hb; hh = hh + 1) {
    for (var ww = wa; ww < wb; ww = ww + 1) { acc = acc + LOAD; }
}
b1[o1] = STORE;"""


def _pool(rt: Runtime, body: str, x: WGArray, oh: int, ow: int, k: Pair, s: Pair, p: Pair,
          d: Pair, include_pad: bool, want_index: bool) -> tuple[WGArray, WGArray | None]:
    n, c, h, w = x.shape
    out = rt.empty((n, c, oh, ow), x.dtype)
    outs = [out] + ([rt.empty((n, c, oh, ow), I64)] if want_index else [])
    ct = wgsl_compute(x.dtype)
    zero = const(0, ir.compute_dtype(x.dtype.name))
    fl = ct == "f32"
    take = ("(!isnan_(best) && (v > best || isnan_(v)))" if fl else "v > best")
    text = _POOL_HEAD + body.replace("ZERO", zero).replace(
        "LOAD", load(x.dtype, "b0[o0 + hh * xs2 + ww * xs3]")).replace("TAKE", take).replace(
        "STORE", store(x.dtype, "best" if want_index else f"acc / {ct}(size)"))
    xv = x.view(out.shape, (x.strides[0], x.strides[1], 0, 0), x.offset)
    run_indexed(rt, text, [xv], outs, [ow, oh, h, w, *k, *s, *p, *d, int(include_pad),
                                       x.strides[2], x.strides[3]])
    return out, outs[1] if want_index else None


_ADAPTIVE = """let OW = P[X]; let OH = P[X + 1]; let H = P[X + 2]; let W = P[X + 3];
let ow = i % OW; let oh = (i / OW) % OH;
let h0 = (oh * H) / OH; let h1 = ((oh + 1) * H + OH - 1) / OH;
let w0 = (ow * W) / OW; let w1 = ((ow + 1) * W + OW - 1) / OW;
var acc = ZERO;
for (var hh = h0; hh < h1; hh = hh + 1) {
    for (var ww = w0; ww < w1; ww = ww + 1) { acc = acc + LOAD; }
}
b1[o1] = STORE;"""


def adaptive_avg_pool2d(rt: Runtime, x: WGArray, output_size: Pair) -> WGArray:
    n, c, h, w = x.shape
    oh, ow = output_size
    out = rt.empty((n, c, oh, ow), x.dtype)
    ct = wgsl_compute(x.dtype)
    text = _ADAPTIVE.replace("ZERO", const(0, ir.compute_dtype(x.dtype.name))).replace(
        "LOAD", load(x.dtype, "b0[o0 + hh * P[X + 4] + ww * P[X + 5]]")).replace(
        "STORE", store(x.dtype, f"acc / {ct}((h1 - h0) * (w1 - w0))"))
    xv = x.view(out.shape, (x.strides[0], x.strides[1], 0, 0), x.offset)
    run_indexed(rt, text, [xv], [out], [ow, oh, h, w, x.strides[2], x.strides[3]])
    return out


def _interpolate(rt: Runtime, x: WGArray, size: tuple[int, ...], mode: str,
                 align_corners: bool | None) -> WGArray:
    def take(a: WGArray, index: np.ndarray, axis: int) -> WGArray:
        return movement.index_select(rt, a, rt.upload(index), axis)

    def lerp(lo: WGArray, hi: WGArray, lam: np.ndarray, axis: int) -> WGArray:
        shape = [1] * lo.ndim
        shape[axis] = lam.size
        lv = rt.upload(lam.astype(x.dtype).reshape(shape))
        return run_map(rt, "a * (1.0 - c) + b * c", [lo, hi, lv], shape=lo.shape)

    return interpolate(x, x.shape, size, mode, align_corners, take=take, lerp=lerp,
                       device="wgpu")


def kernels(rt: Runtime) -> dict[Any, Any]:
    def conv1d(x: WGArray, w: WGArray, stride: Any = (1,), padding: Any = (0,),
               dilation: Any = (1,), groups: int = 1) -> WGArray:
        out = conv2d(rt, _unsqueeze2(x), _unsqueeze2(w), (1, stride[0]), (0, padding[0]),
                     (1, dilation[0]), groups)
        return _squeeze2(out)

    def conv_transpose1d(x: WGArray, w: WGArray, stride: Any = (1,), padding: Any = (0,),
                         output_padding: Any = (0,), dilation: Any = (1,),
                         groups: int = 1) -> WGArray:
        out = conv_transpose2d(rt, _unsqueeze2(x), _unsqueeze2(w), (1, stride[0]),
                               (0, padding[0]), (0, output_padding[0]), (1, dilation[0]), groups)
        return _squeeze2(out)

    def max_pool2d(x: WGArray, kernel_size: Pair = (1, 1), stride: Pair = (1, 1),
                   padding: Pair = (0, 0), dilation: Pair = (1, 1),
                   ceil_mode: bool = False) -> tuple[WGArray, WGArray]:
        h, w = x.shape[2:]
        oh = pool_output_size(h, kernel_size[0], stride[0], padding[0], dilation[0], ceil_mode)
        ow = pool_output_size(w, kernel_size[1], stride[1], padding[1], dilation[1], ceil_mode)
        v, i = _pool(rt, _MAX_BODY, x, oh, ow, kernel_size, stride, padding, dilation, True,
                     True)
        assert i is not None
        return v, i

    def avg_pool2d(x: WGArray, kernel_size: Pair = (1, 1), stride: Pair = (1, 1),
                   padding: Pair = (0, 0), ceil_mode: bool = False,
                   count_include_pad: bool = True) -> WGArray:
        h, w = x.shape[2:]
        oh = pool_output_size(h, kernel_size[0], stride[0], padding[0], 1, ceil_mode)
        ow = pool_output_size(w, kernel_size[1], stride[1], padding[1], 1, ceil_mode)
        return _pool(rt, _AVG_BODY, x, oh, ow, kernel_size, stride, padding, (1, 1),
                     count_include_pad, False)[0]

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
        nn.adaptive_avg_pool2d: lambda x, output_size=(1, 1): adaptive_avg_pool2d(
            rt, x, output_size),
        nn.interpolate: lambda x, size=(), mode="nearest", align_corners=None:
            _interpolate(rt, x, size, mode, align_corners),
    }
