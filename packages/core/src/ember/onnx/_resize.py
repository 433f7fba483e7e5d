"""Resize (and the deprecated Upsample) as composites of ember ops, one axis at a time.

Resizing is separable: along each resized axis, every output position reads a few input
positions (its *taps*) with weights that depend only on the output position.  Those taps
and weights are computed on the host from the attributes and shapes (numpy, float64); on the
device an axis then costs one `index_select` per tap and a weighted sum (nearest: one
`index_select`), so it runs on every device stack and is differentiable in the input.

Covered: modes nearest (every ``nearest_mode``), linear and cubic (``cubic_coeff_a``,
``exclude_outside``); ``antialias`` (linear and cubic kernels widened by 1/scale when
downsampling); every ``coordinate_transformation_mode`` (half_pixel, half_pixel_symmetric,
pytorch_half_pixel, align_corners, asymmetric, tf_half_pixel_for_nn, tf_crop_and_resize with
``roi`` and ``extrapolation_value``); ``axes``; ``keep_aspect_ratio_policy``; scales or
sizes.  The taps follow the ONNX specification's reference (the suite's expected values).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import ember as E
from ember import Tensor

from ._registry import Node, Run, op

_COORD = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
          "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize")
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _source(coord: str, out: int, size: int, scale: float,
            roi: tuple[float, float]) -> tuple[np.ndarray, np.ndarray | None]:
    """The input coordinate of each output position, and (tf_crop_and_resize) which ones
    fall outside the input (they take the extrapolation value)."""
    y = np.arange(out, dtype=np.float64)
    width = scale * size  # the output length before rounding
    if coord == "align_corners":
        return (np.zeros(out) if width == 1 else y * (size - 1) / (width - 1)), None
    if coord == "asymmetric":
        return y / scale, None
    if coord == "tf_crop_and_resize":
        lo, hi = roi
        x = (np.full(out, (hi - lo) * (size - 1) / 2) if width == 1
             else y * (hi - lo) * (size - 1) / (width - 1)) + lo * (size - 1)
        return x, (x < 0) | (x > size - 1)
    if coord == "pytorch_half_pixel":
        return (np.full(out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5), None
    if coord == "half_pixel":
        return (y + 0.5) / scale - 0.5, None
    if coord == "half_pixel_symmetric":
        offset = size / 2 * (1 - out / width)
        return offset + (y + 0.5) / scale - 0.5, None
    return (y + 0.5) / scale, None  # tf_half_pixel_for_nn


def _keys(s: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with parameter ``a``."""
    s = np.abs(s)
    near = ((a + 2) * s - (a + 3)) * s * s + 1
    far = ((a * s - 5 * a) * s + 8 * a) * s - 4 * a
    return np.where(s <= 1, near, np.where(s < 2, far, 0.0))


def _weights(at: dict[str, Any], mode: str, ratio: np.ndarray, scale: float) -> np.ndarray:
    """``[out, taps]`` weights of each output position's taps, from the fraction of its
    source coordinate past the floor (1 where it is an integer, as in the reference)."""
    r = ratio[:, None]
    anti = bool(at.get("antialias", 0))
    if mode == "nearest":
        rule = at.get("nearest_mode", "round_prefer_floor")
        upper = {"round_prefer_floor": r > 0.5, "round_prefer_ceil": r >= 0.5,
                 "floor": np.zeros_like(r, bool), "ceil": np.ones_like(r, bool)}[rule]
        upper = upper | (r == 1)
        return np.concatenate([~upper, upper], 1).astype(np.float64)
    if mode == "linear":
        if not anti:
            return np.concatenate([1 - r, r], 1)
        s = min(scale, 1.0)
        start = int(np.floor(-1 / s) + 1)
        k = (np.arange(start, 2 - start)[None, :] - r) * s
        w = np.clip(1 - np.abs(k), 0, 1)
        return w / w.sum(1, keepdims=True)  # type: ignore[no-any-return]
    a = float(at.get("cubic_coeff_a", -0.75))
    if not anti:
        return _keys(np.concatenate([r + 1, r, 1 - r, 2 - r], 1), a)
    s = min(scale, 1.0)
    start = int(np.floor(-2 / s) + 1)
    w = _keys((np.arange(start, 2 - start)[None, :] - r) * s, a)
    return w / w.sum(1, keepdims=True)  # type: ignore[no-any-return]


