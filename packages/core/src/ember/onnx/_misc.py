"""Other operators: LRN, Col2Im, CenterCropPad, MaxUnpool, RotaryEmbedding, SwiGLU,
TensorScatter, Scatter (opsets 9-10), Det; and the ones whose output shape or bits depend on
the data, computed on the host (NonMaxSuppression, Unique, BitCast).

The device ones are composites of ember ops (differentiable where ONNX defines a gradient);
the host ones read their input back (a synchronisation) and produce integer indices or a
reinterpretation of bytes, which carry no gradient.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

import ember as E
from ember import Tensor

from . import _carried, _nn
from ._dtypes import numpy_dtype
from ._ndconv import _dilate
from ._registry import Node, Run, op


@op("LRN", note="across channels, as the ONNX formula")
def lrn(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    at = node.attrs
    size = int(at["size"])
    alpha, beta = float(at.get("alpha", 1e-4)), float(at.get("beta", 0.75))
    bias = float(at.get("bias", 1.0))
    if t.ndim < 3:
        raise ValueError(f"{node.where()}: input of rank {t.ndim}; LRN takes [N, C, ...]")
    c = t.shape[1]
    before, after = (size - 1) // 2, math.ceil((size - 1) / 2)
    sq = t * t
    widths = [0, 0] * (t.ndim - 2) + [before, after]
    padded = E.pad(sq, widths)
    total = E.narrow(padded, 1, 0, c)
    for k in range(1, size):
        total = total + E.narrow(padded, 1, k, c)
    return t / E.pow(total * (alpha / size) + bias, beta)


@op("Col2Im", host_inputs=(1, 2), note="any spatial rank; dilations, pads, strides")
def col2im(r: Run, node: Node, x: Any, image_shape: Any, block_shape: Any) -> Tensor:
    t = r.tensor(x)
    image, block = r.ints(image_shape), r.ints(block_shape)
    n = len(image)
    at = node.attrs
    strides = list(at.get("strides", [1] * n))
    dil = list(at.get("dilations", [1] * n))
    pads = list(at.get("pads", [0] * (2 * n)))
    begin, end = pads[:n], pads[n:]
    taps = math.prod(block)
    if t.ndim != 3 or t.shape[1] % taps:
        raise ValueError(f"{node.where()}: input {tuple(t.shape)} is not [N, C * "
                         f"{taps}, L] for block {block}")
    padded = [image[i] + begin[i] + end[i] for i in range(n)]
    out = [(padded[i] - ((block[i] - 1) * dil[i] + 1)) // strides[i] + 1 for i in range(n)]
    if math.prod(out) != t.shape[2]:
        raise ValueError(f"{node.where()}: {t.shape[2]} columns, but image {image} with "
                         f"block {block} gives {out} positions")
    nb, c = t.shape[0], t.shape[1] // taps
    cols = t.reshape(nb, c, taps, *out)
    y: Tensor | None = None
    for j, k in enumerate(itertools.product(*(range(b) for b in block))):
        slab = _dilate(E.select(cols, 2, j), strides)  # [N, C, (out-1)*s+1 ...]
        lo = [k[i] * dil[i] for i in range(n)]
        hi = [padded[i] - lo[i] - slab.shape[2 + i] for i in range(n)]
        part = _nn._pad_explicit(slab, lo, hi)
        y = part if y is None else y + part
    assert y is not None
    return _nn._pad_explicit(y, [-b for b in begin], [-e for e in end])


@op("CenterCropPad", host_inputs=(1,), note="crop or zero-pad about the centre; axes")
def center_crop_pad(r: Run, node: Node, x: Any, shape: Any) -> Tensor:
    t = r.tensor(x)
    want = r.ints(shape)
    axes = [a % t.ndim for a in node.attrs.get("axes", range(t.ndim))]
    if len(axes) != len(want):
        raise ValueError(f"{node.where()}: shape {want} for axes {axes}")
    for a, s in zip(axes, want, strict=True):
        dim = t.shape[a]
        if s < dim:
            t = E.narrow(t, a, (dim - s) // 2, s)
        elif s > dim:
            lo = (s - dim) // 2
            widths = [0, 0] * (t.ndim - 1 - a) + [lo, s - dim - lo]
            t = E.pad(t, widths)
    return t


@op("MaxUnpool", host_inputs=(2,), note="indices as MaxPool's; output_shape")
def max_unpool(r: Run, node: Node, x: Any, indices: Any, output_shape: Any = None) -> Tensor:
    t, idx = r.tensor(x), r.tensor(indices)
    n = t.ndim - 2
    at = node.attrs
    kernel = list(at["kernel_shape"])
    strides = list(at.get("strides", [1] * n))
    pads = list(at.get("pads", [0] * (2 * n)))
    # the indices address the inferred shape; a larger output_shape pads it at the end
    shape = list(t.shape[:2]) + [(t.shape[2 + i] - 1) * strides[i] + kernel[i]
                                 - pads[i] - pads[n + i] for i in range(n)]
    final = r.ints(output_shape) if output_shape is not None else shape
    if len(final) != len(shape) or any(f < s for f, s in zip(final, shape, strict=True)):
        raise ValueError(f"{node.where()}: output_shape {final} is smaller than the unpooled "
                         f"shape {shape}")
    if idx.shape != t.shape:
        raise ValueError(f"{node.where()}: indices {tuple(idx.shape)} for input "
                         f"{tuple(t.shape)}")
    total = math.prod(shape)
    flat = idx.reshape(-1).to(E.int64)
    hi = int(E.amax(flat).item()) if flat.numel() else 0
    lo = int(E.amin(flat).item()) if flat.numel() else 0
    if lo < 0 or hi >= total:
        raise IndexError(f"{node.where()}: index {hi if hi >= total else lo} is outside the "
                         f"output of {total} elements {shape}")
    zeros = E.zeros((total,), dtype=t.dtype, device=t.device)
    y = E.scatter(zeros, 0, flat, t.reshape(-1)).reshape(*shape)
    if final != shape:
        y = _nn._pad_explicit(y, [0] * len(shape), [f - s for f, s in zip(final, shape,
                                                                          strict=True)])
    return y


@op("RotaryEmbedding", note="3-D (num_heads) and 4-D inputs, position_ids, interleaved, "
    "rotary_embedding_dim")
def rotary_embedding(r: Run, node: Node, x: Any, cos: Any, sin: Any,
                     position_ids: Any = None) -> Tensor:
    t = r.tensor(x)
    at = node.attrs
    four = t.ndim == 4
    if four:
        u = t.permute(0, 2, 1, 3)  # [B, S, H, D]
    elif t.ndim == 3:
        heads = int(at.get("num_heads", 0))
        if heads <= 0 or t.shape[2] % heads:
            raise ValueError(f"{node.where()}: a 3-D input needs num_heads dividing its "
                             f"hidden size {t.shape[2]}, got {heads}")
        u = t.reshape(t.shape[0], t.shape[1], heads, t.shape[2] // heads)
    else:
        raise ValueError(f"{node.where()}: input of rank {t.ndim}; RotaryEmbedding takes 3-D "
                         "or 4-D inputs")
    d = u.shape[3]
    rot = int(at.get("rotary_embedding_dim", 0)) or d
    if rot % 2 or rot > d:
        raise ValueError(f"{node.where()}: rotary_embedding_dim {rot} for head size {d}")
    c, sn = r.tensor(cos), r.tensor(sin)
    if position_ids is not None:
        p = r.tensor(position_ids).to(E.int64)
        c = E.index_select(c, 0, p.reshape(-1)).reshape(*p.shape, c.shape[-1])
        sn = E.index_select(sn, 0, p.reshape(-1)).reshape(*p.shape, sn.shape[-1])
    if c.shape[-1] != rot // 2:
        raise ValueError(f"{node.where()}: cos/sin caches of width {c.shape[-1]} for "
                         f"rotary_embedding_dim {rot} (needs {rot // 2})")
    c, sn = c.unsqueeze(-2), sn.unsqueeze(-2)  # [B, S, 1, rot/2]
    xr = E.narrow(u, 3, 0, rot)
    if at.get("interleaved", 0):
        pairs = xr.reshape(*xr.shape[:3], rot // 2, 2)
        x1, x2 = E.select(pairs, 4, 0), E.select(pairs, 4, 1)
    else:
        x1, x2 = E.narrow(xr, 3, 0, rot // 2), E.narrow(xr, 3, rot // 2, rot // 2)
    real = c * x1 - sn * x2
    imag = sn * x1 + c * x2
    if at.get("interleaved", 0):
        xr = E.stack([real, imag], dim=4).reshape(*xr.shape)
    else:
        xr = E.cat([real, imag], dim=3)
    if rot < d:
        xr = E.cat([xr, E.narrow(u, 3, rot, d - rot)], dim=3)
    return xr.permute(0, 2, 1, 3) if four else xr.reshape(*t.shape)


@op("SwiGLU", note="A * sigmoid(alpha * A) * B")
def swiglu(r: Run, node: Node, a: Any, b: Any) -> Tensor:
    ta, tb = r.tensor(a), r.tensor(b)
    if ta.shape != tb.shape or ta.dtype != tb.dtype:
        raise ValueError(f"{node.where()}: A {tuple(ta.shape)} {ta.dtype.name} and B "
                         f"{tuple(tb.shape)} {tb.dtype.name} must match (no broadcasting)")
    alpha = float(node.attrs.get("alpha", 1.0))
    return ta * E.sigmoid(ta * alpha if alpha != 1.0 else ta) * tb


@op("TensorScatter", note="linear and circular modes, write_indices per batch")
def tensor_scatter(r: Run, node: Node, past: Any, update: Any,
                   write_indices: Any = None) -> Tensor:
    t, u = r.tensor(past), r.tensor(update)
    at = node.attrs
    mode = at.get("mode", "linear")
    if mode not in ("linear", "circular"):
        raise ValueError(f"{node.where()}: mode must be linear or circular, got {mode!r}")
    axis = int(at.get("axis", -2)) % t.ndim
    if axis == 0:
        raise ValueError(f"{node.where()}: axis 0 is the batch axis; TensorScatter writes "
                         "along a later axis")
    if u.ndim != t.ndim or any(u.shape[i] != t.shape[i] for i in range(t.ndim) if i != axis) \
            or u.shape[axis] > t.shape[axis]:
        raise ValueError(f"{node.where()}: update {tuple(u.shape)} does not fit cache "
                         f"{tuple(t.shape)} along axis {axis}")
    length, steps = t.shape[axis], u.shape[axis]
    nb = t.shape[0]
    starts = r.ints(write_indices) if write_indices is not None else [0] * nb
    if len(starts) != nb:
        raise ValueError(f"{node.where()}: {len(starts)} write_indices for batch {nb}")
    # the cache position of each update step, per batch row: a gather index over
    # [cache, update] concatenated along ``axis``
    pos = np.arange(length)[None, :].repeat(nb, 0)
    for i, s0 in enumerate(starts):
        for j in range(steps):
            k = s0 + j
            if mode == "circular":
                k %= length
            elif not 0 <= k < length:
                raise IndexError(f"{node.where()}: write index {s0} + {steps} steps runs past "
                                 f"the cache length {length} (mode linear)")
            pos[i, k] = length + j
    both = E.cat([t, u], dim=axis)
    shape = [1] * t.ndim
    shape[0], shape[axis] = nb, length
    index = r.tensor(pos.reshape(shape)).expand(*t.shape[:axis], length, *t.shape[axis + 1:])
    return E.gather(both, axis, index)


@op("Scatter", note="opsets 9-10 (ScatterElements without reduction)")
def scatter_old(r: Run, node: Node, data: Any, indices: Any, updates: Any) -> Tensor:
    t, idx, u = r.tensor(data), r.tensor(indices).to(E.int64), r.tensor(updates)
    axis = int(node.attrs.get("axis", 0)) % t.ndim
    size = t.shape[axis]
    if idx.numel():
        lo, hi = int(E.amin(idx).item()), int(E.amax(idx).item())
        if lo < -size or hi >= size:
            raise IndexError(f"{node.where()}: index {hi if hi >= size else lo} is out of "
                             f"bounds for axis {axis} of size {size}")
    idx = E.where(idx < 0, idx + size, idx)
    return E.scatter(t, axis, idx, u)


@op("Det", note="LU with partial pivoting on the host's float64, per matrix of the batch")
def det(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    if t.ndim < 2 or t.shape[-1] != t.shape[-2]:
        raise ValueError(f"{node.where()}: input {tuple(t.shape)} is not a batch of square "
                         "matrices")
    a = r.host(t).astype(np.float64)
    return r.tensor(np.linalg.det(a).astype(np.dtype(t.dtype.numpy_name)))


# -- on the host: data-dependent shapes and bit reinterpretation ----------------------------

def _nms_host(node: Node, boxes: np.ndarray, scores: np.ndarray, max_out: Any = None,
              iou: Any = None, score_thr: Any = None) -> np.ndarray:
    center = int(node.attrs.get("center_point_box", 0))
    limit = int(np.asarray(max_out).reshape(-1)[0]) if max_out is not None and \
        np.asarray(max_out).size else 0
    iou_t = float(np.asarray(iou).reshape(-1)[0]) if iou is not None and np.asarray(iou).size \
        else 0.0
    has_thr = score_thr is not None and np.asarray(score_thr).size > 0
    thr = float(np.asarray(score_thr).reshape(-1)[0]) if has_thr else 0.0
    if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3 or \
            scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
        raise ValueError(f"{node.where()}: boxes {boxes.shape} and scores {scores.shape} are "
                         "not [B, N, 4] and [B, C, N]")
    b = boxes.astype(np.float64)
    if center:
        cx, cy, w, h = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
        x0, x1, y0, y1 = cx - w / 2, cx + w / 2, cy - h / 2, cy + h / 2
    else:
        y0, x0 = np.minimum(b[..., 0], b[..., 2]), np.minimum(b[..., 1], b[..., 3])
        y1, x1 = np.maximum(b[..., 0], b[..., 2]), np.maximum(b[..., 1], b[..., 3])
    out: list[tuple[int, int, int]] = []
    for bi in range(scores.shape[0]):
        area = (x1[bi] - x0[bi]) * (y1[bi] - y0[bi])
        for ci in range(scores.shape[1]):
            s = scores[bi, ci]
            cand = np.arange(s.shape[0])
            if has_thr:
                cand = cand[s > thr]
            order = cand[np.lexsort((cand, -s[cand].astype(np.float64)))]
            kept: list[int] = []
            for i in order:
                if len(kept) >= limit:
                    break
                ok = True
                for k in kept:
                    iw = min(x1[bi, i], x1[bi, k]) - max(x0[bi, i], x0[bi, k])
                    ih = min(y1[bi, i], y1[bi, k]) - max(y0[bi, i], y0[bi, k])
                    if iw <= 0 or ih <= 0:
                        continue
                    inter = iw * ih
                    union = area[i] + area[k] - inter
                    if area[i] <= 0 or area[k] <= 0 or union <= 0:
                        continue
                    if inter / union > iou_t:
                        ok = False
                        break
                if ok:
                    kept.append(int(i))
                    out.append((bi, ci, int(i)))
    return np.asarray(out, dtype=np.int64).reshape(-1, 3)


@op("NonMaxSuppression", host=_nms_host, note="on the host (data-dependent output size)")
def non_max_suppression(r: Run, node: Node, boxes: Any, scores: Any, *rest: Any) -> Any:
    return _nms_host(node, r.host(boxes), r.host(scores),
                     *[r.host(v) if v is not None else None for v in rest])


def _unique_host(node: Node, x: np.ndarray) -> tuple[np.ndarray, ...]:
    axis = node.attrs.get("axis")
    srt = int(node.attrs.get("sorted", 1))
    a = np.asarray(x)
    if axis is not None:
        axis = int(axis) % a.ndim
    y, first, inverse, counts = np.unique(a, return_index=True, return_inverse=True,
                                          return_counts=True, axis=axis)
    inverse = inverse.reshape(-1)
    if not srt:  # in order of first occurrence
        order = np.argsort(first, kind="stable")
        y = np.take(y, order, axis=axis if axis is not None else 0)
        first, counts = first[order], counts[order]
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        inverse = rank[inverse]
    return (y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64))


@op("Unique", host=_unique_host, note="on the host (data-dependent output size); sorted, axis")
def unique(r: Run, node: Node, x: Any) -> Any:
    outs = _unique_host(node, r.host(x))
    return (r.tensor(outs[0]), *outs[1:])


def _bitcast_host(node: Node, x: np.ndarray) -> np.ndarray:
    to = numpy_dtype(int(node.attrs["to"]), node.where())
    a = np.asarray(x) if np.asarray(x).flags.c_contiguous else np.asarray(x).copy()
    if a.dtype.itemsize != to.itemsize:
        raise ValueError(f"{node.where()}: BitCast from {a.dtype} ({a.dtype.itemsize * 8} "
                         f"bits) to {to} ({to.itemsize * 8} bits): widths differ")
    if to == np.bool_:
        raise TypeError(f"{node.where()}: BitCast to BOOL is not supported (bytes other than "
                        "0 and 1 are no booleans)")
    return a.view(to)


@op("BitCast", note="on the host (the bytes reinterpreted); carried types too")
def bitcast(r: Run, node: Node, x: Any) -> Any:
    a = r.host(x)
    src = _carried.input_type(r, node, 0)
    if src is not None:
        a = _carried.from_carrier(a, src)
    to = int(node.attrs["to"])
    if to in _carried.CARRIER:
        b = _carried.storage(to)
        if a.dtype.itemsize != b.itemsize:
            raise ValueError(f"{node.where()}: BitCast from {a.dtype} to {b}: widths differ")
        return r.tensor(_carried.to_carrier((a if a.flags.c_contiguous else a.copy()).view(b),
                                           to))
    return r.tensor(_bitcast_host(node, a))


# -- sampling: RoiAlign, DeformConv ------------------------------------------------------------

def _roi_samples(node: Node, rois: np.ndarray, height: int, width: int, out_h: int,
                 out_w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per ROI and output cell, the sampling points' four corner positions in the flattened
    plane and their bilinear weights [R, P, S, 4] (S padded to the largest ROI's sample
    count), the valid-sample mask [R, P, S] and the sample counts [R] (ONNX's rules:
    adaptive grids, points beyond one cell outside the map weigh 0)."""
    at = node.attrs
    scale = float(at.get("spatial_scale", 1.0))
    ratio = int(at.get("sampling_ratio", 0))
    half = at.get("coordinate_transformation_mode", "half_pixel") == "half_pixel" \
        if node.opset >= 16 else False
    off = 0.5 if half else 0.0
    per_roi = []
    for roi in rois.astype(np.float64):
        x0, y0, x1, y1 = (v * scale - off for v in roi[:4])
        rw, rh = x1 - x0, y1 - y0
        if not half:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / out_h, rw / out_w
        gh = ratio if ratio > 0 else int(np.ceil(rh / out_h))
        gw = ratio if ratio > 0 else int(np.ceil(rw / out_w))
        ph, pw, iy, ix = np.meshgrid(np.arange(out_h), np.arange(out_w), np.arange(gh),
                                     np.arange(gw), indexing="ij")
        y = (y0 + ph * bh + (iy + 0.5) * bh / max(gh, 1)).reshape(out_h * out_w, gh * gw)
        x = (x0 + pw * bw + (ix + 0.5) * bw / max(gw, 1)).reshape(out_h * out_w, gh * gw)
        per_roi.append((y, x, max(gh * gw, 1)))
    n = len(per_roi)
    s_max = max([y.shape[1] for y, _, _ in per_roi] + [1])
    pos = np.zeros((n, out_h * out_w, s_max, 4), np.int64)
    wts = np.zeros((n, out_h * out_w, s_max, 4), np.float64)
    valid = np.zeros((n, out_h * out_w, s_max), bool)
    counts = np.array([c for _, _, c in per_roi], np.float64)
    for r, (y, x, _) in enumerate(per_roi):
        s = y.shape[1]
        valid[r, :, :s] = True
        outside = (y < -1.0) | (y > height) | (x < -1.0) | (x > width)
        y, x = np.maximum(y, 0.0), np.maximum(x, 0.0)
        ylo, xlo = y.astype(np.int64), x.astype(np.int64)
        ytop, xtop = ylo >= height - 1, xlo >= width - 1
        ylo = np.where(ytop, height - 1, ylo)
        xlo = np.where(xtop, width - 1, xlo)
        y, x = np.where(ytop, ylo, y), np.where(xtop, xlo, x)
        yhi, xhi = np.where(ytop, ylo, ylo + 1), np.where(xtop, xlo, xlo + 1)
        ly, lx = y - ylo, x - xlo
        hy, hx = 1.0 - ly, 1.0 - lx
        p = np.stack([ylo * width + xlo, ylo * width + xhi, yhi * width + xlo,
                      yhi * width + xhi], -1)
        w = np.stack([hy * hx, hy * lx, ly * hx, ly * lx], -1)
        p[outside], w[outside] = 0, 0.0
        pos[r, :, :s], wts[r, :, :s] = p, w
    return pos, wts, valid, counts


