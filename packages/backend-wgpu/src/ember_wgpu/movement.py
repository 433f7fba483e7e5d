"""Movement and indexing: views where strides allow, strided copies, gathers and scatters.

The views and copies (reshape, permute, expand, slice, flip, pad, cat) are planned once for
every strided backend by `ember.backend.movement.StridedKernels`; here are the kernels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.backend import ir
from ember.backend.strided import contiguous_strides
from ember.ops import movement as mv

from . import sort
from .runtime import Runtime, WGArray
from .strided import contiguous, load, run_indexed, run_map, wgsl_storage

__all__ = ["fill", "gather", "index_select", "kernels", "scatter"]


def fill(rt: Runtime, shape: tuple[int, ...], dtype: np.dtype[Any], value: Any) -> WGArray:
    out = rt.empty(shape, dtype)
    v = bool(value) if dtype.kind == "b" else np.asarray(value).astype(dtype)[()]
    return run_map(rt, "s0", [], out=out, scalars=[(ir.compute_dtype(dtype.name), v)])


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


# -- gathers and scatters -----------------------------------------------------------------------

# b0: x walked with a zero stride along ``dim``; b1: the index; b2: out.  P[X] is x's size along
# dim, P[X + 1] its stride.  An index outside [-n, n) reads 0 (core checks indices before).
_GATHER = """var id = i64(b1[o1]);
if (id < 0li) { id = id + i64(P[X]); }
let ok = id >= 0li && id < i64(P[X]);
b2[o2] = select(ZERO, b0[o0 + i32(select(0li, id, ok)) * P[X + 1]], ok);"""


def _zero_raw(dtype: np.dtype[Any]) -> str:
    t = wgsl_storage(dtype)
    return {"f32": "0.0f", "f16": "0.0h", "i32": "0i", "i64": "0li", "u32": "0u"}[t]


def gather(rt: Runtime, x: WGArray, index: WGArray, dim: int) -> WGArray:
    out = rt.empty(index.shape, x.dtype)
    strides = [0 if d == dim else s for d, s in enumerate(x.strides)]
    xv = x.view(index.shape, strides, x.offset)
    run_indexed(rt, _GATHER.replace("ZERO", _zero_raw(x.dtype)), [xv, index], [out],
                [x.shape[dim], x.strides[dim]])
    return out


def index_select(rt: Runtime, x: WGArray, index: WGArray, dim: int) -> WGArray:
    shape = tuple(len_ if d == dim else n for d, n in enumerate(x.shape)
                  for len_ in [index.shape[0] if index.ndim else 1])
    out = rt.empty(shape, x.dtype)
    xv = x.view(shape, [0 if d == dim else s for d, s in enumerate(x.strides)], x.offset)
    iv = index.view(shape, [index.strides[0] if d == dim and index.ndim else 0
                            for d in range(len(shape))], index.offset)
    run_indexed(rt, _GATHER.replace("ZERO", _zero_raw(x.dtype)), [xv, iv], [out],
                [x.shape[dim], x.strides[dim]])
    return out


# one invocation per column (index positions sharing every coordinate but ``dim``) walks it in
# order: duplicates resolve as on the CPU (last write wins, sums in order), with no atomics.
# b0: index, b1: src (both at the column's start), b2: out at the column's start with a zero
# stride along dim.  P[X]: length along dim; P[X+1], P[X+2], P[X+3]: the three strides along
# dim; P[X+4]: out's size along dim.
_SCATTER = """for (var j = 0; j < P[X]; j = j + 1) {
    var id = i64(b0[o0 + j * P[X + 1]]);
    if (id < 0li) { id = id + i64(P[X + 4]); }
    if (id >= 0li && id < i64(P[X + 4])) {
        let at = o2 + i32(id) * P[X + 3];
        STORE
    }
}"""


def scatter(rt: Runtime, x: WGArray, index: WGArray, src: WGArray, dim: int,
            add: bool) -> WGArray:
    out = run_map(rt, "a", [x])  # a fresh copy: the kernel writes into it
    if index.size == 0:
        return out
    cols = tuple(1 if d == dim else n for d, n in enumerate(index.shape))
    iv = index.view(cols, index.strides, index.offset)
    sv = src.view(cols, src.strides, src.offset)
    ov = out.view(cols, [0 if d == dim else s for d, s in enumerate(out.strides)], out.offset)
    value = load(src.dtype, "b1[o1 + j * P[X + 2]]")
    if add:
        from .strided import store

        cur = load(out.dtype, "b2[at]")
        stmt = f"b2[at] = {store(out.dtype, f'{cur} + {value}')};"
    else:
        stmt = "b2[at] = b1[o1 + j * P[X + 2]];"
    run_indexed(rt, _SCATTER.replace("STORE", stmt), [iv, sv], [ov],
                [index.shape[dim], index.strides[dim], src.strides[dim], out.strides[dim],
                 out.shape[dim]])
    return out


def nonzero(rt: Runtime, x: WGArray) -> WGArray:
    """Coordinates of the non-zero elements: their running count (a scan), read back for the
    result's size (a host sync, as on every backend), then one invocation per element."""
    from .elementwise import cast
    from .reduction import scan

    flat = contiguous(rt, x)
    flat = flat.view((x.size,), (1,), flat.offset)
    mask = cast(rt, cast(rt, flat, np.dtype(np.bool_)), np.dtype(np.int32))
    pos = scan(rt, "cumsum", mask, 0)
    total = int(rt.read(pos.view((1,), (1,), pos.offset + x.size - 1))[0]) if x.size else 0
    out = rt.empty((total, x.ndim), np.dtype(np.int64))
    if total == 0 or x.ndim == 0:
        return out
    strides = contiguous_strides(x.shape)
    coords = "".join(f"b2[r + {d}] = i64((i / {strides[d]}) % {x.shape[d]});\n"
                     for d in range(x.ndim))
    body = f"if (b0[o0] != 0) {{\nlet r = (b1[o1] - 1) * {x.ndim};\n{coords}}}"
    whole = out.view((x.size,), (0,), 0)
    run_indexed(rt, body, [mask, pos], [whole])
    return out


def kernels(rt: Runtime) -> dict[Any, Any]:
    """The kernels of movement and indexing that run on the device (the views and copies
    `ember.backend.movement.StridedKernels` plans are in `ember_wgpu.nn.kernels`)."""
    return {
        mv.gather: lambda x, index, dim=0: x if x.ndim == 0 else gather(rt, x, index, dim),
        mv.index_select: lambda x, index, dim=0: index_select(rt, x, index, dim),
        mv.scatter: lambda x, index, src, dim=0: scatter(rt, x, index, src, dim, False),
        mv.scatter_add: lambda x, index, src, dim=0: scatter(rt, x, index, src, dim, True),
        # every sort is stable (`ember_wgpu.sort`)
        mv.sort: lambda x, dim=-1, descending=False, stable=False: sort.sort(rt, x, dim,
                                                                             descending),
        mv.topk: lambda x, k=1, dim=-1, largest=True: sort.topk(rt, x, k, dim, largest),
        mv.nonzero: lambda x: nonzero(rt, x),
        mv.masked_fill: lambda x, mask, value=0: masked_fill(rt, x, mask, value),
        mv.tril: lambda x, k=0: tri(rt, x, k, True),
        mv.triu: lambda x, k=0: tri(rt, x, k, False),
    }