def _taps(at: dict[str, Any], mode: str, coord: str, out: int, size: int, scale: float,
          roi: tuple[float, float]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Input indices ``[out, taps]`` (clamped to the axis: the input is edge-padded),
    their weights, and the extrapolated positions (or None)."""
    x, outside = _source(coord, out, size, scale, roi)
    base = np.floor(x)
    ratio = np.where(x == base, 1.0, x - base)
    w = _weights(at, mode, ratio, scale)
    n = w.shape[1]
    # the n nearest integer positions to x, ties towards the lower ones
    frac = x - base
    if n % 2 == 0:
        first = base + np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        first = base + np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    idx = first[:, None].astype(np.int64) + np.arange(n)[None, :]
    if at.get("exclude_outside", 0) and mode != "nearest":
        w = np.where((idx < 0) | (idx >= size), 0.0, w)
        total = w.sum(1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, size - 1), w, outside


def _plan(r: Run, node: Node, t: Tensor, roi: Any, scales: Any,
          sizes: Any) -> tuple[list[int], list[int], list[float], list[tuple[float, float]]]:
    """The resized axes, every axis's output length and scale, and its roi."""
    at = node.attrs
    nd = t.ndim
    axes = [int(a) for a in at.get("axes", range(nd))]
    if any(not -nd <= a < nd for a in axes):
        raise ValueError(f"{node.where()}: axes {axes} are out of range for rank {nd}")
    axes = [a % nd for a in axes]
    if len(set(axes)) != len(axes):
        raise ValueError(f"{node.where()}: axes {axes} repeat an axis")
    sz = r.ints(sizes) if sizes is not None and r.host(sizes).size else None
    sc = [float(v) for v in r.host(scales).reshape(-1)] if scales is not None and \
        r.host(scales).size else None
    if (sz is None) == (sc is None):
        raise ValueError(f"{node.where()}: exactly one of scales and sizes must be given")
    given = sz if sz is not None else sc
    assert given is not None
    if len(given) != len(axes):
        raise ValueError(f"{node.where()}: {len(given)} scales/sizes for {len(axes)} axes")
    shape = list(t.shape)
    outs, scs = list(shape), [1.0] * nd
    if sz is not None:
        for a, s in zip(axes, sz, strict=True):
            outs[a], scs[a] = s, s / shape[a] if shape[a] else 1.0
        policy = at.get("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            if policy not in ("not_larger", "not_smaller"):
                raise ValueError(f"{node.where()}: keep_aspect_ratio_policy {policy!r} is "
                                 "not stretch, not_larger or not_smaller")
            pick = min if policy == "not_larger" else max
            common = pick(scs[a] for a in axes)
            for a in axes:
                scs[a], outs[a] = common, int(common * shape[a] + 0.5)
    else:
        assert sc is not None
        for a, f in zip(axes, sc, strict=True):
            if f <= 0:
                raise ValueError(f"{node.where()}: scale {f} must be positive")
            scs[a], outs[a] = f, math.floor(f * shape[a])
    rois = [(0.0, 1.0)] * nd
    if roi is not None and r.host(roi).size:
        v = [float(x) for x in r.host(roi).reshape(-1)]
        if len(v) != 2 * len(axes):
            raise ValueError(f"{node.where()}: roi has {len(v)} values for {len(axes)} axes")
        for i, a in enumerate(axes):
            rois[a] = (v[i], v[len(axes) + i])
    return axes, outs, scs, rois


@op("Resize", host_inputs=(1, 2, 3),
    note="nearest, linear, cubic; antialias; axes; keep_aspect_ratio_policy; coordinate "
    "modes " + ", ".join(_COORD))
def resize(r: Run, node: Node, x: Any, roi: Any = None, scales: Any = None,
           sizes: Any = None) -> Tensor:
    t = r.tensor(x)
    at = node.attrs
    if node.opset < 11:  # Resize-10: (X, scales), as Upsample: asymmetric, floor
        roi, scales, sizes = None, roi, None
        at = {**at, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    mode = at.get("mode", "nearest")
    coord = at.get("coordinate_transformation_mode", "half_pixel")
    nearest = at.get("nearest_mode", "round_prefer_floor")
    if mode not in ("nearest", "linear", "cubic") or coord not in _COORD or \
            nearest not in _NEAREST:
        raise ValueError(f"{node.where()}: mode {mode!r}, coordinate_transformation_mode "
                         f"{coord!r} or nearest_mode {nearest!r} is not defined")
    if mode == "nearest" and at.get("antialias", 0):
        raise ValueError(f"{node.where()}: antialias is defined for linear and cubic only")
    axes, outs, scs, rois = _plan(r, node, t, roi, scales, sizes)
    fill = float(at.get("extrapolation_value", 0.0))
    np_dtype = np.dtype(t.dtype.numpy_name)
    integer = np_dtype.kind in "iu" and mode != "nearest"
    if integer:  # weighted in float32, then rounded and saturated as the reference does
        t = t.to(dtype=E.float32)
        np_dtype, int_dtype = np.dtype(np.float32), np.dtype(np_dtype)
    for a in axes:
        size, out = t.shape[a], outs[a]
        if out == size and scs[a] == 1.0 and rois[a] == (0.0, 1.0):
            continue
        if size == 0 or out == 0:
            shape = list(t.shape)
            shape[a] = out
            t = E.zeros(tuple(shape), device=t.device, dtype=t.dtype)
            continue
        idx, w, outside = _taps(at, mode, coord, out, size, scs[a], rois[a])
        shape = [1] * t.ndim
        shape[a] = out
        if mode == "nearest":
            t = E.index_select(t, a, r.tensor(idx[np.arange(out), w.argmax(1)]))
        else:
            total: Tensor | None = None
            for k in range(idx.shape[1]):
                if not w[:, k].any():
                    continue
                part = E.index_select(t, a, r.tensor(idx[:, k]))
                part = part * r.tensor(w[:, k].astype(np_dtype).reshape(shape))
                total = part if total is None else total + part
            t = total if total is not None else E.index_select(t, a, r.tensor(idx[:, 0])) * 0
        if outside is not None and outside.any():
            t = E.where(r.tensor(outside.reshape(shape)), fill, t)
    if integer:
        info = np.iinfo(int_dtype)
        t = t.round().clamp(float(info.min), float(info.max)).to(
            dtype=getattr(E, int_dtype.name))
    return t


@op("Upsample", host_inputs=(1,), note="opsets 7-9 (deprecated at 10): nearest, linear")
def upsample(r: Run, node: Node, x: Any, scales: Any = None) -> Tensor:
    if scales is None:  # Upsample-7: scales as an attribute
        scales = np.asarray(node.attrs["scales"], np.float32)
    at = {**node.attrs, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    at.pop("scales", None)
    plain = Node("Resize", node.name, node.inputs, node.outputs, at, 11)
    out: Tensor = resize(r, plain, x, None, np.asarray(scales))
    return out