@op("RoiAlign", host_inputs=(1, 2), note="avg and max (ONNX's max of weighted corners), "
    "half_pixel and output_half_pixel, adaptive or fixed sampling_ratio; sampling points "
    "planned on the host from the ROIs")
def roi_align(r: Run, node: Node, x: Any, rois: Any, batch_indices: Any) -> Tensor:
    t = r.tensor(x)
    if t.ndim != 4:
        raise ValueError(f"{node.where()}: input {tuple(t.shape)} is not [N, C, H, W]")
    n, c, h, w = t.shape
    boxes = r.host(rois)
    bidx = r.host(batch_indices).astype(np.int64).reshape(-1)
    if boxes.ndim != 2 or boxes.shape[1] != 4 or boxes.shape[0] != bidx.shape[0]:
        raise ValueError(f"{node.where()}: rois {boxes.shape} and batch_indices "
                         f"{bidx.shape} are not [R, 4] and [R]")
    if bidx.size and (bidx.min() < 0 or bidx.max() >= n):
        raise IndexError(f"{node.where()}: batch index {int(bidx.max())} outside a batch "
                         f"of {n}")
    mode = node.attrs.get("mode", "avg")
    if mode not in ("avg", "max"):
        raise ValueError(f"{node.where()}: mode must be avg or max, got {mode!r}")
    oh, ow = int(node.attrs.get("output_height", 1)), int(node.attrs.get("output_width", 1))
    pos, wts, valid, counts = _roi_samples(node, boxes, h, w, oh, ow)
    nr, p, s = pos.shape[:3]
    planes = E.index_select(t.reshape(n, c, h * w), 0, r.tensor(bidx))  # [R, C, HW]
    idx = r.tensor(pos.reshape(nr, 1, -1)).expand(nr, c, p * s * 4)
    vals = E.gather(planes, 2, idx).reshape(nr, c, p, s, 4)
    dtype = np.dtype(t.dtype.numpy_name)
    weighted = vals * r.tensor(wts.astype(dtype).reshape(nr, 1, p, s, 4))
    if mode == "avg":
        out = E.sum(weighted, dim=(3, 4)) / r.tensor((counts.astype(dtype)).reshape(nr, 1, 1))
    else:
        best = E.amax(weighted, dim=4)  # [R, C, P, S]
        low = np.where(valid, 0.0, -np.inf).astype(dtype).reshape(nr, 1, p, s)
        out = E.amax(best + r.tensor(low), dim=3)
    return out.reshape(nr, c, oh, ow)


