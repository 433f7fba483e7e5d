"""Sampling at computed coordinates: GridSample and AffineGrid, as composites of ember ops.

GridSample gathers each interpolation tap from the input flattened over its spatial axes
(one `gather` per tap: 2^r taps for linear, 4^r for cubic, one for nearest, r spatial axes)
and sums the taps with their weights, so it runs on every device and is differentiable in
the input and in the grid (through the weights), as PyTorch's ``grid_sample``.  Padding
follows the ONNX reference: ``zeros`` (taps outside read 0), ``border`` (clamped) and
``reflection`` (reflected at the borders, which are the outer pixel centres with
``align_corners`` and the outer pixel edges without).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

import ember as E
from ember import Tensor

from ._registry import Node, Run, op

_MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest",
          "bicubic": "cubic", "cubic": "cubic"}


def _reflect(x: Tensor, lo: float, hi: float) -> Tensor:
    """``x`` reflected at ``lo`` and ``hi`` until it lies between them."""
    span = hi - lo
    if span <= 0:
        return E.zeros_like(x) + lo
    below = lo - x
    above = x - hi
    d = E.where(x < lo, below, above)
    n = (d / span).floor()
    rest = d - n * span
    even = (n - 2.0 * (n / 2.0).floor()) == 0
    from_lo = E.where(even, lo + rest, hi - rest)  # below lo
    from_hi = E.where(even, hi - rest, lo + rest)  # above hi
    out = E.where(x < lo, from_lo, from_hi)
    return E.where((x < lo) | (x > hi), out, x)


def _cubic(t: Tensor) -> list[Tensor]:
    """Keys' cubic convolution weights (a = -0.75) of the 4 taps around a fraction ``t``."""
    a = -0.75

    def near(s: Tensor) -> Tensor:  # |s| <= 1
        return ((a + 2) * s - (a + 3)) * s * s + 1

    def far(s: Tensor) -> Tensor:  # 1 < |s| < 2
        return ((a * s - 5 * a) * s + 8 * a) * s - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


@op("GridSample", note="2-D and N-D; linear, nearest, cubic; padding zeros, border, "
    "reflection; align_corners")
