"""Movement and indexing: views where strides allow, strided copies, gathers, scatters, and a
stable merge sort.

The views and copies (reshape, permute, expand, slice, flip, pad, cat) are planned once for
every strided backend by `ember.backend.movement.StridedKernels`; here are the kernels.  scatter
walks each index column sequentially, so duplicates resolve deterministically
(last write wins, sums in order) without atomics.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from ember.backend.movement import first_k
from ember.backend.strided import contiguous_strides, is_float, permute
from ember.ops import movement as mv

from .runtime import GROUP, CLArray, Runtime, compute_type, ctype, load_expr, store_expr
from .strided import run_map

__all__ = ["fill", "gather", "index_select", "kernels", "sort"]

I64 = np.dtype(np.int64)


def fill(rt: Runtime, shape: tuple[int, ...], dtype: np.dtype[Any], value: Any) -> CLArray:
    """A new array of ``shape`` holding ``value``."""
    out = rt.empty(shape, dtype)
    v = int(bool(value)) if dtype.kind == "b" else np.asarray(value).astype(dtype)[()]
    return run_map(rt, "s0", [], out=out, scalars=[(compute_type(dtype), v)])


# -- gathers and scatters -----------------------------------------------------------------------

_GATHER = """
__kernel void gather(__global {t}* out, __global const {t}* x, long xo, {xs},
                     __global const long* ix, long io, {is_}, {ns} long dimsize, long total)
{{
    long i = get_global_id(0);
    if (i >= total) return;
    {it} r = i;
    {decomp}
    long id = ix[io + {iaddr}];
    if (id < 0) id += dimsize;
    if (id < 0 || id >= dimsize) {{ out[i] = 0; return; }}  /* never outside x (core checks) */
    out[i] = x[xo + {xaddr}];
}}
"""


def gather(rt: Runtime, x: CLArray, index: CLArray, dim: int) -> CLArray:
    """``out[p] = x[p with p[dim] = index[p]]`` over ``index``'s shape."""
    shape = index.shape
    nd = len(shape)
    out = rt.empty(shape, x.dtype)
    if out.size == 0:
        return out
    # 32-bit index arithmetic where it fits: its divisions cost a third of 64-bit ones
    it = "uint" if out.size < (1 << 31) else "long"
    decomp = [*(f"{it} k{d} = r % ({it})n{d}; r /= ({it})n{d};" for d in range(nd - 1, 0, -1)),
              f"{it} k0 = r;"]
    xaddr = " + ".join(f"k{d} * xs{d}" if d != dim else f"id * xs{d}" for d in range(nd))
    src = _GATHER.format(
        t=ctype(x.dtype), xs=", ".join(f"long xs{d}" for d in range(nd)),
        is_=", ".join(f"long is{d}" for d in range(nd)),
        ns="".join(f"long n{d}, " for d in range(1, nd)), decomp="\n    ".join(decomp),
        iaddr=" + ".join(f"k{d} * is{d}" for d in range(nd)), xaddr=xaddr, it=it)
    k = rt.kernel(src, "gather")
    rt.launch1d(k, out.size, out.buffer, x.buffer, np.int64(x.offset),
              *map(np.int64, x.strides), index.buffer, np.int64(index.offset),
              *map(np.int64, index.strides), *map(np.int64, shape[1:]),
              np.int64(x.shape[dim]))
    return out


# index_select of whole rows of a dense x: a 2-d grid over (row element, selected row), so the
# copy of each row is contiguous and needs no per-element index arithmetic
_TAKE_ROWS = """
__kernel void take_rows(__global {t}* out, __global const {t}* x, long xo,
                        __global const long* ix, long io, long is0, long nidx, long inner,
                        long dimsize)
{{
    long i1 = get_global_id(0), i0 = get_global_id(1);
    if (i1 >= inner) return;
    long b = i0 / nidx, j = i0 % nidx;
    long id = ix[io + j * is0];
    if (id < 0) id += dimsize;
    if (id < 0 || id >= dimsize) {{ out[i0 * inner + i1] = 0; return; }}
    out[i0 * inner + i1] = x[xo + (b * dimsize + id) * inner + i1];
}}
"""