@op("DeformConv", note="2-D; offsets and mask per offset group, bilinear sampling with zeros "
    "outside (differentiable in the input, weights, offsets and mask), groups, bias")
def deform_conv(r: Run, node: Node, x: Any, w: Any, offset: Any, b: Any = None,
                mask: Any = None) -> Tensor:
    t, wt, off = r.tensor(x), r.tensor(w), r.tensor(offset)
    if t.ndim != 4:
        raise NotImplementedError(f"{node.where()}: {t.ndim - 2}-D input; DeformConv is "
                                  "imported for 2-D inputs")
    at = node.attrs
    n, c, h, wd = t.shape
    o = wt.shape[0]
    kh, kw = list(at.get("kernel_shape", wt.shape[2:]))
    sh, sw = list(at.get("strides", [1, 1]))
    dh, dw = list(at.get("dilations", [1, 1]))
    pads = list(at.get("pads", [0, 0, 0, 0]))
    group, og = int(at.get("group", 1)), int(at.get("offset_group", 1))
    k = kh * kw
    if c % group or wt.shape[1] * group != c or o % group or c % og:
        raise ValueError(f"{node.where()}: input {tuple(t.shape)}, weight {tuple(wt.shape)}, "
                         f"group {group}, offset_group {og} do not fit")
    oh_, ow_ = off.shape[2], off.shape[3]
    if off.shape[0] != n or off.shape[1] != og * k * 2:
        raise ValueError(f"{node.where()}: offset {tuple(off.shape)} is not [{n}, "
                         f"{og * k * 2}, out_h, out_w]")
    want_h = (h + pads[0] + pads[2] - ((kh - 1) * dh + 1)) // sh + 1
    want_w = (wd + pads[1] + pads[3] - ((kw - 1) * dw + 1)) // sw + 1
    if (oh_, ow_) != (want_h, want_w):
        raise ValueError(f"{node.where()}: offset's output size {(oh_, ow_)} differs from "
                         f"the convolution's {(want_h, want_w)}")
    p = oh_ * ow_
    # sampling positions [N, og, K, P]: the tap's place plus its learned offset
    base_y = (-pads[0] + sh * np.arange(oh_))[None, :, None] + \
        (dh * np.arange(kh))[:, None, None] + np.zeros((1, 1, ow_))
    base_x = (-pads[1] + sw * np.arange(ow_))[None, None, :] + \
        (dw * np.arange(kw))[:, None, None] + np.zeros((1, oh_, 1))
    by = np.repeat(base_y, kw, axis=0).reshape(k, p)
    bx = np.tile(base_x, (kh, 1, 1)).reshape(k, p)
    dtype = np.dtype(t.dtype.numpy_name)
    offs = off.reshape(n, og, k, 2, p)
    py = E.select(offs, 3, 0) + r.tensor(by.astype(dtype))
    px = E.select(offs, 3, 1) + r.tensor(bx.astype(dtype))
    y0, x0 = E.floor(py), E.floor(px)
    ly, lx = py - y0, px - x0
    y0i, x0i = y0.to(E.int64), x0.to(E.int64)
    cg = c // og
    planes = t.reshape(n, og, cg, h * wd)
    sampled: Tensor | None = None
    for dy, dx, wgt in ((0, 0, (1 - ly) * (1 - lx)), (0, 1, (1 - ly) * lx),
                        (1, 0, ly * (1 - lx)), (1, 1, ly * lx)):
        yy, xx = y0i + dy, x0i + dx
        inside = E.logical_and(E.logical_and(yy >= 0, yy < h),
                               E.logical_and(xx >= 0, xx < wd))
        flat = E.where(inside, yy * wd + xx, E.zeros_like(yy))  # [N, og, K, P]
        idx = flat.reshape(n, og, 1, k * p).expand(n, og, cg, k * p)
        v = E.gather(planes, 3, idx).reshape(n, og, cg, k, p)
        part = v * (wgt * inside.to(t.dtype)).unsqueeze(2)
        sampled = part if sampled is None else sampled + part
    assert sampled is not None
    if mask is not None:
        sampled = sampled * r.tensor(mask).reshape(n, og, 1, k, p)
    cols = sampled.reshape(n, group, (c // group) * k, p)
    y = E.matmul(wt.reshape(group, o // group, (c // group) * k), cols).reshape(n, o, oh_, ow_)
    if b is not None:
        y = y + r.tensor(b).reshape(o, 1, 1)
    return y


# -- TfIdfVectorizer ----------------------------------------------------------------------------

def _tfidf_host(node: Node, x: np.ndarray) -> np.ndarray:
    at = node.attrs
    if "pool_strings" in at:
        raise TypeError(f"{node.where()}: pool_strings (string inputs) are not supported; "
                        "ember has no string dtype")
    pool = [int(v) for v in at.get("pool_int64s", [])]
    counts = [int(v) for v in at["ngram_counts"]]
    indexes = [int(v) for v in at["ngram_indexes"]]
    lo, hi = int(at["min_gram_length"]), int(at["max_gram_length"])
    skips = int(at["max_skip_count"])
    mode = at["mode"]
    weights = [float(v) for v in at.get("weights", [])]
    if mode not in ("TF", "IDF", "TFIDF"):
        raise ValueError(f"{node.where()}: mode must be TF, IDF or TFIDF, got {mode!r}")
    size = max(indexes) + 1 if indexes else 0
    # the pool's n-grams of the lengths counted, each with its output column
    grams: dict[tuple[int, ...], int] = {}
    gid = 0
    for i, start in enumerate(counts):
        end = counts[i + 1] if i + 1 < len(counts) else len(pool)
        n = i + 1
        for j in range((end - start) // n):
            if lo <= n <= hi:
                grams[tuple(pool[start + j * n:start + (j + 1) * n])] = indexes[gid]
            gid += 1
    a = np.asarray(x)
    if a.ndim > 2:
        raise ValueError(f"{node.where()}: input of shape {a.shape} is not [C] or [B, C]")
    rows = a.reshape(1, -1) if a.ndim < 2 else a
    freq = np.zeros((rows.shape[0], size), np.int64)
    for r_, row in enumerate(rows.tolist() if rows.size else []):
        first = lo
        for s in range(1, skips + 2):
            for start in range(len(row)):
                for n in range(1, hi + 1):
                    last = start + (n - 1) * s
                    if last >= len(row):
                        break
                    if n < first:
                        continue
                    col = grams.get(tuple(row[start:last + 1:s]))
                    if col is not None:
                        freq[r_, col] += 1
            if first == 1:  # unigrams are counted once, at skip distance 1
                first = 2
                if first > hi:
                    break
    if mode == "TF":
        y = freq.astype(np.float32)
    elif mode == "IDF":
        y = (np.asarray(weights, np.float32)[None, :] * (freq > 0) if weights
             else (freq > 0).astype(np.float32))
    else:
        y = (np.asarray(weights, np.float32)[None, :] * freq if weights
             else freq.astype(np.float32))
    y = y.astype(np.float32)
    return y.reshape(size) if a.ndim < 2 else y


@op("TfIdfVectorizer", host=_tfidf_host, note="integer pools (pool_int64s), TF/IDF/TFIDF, "
    "skip-grams; on the host")
def tfidf_vectorizer(r: Run, node: Node, x: Any) -> Any:
    return r.tensor(_tfidf_host(node, r.host(x)))


# -- ImageDecoder --------------------------------------------------------------------------------

def _image_host(node: Node, encoded: np.ndarray) -> np.ndarray:
    import io

    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - Pillow comes with the test environment
        raise ImportError(f"{node.where()}: ImageDecoder decodes with Pillow: pip install "
                          "pillow") from None
    fmt = node.attrs.get("pixel_format", "RGB")
    if fmt not in ("RGB", "BGR", "Grayscale"):
        raise ValueError(f"{node.where()}: pixel_format must be RGB, BGR or Grayscale, got "
                         f"{fmt!r}")
    a = np.asarray(encoded)
    if a.dtype != np.uint8 or a.ndim != 1:
        raise TypeError(f"{node.where()}: encoded_stream must be 1-D uint8, got {a.dtype} "
                        f"{a.shape}")
    try:
        img = Image.open(io.BytesIO(a.tobytes()))
        img.load()
    except Exception as exc:
        raise ValueError(f"{node.where()}: the {a.size} bytes are no image Pillow can read: "
                         f"{exc}") from exc
    if fmt == "Grayscale":
        return np.asarray(img.convert("L"))[:, :, None].copy()
    rgb = np.asarray(img.convert("RGB") if img.mode != "RGB" else img)
    return (rgb[:, :, ::-1] if fmt == "BGR" else rgb).copy()


@op("ImageDecoder", host=_image_host, note="on the host with Pillow (what it reads: JPEG, "
    "PNG, BMP, TIFF, WebP, PNM, JPEG 2000 where built in); RGB, BGR, Grayscale")
def image_decoder(r: Run, node: Node, encoded: Any) -> Any:
    return r.tensor(_image_host(node, r.host(encoded)))


@op("MaxRoiPool", host_inputs=(1,), note="Fast R-CNN's ROI max pooling (rounded ROI corners, "
    "floor/ceil bins, empty bins 0); bins planned on the host from the ROIs")
def max_roi_pool(r: Run, node: Node, x: Any, rois: Any) -> Tensor:
    t = r.tensor(x)
    if t.ndim != 4:
        raise ValueError(f"{node.where()}: input {tuple(t.shape)} is not [N, C, H, W]")
    n, c, h, w = t.shape
    ph, pw = (int(v) for v in node.attrs["pooled_shape"])
    scale = float(node.attrs.get("spatial_scale", 1.0))
    boxes = r.host(rois).astype(np.float64)
    if boxes.ndim != 2 or boxes.shape[1] != 5:
        raise ValueError(f"{node.where()}: rois {boxes.shape} is not [R, 5]")
    dtype = np.dtype(t.dtype.numpy_name)
    outs = []
    for roi in boxes:
        b = int(roi[0])
        if not 0 <= b < n:
            raise IndexError(f"{node.where()}: ROI batch index {b} outside a batch of {n}")
        x0, y0, x1, y1 = (int(np.round(v * scale)) for v in roi[1:])
        rh, rw = max(y1 - y0 + 1, 1), max(x1 - x0 + 1, 1)
        # one -inf-padded window per bin: a mask [ph*pw, H*W] of the cells each bin covers
        mask = np.zeros((ph * pw, h * w), bool)
        for i in range(ph):
            hs = min(max(int(np.floor(i * rh / ph)) + y0, 0), h)
            he = min(max(int(np.ceil((i + 1) * rh / ph)) + y0, 0), h)
            for j in range(pw):
                ws = min(max(int(np.floor(j * rw / pw)) + x0, 0), w)
                we = min(max(int(np.ceil((j + 1) * rw / pw)) + x0, 0), w)
                cells = np.zeros((h, w), bool)
                cells[hs:he, ws:we] = True
                mask[i * pw + j] = cells.reshape(-1)
        empty = ~mask.any(axis=1)
        low = np.where(mask, 0.0, -np.inf).astype(dtype)  # [bins, HW]
        plane = E.select(t, 0, b).reshape(c, 1, h * w)
        best = E.amax(plane + r.tensor(low), dim=2)  # [C, bins]
        best = E.where(r.tensor(empty), E.zeros_like(best), best)
        outs.append(best.reshape(c, ph, pw))
    return E.stack(outs, dim=0)
