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
from ember.backend.movement import StridedKernels, conv2d_columns, conv2d_size
from ember.backend.strided import contiguous_strides
from ember.ops import nn

from . import conv, movement
from .linalg import matmul
from .render import const
from .runtime import Runtime, WGArray
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
    o, cg, kh, kw = w.shape
    oh, ow = conv2d_size(x.shape, w.shape, stride, padding, dilation)
    kind = conv.path(rt, o // groups, x.shape[0] * oh * ow, cg * kh * kw, x.dtype, groups)
    if kind == "im2col":
        return _im2col_conv2d(rt, x, w, stride, padding, dilation, groups)
    return conv.conv2d(rt, x, w, stride, padding, dilation, groups, kind)


def _im2col_conv2d(rt: Runtime, x: WGArray, w: WGArray, stride: Pair, padding: Pair,
                   dilation: Pair, groups: int) -> WGArray:
    n, c, h, wd = x.shape
    _, cg, kh, kw = w.shape
    oh, ow = conv2d_size(x.shape, w.shape, stride, padding, dilation)
    cols = rt.empty((n, groups, cg * kh * kw, oh * ow), x.dtype)
    if cols.size:
        flat = cols.view((n, c, kh, kw, oh, ow), contiguous_strides((n, c, kh, kw, oh, ow)), 0)
        xv = x.view(flat.shape, (x.strides[0], x.strides[1], 0, 0, 0, 0), x.offset)
        run_indexed(rt, _IM2COL.replace("ZERO", _raw_zero(x.dtype)), [xv], [flat],
                    [ow, oh, kw, kh, *stride, *padding, *dilation, h, wd, x.strides[2],
                     x.strides[3]])
    return conv2d_columns(cols, contiguous(rt, w), groups, (oh, ow),
                          lambda a, b: matmul(rt, a, b))


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


def pool2d(rt: Runtime, x: WGArray, oh: int, ow: int, k: Pair, s: Pair, p: Pair, d: Pair,
           include_pad: bool, want_index: bool) -> tuple[WGArray, WGArray | None]:
    """max_pool2d with its indices (``want_index``) or avg_pool2d to ``[N, C, oh, ow]``."""
    body = _MAX_BODY if want_index else _AVG_BODY
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


def kernels(rt: Runtime) -> dict[Any, Any]:
    """The nn kernels, and the views, copies and convolutions `StridedKernels` plans."""
    planned = StridedKernels("wgpu", rt, fill=movement.fill, copy_into=copy_into,
                             index_select=movement.index_select, conv2d=conv2d,
                             pool2d=pool2d, lerp=lambda rt, lo, hi, w: run_map(
                                 rt, "a * (1.0 - c) + b * c", [lo, hi, w], shape=lo.shape))
    return {**planned.kernels(), nn.adaptive_avg_pool2d: lambda x, output_size=(1, 1):
            adaptive_avg_pool2d(rt, x, output_size)}