def grid_sample(r: Run, node: Node, x: Any, grid: Any) -> Tensor:
    at = node.attrs
    mode = _MODES.get(at.get("mode", "linear" if node.opset >= 20 else "bilinear"))
    if mode is None or (node.opset < 20 and at.get("mode") in ("linear", "cubic")):
        raise ValueError(f"{node.where()}: mode {at.get('mode')!r} is not defined")
    pad = at.get("padding_mode", "zeros")
    if pad not in ("zeros", "border", "reflection"):
        raise ValueError(f"{node.where()}: padding_mode {pad!r} is not zeros, border or "
                         "reflection")
    align = bool(at.get("align_corners", 0))
    xt, gt = r.tensor(x), r.tensor(grid)
    nd = xt.ndim - 2
    if nd < 1 or gt.ndim != nd + 2 or gt.shape[0] != xt.shape[0] or gt.shape[-1] != nd:
        raise ValueError(f"{node.where()}: X {list(xt.shape)} and grid {list(gt.shape)} do "
                         f"not match (grid [N, *out, {max(nd, 1)}] for X [N, C, *spatial])")
    out_dtype = None
    if not xt.dtype.is_floating_point:
        # Note: an integer input is sampled in the grid's float type and truncated back
        # toward zero (the ONNX reference casts its interpolation weights to the integer
        # type, which zeroes them; onnxruntime takes float inputs only)
        out_dtype, xt = xt.dtype, xt.to(dtype=gt.dtype)
    n, c, dims = xt.shape[0], xt.shape[1], list(xt.shape[2:])
    out = list(gt.shape[1:-1])
    p = math.prod(out)
    gt = gt.to(dtype=xt.dtype).reshape(n, p, nd)
    coords = []
    for i, d in enumerate(dims):
        g = gt[:, :, nd - 1 - i]  # the grid lists coordinates innermost axis first
        v = (g + 1) * (0.5 * (d - 1)) if align else ((g + 1) * d - 1) * 0.5
        lo, hi = (0.0, d - 1.0) if align else (-0.5, d - 0.5)
        if mode == "nearest":
            v = v.round()  # half to even, as PyTorch and the reference
        if pad == "border":
            v = v.clamp(0.0, d - 1.0)
        elif pad == "reflection":
            v = _reflect(v, lo, hi)
        coords.append((v, lo, hi))
    flat = xt.reshape(n, c, math.prod(dims))
    strides = [math.prod(dims[i + 1:]) for i in range(nd)]
    taps_per_axis: list[list[tuple[Tensor, Tensor | None]]] = []
    for v, _lo, _hi in coords:
        if mode == "nearest":
            taps_per_axis.append([(v, None)])
            continue
        base = v.floor()
        t = v - base
        if mode == "linear":
            taps_per_axis.append([(base, 1 - t), (base + 1, t)])
        else:
            ws = _cubic(t)
            taps_per_axis.append([(base + (k - 1), ws[k]) for k in range(4)])
    total: Tensor | None = None
    for combo in itertools.product(*taps_per_axis):
        index: Tensor | None = None
        weight: Tensor | None = None
        valid: Tensor | None = None
        for axis, (pos, w) in enumerate(combo):
            d = dims[axis]
            if pad == "zeros":
                ok = (pos >= 0) & (pos <= d - 1)
                valid = ok if valid is None else valid & ok
                pos = pos.clamp(0.0, d - 1.0)
            elif pad == "border":
                pos = pos.clamp(0.0, d - 1.0)
            else:
                lo, hi = coords[axis][1], coords[axis][2]
                pos = _reflect(pos, lo, hi).trunc().clamp(0.0, d - 1.0)
            term = pos.to(dtype=E.int64) * strides[axis]
            index = term if index is None else index + term
            if w is not None:
                weight = w if weight is None else weight * w
        assert index is not None
        picked = E.gather(flat, 2, index.reshape(n, 1, p).expand(n, c, p))
        if valid is not None:
            picked = E.where(valid.reshape(n, 1, p), picked, 0.0)
        if weight is not None:
            picked = picked * weight.reshape(n, 1, p)
        total = picked if total is None else total + picked
    assert total is not None
    total = total.reshape(n, c, *out)
    return total if out_dtype is None else total.trunc().to(dtype=out_dtype)


@op("AffineGrid", host_inputs=(1,), note="2-D and 3-D; align_corners")
def affine_grid(r: Run, node: Node, theta: Any, size: Any) -> Tensor:
    th = r.tensor(theta)
    shape = r.ints(size)
    nd = len(shape) - 2
    if nd not in (2, 3) or th.ndim != 3 or tuple(th.shape[1:]) != (nd, nd + 1) \
            or th.shape[0] != shape[0]:
        raise ValueError(f"{node.where()}: theta {list(th.shape)} does not match size "
                         f"{shape} (theta [N, 2, 3] for [N, C, H, W], [N, 3, 4] for "
                         "[N, C, D, H, W])")
    align = bool(node.attrs.get("align_corners", 0))
    spatial = shape[2:]

    def axis(d: int) -> np.ndarray:
        if align:
            return np.linspace(-1.0, 1.0, d) if d > 1 else np.zeros(d)
        return (np.arange(d) * 2.0 + 1.0) / d - 1.0

    mesh = np.meshgrid(*[axis(d) for d in spatial], indexing="ij")
    # homogeneous coordinates innermost axis first: (x, y[, z], 1)
    base = np.stack([*mesh[::-1], np.ones(spatial)], -1).reshape(-1, nd + 1)
    b = E.tensor(base.astype(np.float64), device=th.device).to(dtype=th.dtype)
    grid = E.matmul(b.reshape(1, -1, nd + 1), th.permute(0, 2, 1))
    return grid.reshape(shape[0], *spatial, nd)
