"""Movement and indexing: views where strides allow, strided copies, gathers and scatters.

reshape (of dense inputs), permute, expand, slice and flip cost no kernel: they return a new
`WGArray` over the same buffer.  pad and cat write their inputs into strided views of a fresh
output.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.backend import ir
from ember.ops import movement as mv

from .runtime import Runtime, WGArray, contiguous_strides
from .strided import contiguous, copy_into, run_map

__all__ = ["kernels"]


def reshape(rt: Runtime, x: WGArray, shape: tuple[int, ...]) -> WGArray:
    x = contiguous(rt, x)
    return x.view(tuple(shape), contiguous_strides(tuple(shape)), x.offset)


def permute(x: WGArray, dims: tuple[int, ...]) -> WGArray:
    return x.view(tuple(x.shape[d] for d in dims), tuple(x.strides[d] for d in dims), x.offset)


def slice_view(x: WGArray, starts: Any, stops: Any, steps: Any) -> WGArray:
    offset = x.offset
    shape, strides = [], []
    for s, a, b, c in zip(x.strides, starts, stops, steps, strict=True):
        m = len(range(a, b, c))
        shape.append(m)
        strides.append(s * c)
        if m:
            offset += a * s
    return x.view(tuple(shape), tuple(strides), offset)


def flip(x: WGArray, dims: tuple[int, ...]) -> WGArray:
    offset = x.offset
    strides = list(x.strides)
    for d in dims:
        if x.shape[d] > 0:
            offset += (x.shape[d] - 1) * strides[d]
        strides[d] = -strides[d]
    return x.view(x.shape, tuple(strides), offset)


def expand(x: WGArray, shape: tuple[int, ...]) -> WGArray:
    from .strided import broadcast_view

    return broadcast_view(x, shape)


def fill(rt: Runtime, shape: tuple[int, ...], dtype: np.dtype[Any], value: Any) -> WGArray:
    out = rt.empty(shape, dtype)
    v = bool(value) if dtype.kind == "b" else np.asarray(value).astype(dtype)[()]
    return run_map(rt, "s0", [], out=out, scalars=[(ir.compute_dtype(dtype.name), v)])


def pad(rt: Runtime, x: WGArray, widths: Any, value: Any) -> WGArray:
    shape = tuple(n + a + b for n, (a, b) in zip(x.shape, widths, strict=True))
    out = fill(rt, shape, x.dtype, value)
    inner = slice_view(out, [a for a, _ in widths],
                       [a + n for n, (a, _) in zip(x.shape, widths, strict=True)], [1] * x.ndim)
    copy_into(rt, inner, x)
    return out


def cat(rt: Runtime, xs: tuple[WGArray, ...], dim: int) -> WGArray:
    shape = list(xs[0].shape)
    shape[dim] = sum(x.shape[dim] for x in xs)
    out = rt.empty(tuple(shape), xs[0].dtype)
    start = 0
    for x in xs:
        n = x.shape[dim]
        starts = [0] * len(shape)
        stops = list(shape)
        starts[dim], stops[dim] = start, start + n
        copy_into(rt, slice_view(out, starts, stops, [1] * len(shape)), x)
        start += n
    return out


def _zero(dtype: np.dtype[Any]) -> str:
    from .render import const

    return const(0, ir.compute_dtype(dtype.name)) if dtype.kind != "b" else "false"


def tri(rt: Runtime, x: WGArray, k: int, lower: bool) -> WGArray:
    """tril/triu over the last two axes (``i`` is the element's linear index)."""
    if x.ndim < 2 or x.size == 0:
        return run_map(rt, "a", [x])
    rows, cols = x.shape[-2], x.shape[-1]
    test = "<=" if lower else ">="
    expr = (f"select({_zero(x.dtype)}, a, (i % s1) - ((i / s1) % s2) {test} s0)")
    return run_map(rt, expr, [x], scalars=[("int32", k), ("int32", cols), ("int32", rows)])


def masked_fill(rt: Runtime, x: WGArray, mask: WGArray, value: Any) -> WGArray:
    v = bool(value) if x.dtype.kind == "b" else np.asarray(value).astype(x.dtype)[()]
    return run_map(rt, "select(a, s0, b)", [x, mask], shape=x.shape, dtype=x.dtype,
                   scalars=[(ir.compute_dtype(x.dtype.name), v)])


def kernels(rt: Runtime) -> dict[Any, Any]:
    return {
        mv.reshape: lambda x, shape=(): reshape(rt, x, shape),
        mv.permute: lambda x, dims=(): permute(x, dims),
        mv.expand: lambda x, shape=(): expand(x, shape),
        mv.slice: lambda x, starts=(), stops=(), steps=(): slice_view(x, starts, stops, steps),
        mv.pad: lambda x, pad=(), value=0: globals()["pad"](rt, x, pad, value),
        mv.flip: lambda x, dims=(): flip(x, dims),
        mv.cat: lambda *xs, dim=0: cat(rt, xs, dim),
        mv.masked_fill: lambda x, mask, value=0: masked_fill(rt, x, mask, value),
        mv.tril: lambda x, k=0: tri(rt, x, k, True),
        mv.triu: lambda x, k=0: tri(rt, x, k, False),
        mv.contiguous: lambda x: contiguous(rt, x),
    }