def index_select(rt: Runtime, x: CLArray, index: CLArray, dim: int) -> CLArray:
    inner = math.prod(x.shape[dim + 1:])
    if x.is_contiguous() and inner >= 32 and index.ndim == 1:
        shape = (*x.shape[:dim], index.shape[0], *x.shape[dim + 1:])
        out = rt.empty(shape, x.dtype)
        if out.size:
            k = rt.kernel(_TAKE_ROWS.format(t=ctype(x.dtype)), "take_rows")
            outer = math.prod(x.shape[:dim]) * index.shape[0]
            rt.launch(k, (-(-inner // GROUP) * GROUP, outer), (GROUP, 1), out.buffer, x.buffer,
                      np.int64(x.offset), index.buffer, np.int64(index.offset),
                      np.int64(index.strides[0]), np.int64(index.shape[0]), np.int64(inner),
                      np.int64(x.shape[dim]))
        return out
    view_shape = list(x.shape)
    view_shape[dim] = index.shape[0]
    strides = [0] * x.ndim
    strides[dim] = index.strides[0]
    return gather(rt, x, index.view(tuple(view_shape), tuple(strides), index.offset), dim)


_SCATTER = """
__kernel void scatter(__global {t}* out, __global const long* ix, long io, {is_},
                      __global const {t}* src, long so, {ss}, {os}, {ns} long m, long dimsize,
                      long total)
{{
    long r = get_global_id(0);
    if (r >= total) return;
    {decomp}
    long ib = io + {ibase}, sb = so + {sbase}, ob = {obase};
    for (long t = 0; t < m; t++) {{
        long id = ix[ib + t * is{dim}];
        if (id < 0) id += dimsize;
        if (id < 0 || id >= dimsize) continue;
        {assign}
    }}
}}
"""


def scatter(rt: Runtime, x: CLArray, index: CLArray, src: CLArray, dim: int,
            add: bool) -> CLArray:
    if x.ndim == 0:
        one = (1,)
        x, index, src = (a.view(one, one, a.offset) for a in (x, index, src))
        flat = scatter(rt, x, index, src, 0, add)  # a fresh dense array
        return flat.view((), (), flat.offset)
    out = run_map(rt, "a", [x])
    nd = x.ndim
    ostr = out.strides
    cols = [d for d in range(nd) if d != dim]
    decomp = [f"long k{d} = r % n{d}; r /= n{d};" for d in reversed(cols)]

    def base(name: str) -> str:
        return " + ".join([*(f"k{d} * {name}{d}" for d in cols), "0"])

    src_code = _SCATTER.format(
        t=ctype(x.dtype), is_=", ".join(f"long is{d}" for d in range(nd)),
        ss=", ".join(f"long ss{d}" for d in range(nd)),
        os=", ".join(f"long os{d}" for d in range(nd)),
        ns="".join(f"long n{d}, " for d in cols), decomp="\n    ".join(decomp),
        ibase=base("is"), sbase=base("ss"), obase=base("os"), dim=dim,
        assign=_scatter_assign(x.dtype, dim, add))
    k = rt.kernel(src_code, "scatter")
    ncols = math.prod(index.shape[d] for d in cols)
    if index.size == 0:
        return out
    rt.launch1d(k, ncols, out.buffer, index.buffer, np.int64(index.offset),
              *map(np.int64, index.strides), src.buffer, np.int64(src.offset),
              *map(np.int64, src.strides), *map(np.int64, ostr),
              *(np.int64(index.shape[d]) for d in cols), np.int64(index.shape[dim]),
              np.int64(x.shape[dim]))
    return out


def _scatter_assign(dt: np.dtype[Any], dim: int, add: bool) -> str:
    dst, val = f"out[ob + id * os{dim}]", f"src[sb + t * ss{dim}]"
    if not add:
        return f"{dst} = {val};"
    if ctype(dt) == "ushort":  # 16-bit floats: add in float, round once per update
        return f"{dst} = {store_expr(dt, f'{load_expr(dt, dst)} + {load_expr(dt, val)}')};"
    return f"{dst} += {val};"


# -- sort -------------------------------------------------------------------------------------

# Stable merge sort: insertion sort of 32-element blocks (a work-item each), then merge passes
# where a work-item finds where its chunk of outputs starts (a merge-path binary search) and
# merges that chunk serially, reading both runs sequentially.  The order
# (value, original index) is total, so the result is stable and equal to any stable sort.
# Note: the issue asked for a bitonic network; on PoCL that ran at 0.05x numpy (n log^2 n work,
# one launch a stage, padding to 2^k) and this sort at 0.3x, and merge-path passes suit GPUs too.
SORT_BLOCK = 32
MERGE_CHUNK = 256  # outputs a work-item merges serially after one merge-path search

_SORT = """
int before({c} x, long ix, {c} y, long iy) {{
    {nan}
    if (x {lt} y) return 1;
    if (y {lt} x) return 0;
    return ix < iy;
}}

__kernel void blocksort(__global {t}* keys, __global long* idx, long n, long nblk, long total)
{{
    long g = get_global_id(0);
    if (g >= total) return;
    long row = g / nblk, b0 = row * n + (g % nblk) * {B}, b1 = min(b0 + {B}, row * n + n);
    for (long i = b0 + 1; i < b1; i++) {{
        {t} k = keys[i]; long ki = idx[i]; {c} kc = {load_k};
        long j = i;
        while (j > b0) {{
            {t} p = keys[j - 1]; {c} pc = {load_p};
            if (!before(kc, ki, pc, idx[j - 1])) break;
            keys[j] = p; idx[j] = idx[j - 1]; j--;
        }}
        keys[j] = k; idx[j] = ki;
    }}
}}

__kernel void merge(__global {t}* ko, __global long* io, __global const {t}* ki,
                    __global const long* ii, long n, long w, long C, long nchunk, long total)
{{
    long g = get_global_id(0);
    if (g >= total) return;
    long row = g / nchunk, o0 = (g % nchunk) * C;
    long base = (o0 / (2 * w)) * 2 * w, d = o0 - base;
    long la = min(w, n - base), lb = max(min(w, n - base - w), 0L);
    __global const {t}* ka = ki + row * n + base;
    __global const long* ia = ii + row * n + base;
    __global const {t}* kb = ka + la;
    __global const long* ib = ia + la;
    /* merge path: how many of the first d outputs come from run a */
    long lo = max(0L, d - lb), hi = min(d, la);
    while (lo < hi) {{
        long m = (lo + hi) >> 1;
        {t} e = ka[m], f = kb[d - 1 - m];
        {c} ec = {load_e}, fc = {load_f};
        if (before(ec, ia[m], fc, ib[d - 1 - m])) lo = m + 1; else hi = m;
    }}
    long i = lo, j = d - lo, end = min(d + C, la + lb);
    __global {t}* kout = ko + row * n + base;
    __global long* iout = io + row * n + base;
    for (long q = d; q < end; q++) {{
        int from_a;
        if (i >= la) from_a = 0;
        else if (j >= lb) from_a = 1;
        else {{
            {t} e = ka[i], f = kb[j];
            {c} ec = {load_e}, fc = {load_f};
            from_a = !before(fc, ib[j], ec, ia[i]);
        }}
        if (from_a) {{ kout[q] = ka[i]; iout[q] = ia[i]; i++; }}
        else {{ kout[q] = kb[j]; iout[q] = ib[j]; j++; }}
    }}
}}
"""


def sort(rt: Runtime, x: CLArray, dim: int, descending: bool) -> tuple[CLArray, CLArray]:
    """Stable sort along ``dim`` (nan sorts as the largest value), with int64 indices."""
    nd = x.ndim
    order = [*(d for d in range(nd) if d != dim), dim]
    xp = permute(x, tuple(order))
    n = x.shape[dim]
    rows = math.prod(xp.shape[:-1])
    dense = contiguous_strides(xp.shape)
    keys = run_map(rt, "a", [xp])  # dense [..., n] copy, bits untouched
    idx = run_map(rt, "i % s0", [], shape=xp.shape, dtype=I64, scalars=[("long", max(n, 1))])
    fl = is_float(x.dtype)
    first = "xn" if descending else "yn"
    nan = f"int xn = isnan(x), yn = isnan(y); if (xn || yn) return xn && yn ? ix < iy : {first};"
    src = _SORT.format(t=ctype(x.dtype), c=compute_type(x.dtype), nan=nan if fl else "",
                       lt=">" if descending else "<", B=SORT_BLOCK,
                       load_k=load_expr(x.dtype, "k"), load_p=load_expr(x.dtype, "p"),
                       load_e=load_expr(x.dtype, "e"), load_f=load_expr(x.dtype, "f"))
    if rows and n > 1:
        nblk = -(-n // SORT_BLOCK)
        rt.launch1d(rt.kernel(src, "blocksort"), rows * nblk, keys.buffer, idx.buffer,
                    np.int64(n), np.int64(nblk))
        merge = rt.kernel(src, "merge")
        w = SORT_BLOCK
        while w < n:
            k2, i2 = rt.empty(keys.shape, keys.dtype), rt.empty(idx.shape, I64)
            chunk = min(MERGE_CHUNK, 2 * w)  # divides 2w: no chunk straddles two merges
            nchunk = -(-n // chunk)
            rt.launch1d(merge, rows * nchunk, k2.buffer, i2.buffer, keys.buffer, idx.buffer,
                        np.int64(n), np.int64(w), np.int64(chunk), np.int64(nchunk))
            keys, idx, w = k2, i2, 2 * w
    inverse = tuple(order.index(d) for d in range(nd))
    values = keys.view(xp.shape, dense, 0)
    indices = idx.view(xp.shape, dense, 0)
    return permute(values, inverse), permute(indices, inverse)


# -- nonzero ------------------------------------------------------------------------------------

_NONZERO = """
__kernel void nz(__global long* out, __global const long* cum, __global const uchar* flag,
                 {ns} long nd, long total)
{{
    long i = get_global_id(0);
    if (i >= total) return;
    if (!flag[i]) return;
    long pos = (cum[i] - 1) * nd;
    long r = i;
    {decomp}
}}
"""


def nonzero(rt: Runtime, x: CLArray) -> CLArray:
    from .reduction import scan

    flag = run_map(rt, "a != 0", [x], dtype=np.dtype(np.uint8))
    flat = flag.view((flag.size,), (1,), 0)
    cum = scan(rt, run_map(rt, "a", [flat], dtype=I64), 0, "+")
    total = int(rt.read(cum.view((1,), (1,), cum.size - 1))[0]) if cum.size else 0
    nd = x.ndim
    out = rt.empty((total, nd), I64)
    if total == 0 or nd == 0:
        return out
    decomp = []
    for d in range(nd - 1, -1, -1):
        decomp.append(f"out[pos + {d}] = r % n{d}; r /= n{d};")
    src = _NONZERO.format(ns="".join(f"long n{d}, " for d in range(nd)),
                          decomp="\n    ".join(decomp))
    k = rt.kernel(src, "nz")
    rt.launch1d(k, x.size, out.buffer, cum.buffer, flag.buffer,
              *map(np.int64, x.shape), np.int64(nd))
    return out


def kernels(rt: Runtime) -> dict[Any, Any]:
    """The kernels of movement and indexing that run on the device (the views and copies
    `ember.backend.movement.StridedKernels` plans are in `ember_opencl.nn.kernels`)."""
    def tri(lower: bool) -> Any:
        def kernel(x: CLArray, k: int = 0) -> CLArray:
            rows, cols = x.shape[-2], x.shape[-1]
            test = "<=" if lower else ">="
            expr = f"((long)(i % s1) - (long)((i / s1) % s2) {test} s0) ? a : 0"
            return run_map(rt, expr, [x], scalars=[("long", k), ("long", max(cols, 1)),
                                                  ("long", max(rows, 1))])
        return kernel

    def topk(x: CLArray, k: int = 1, dim: int = -1,
             largest: bool = True) -> tuple[CLArray, CLArray]:
        if x.ndim == 0:
            return x, run_map(rt, "0", [x], dtype=I64)
        v, i = sort(rt, x, dim, largest)
        return first_k(v, k, dim), first_k(i, k, dim)

    def masked_fill(x: CLArray, mask: CLArray, value: Any = 0) -> CLArray:
        v = int(bool(value)) if x.dtype.kind == "b" else np.asarray(value).astype(x.dtype)[()]
        return run_map(rt, "b ? s0 : a", [x, mask], shape=x.shape, dtype=x.dtype,
                       scalars=[(compute_type(x.dtype), v)])

    def _sort(x: CLArray, dim: int = -1, descending: bool = False,
              stable: bool = False) -> tuple[CLArray, CLArray]:
        return sort(rt, x, dim, descending)

    return {
        mv.gather: lambda x, index, dim=0: x if x.ndim == 0 else gather(rt, x, index, dim),
        mv.scatter_add: lambda x, index, src, dim=0: scatter(rt, x, index, src, dim, True),
        mv.scatter: lambda x, index, src, dim=0: scatter(rt, x, index, src, dim, False),
        mv.index_select: lambda x, index, dim=0: index_select(rt, x, index, dim),
        mv.masked_fill: masked_fill,
        mv.tril: tri(True),
        mv.triu: tri(False),
        mv.nonzero: lambda x: nonzero(rt, x),
        mv.sort: _sort,
        mv.topk: topk,
    }
