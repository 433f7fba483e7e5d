"""Reductions over any axes, arg-reductions and scans.

The input is viewed as ``[kept..., reduced...]`` (a permuted view, no copy) and each group of
axes is merged where the strides allow.  Many outputs: one work-item per output walks its
reduced elements.  Few outputs: each output is split into chunks, a work-group reduces a chunk
with a local-memory tree, and a second pass combines the chunks.  float sums use Kahan
compensation inside each work-item, so long rows keep float32 accuracy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from ember.ops import reduction as rd

from .runtime import (
    CLArray,
    Runtime,
    compute_type,
    contiguous_strides,
    ctype,
    is_float,
    load_expr,
    store_expr,
)
from .strided import collapse, run_map

__all__ = ["kernels", "reduce"]

LOCAL = 64
BOOL = np.dtype(np.bool_)
I64 = np.dtype(np.int64)

_INT_MIN = {"char": "CHAR_MIN", "short": "SHRT_MIN", "int": "INT_MIN", "long": "LONG_MIN",
            "uchar": "0"}
_INT_MAX = {"char": "CHAR_MAX", "short": "SHRT_MAX", "int": "INT_MAX", "long": "LONG_MAX",
            "uchar": "UCHAR_MAX"}


def _spec(kind: str, t: str, fl: bool) -> tuple[str, str, str]:
    """(accumulator type, init, combine(acc, v)) of a plain reduction."""
    if kind in ("sum", "mean"):
        return t, f"({t})0", "acc + v"
    if kind == "prod":
        return t, f"({t})1", "acc * v"
    if kind == "max":
        if fl:
            return t, f"-({t})INFINITY", "(isnan(acc) ? acc : ((isnan(v) || v > acc) ? v : acc))"
        return t, _INT_MIN[t], "(v > acc ? v : acc)"
    if kind == "min":
        if fl:
            return t, f"({t})INFINITY", "(isnan(acc) ? acc : ((isnan(v) || v < acc) ? v : acc))"
        return t, _INT_MAX[t], "(v < acc ? v : acc)"
    if kind == "any":
        return "uchar", "0", "(uchar)(acc | (v != 0))"
    if kind == "all":
        return "uchar", "1", "(uchar)(acc & (v != 0))"
    raise NotImplementedError(kind)


def _arg_helper(t: str, fl: bool, largest: bool) -> str:
    better = ">" if largest else "<"
    nan = "int an = isnan(a), bn = isnan(b);\n    if (an || bn) return (an && bn) ? ia <= ib" \
          " : an;" if fl else ""
    # whether (a, ia) beats (b, ib): nan first, then the extreme value, then the lower index
    return f"""
int arg_first({t} a, long ia, {t} b, long ib) {{
    if (ib < 0) return 1;
    if (ia < 0) return 0;
    {nan}
    if (a {better} b) return 1;
    if (a == b) return ia <= ib;
    return 0;
}}"""


def _source(kind: str, x_dt: np.dtype[Any], acc_t: str, out_dt: np.dtype[Any], fl: bool,
            nk: int, nr: int, tree: bool, arg: bool, idx_in: bool) -> str:
    t = compute_type(x_dt)
    params = [f"__global {ctype(out_dt)}* out", f"__global const {ctype(x_dt)}* x", "long xo"]
    params += [f"long ks{d}" for d in range(nk)] + [f"long kn{d}" for d in range(1, nk)]
    params += [f"long rs{d}" for d in range(nr)] + [f"long rn{d}" for d in range(1, nr)]
    params += ["long R", "long chunk", "long P", "long nout", f"{acc_t} scale"]
    if arg:
        params += ["__global long* outi"]
    if idx_in:
        params += ["__global const long* xi"]
    body = []
    if tree:
        body += ["long g = get_group_id(0);", "int lid = get_local_id(0);", f"int L = {LOCAL};"]
    else:
        body += ["long g = get_global_id(0);", "int lid = 0;", "int L = 1;",
                 "if (g >= nout * P) return;"]
    body += ["long o = g / P, p = g % P;", "long rr = o;", "long base = xo;"]
    for d in range(nk - 1, 0, -1):
        body.append(f"base += (rr % kn{d}) * ks{d}; rr /= kn{d};")
    if nk:
        body.append("base += rr * ks0;")
    body += ["long j0 = p * chunk, j1 = min(R, j0 + chunk);"]
    jaddr = ["long q = j;", "long addr = base;"]
    for d in range(nr - 1, 0, -1):
        jaddr.append(f"addr += (q % rn{d}) * rs{d}; q /= rn{d};")
    if nr:
        jaddr.append("addr += q * rs0;")
    kahan = kind in ("sum", "mean") and fl
    if arg:
        body += [f"{t} acc = 0; long ai = -1;",
                 "for (long j = j0 + lid; j < j1; j += L) {", *jaddr,
                 f"    {t} v = {load_expr(x_dt, 'x[addr]')}; "
                 f"long vi = {'xi[addr]' if idx_in else 'j'};",
                 "    if (!arg_first(acc, ai, v, vi)) { acc = v; ai = vi; }", "}"]
    else:
        init, comb = _spec(kind, t, fl)[1:]
        body += [f"{acc_t} acc = {init};"]
        if kahan:
            body += [f"{acc_t} comp = 0;"]
        body += ["for (long j = j0 + lid; j < j1; j += L) {", *jaddr,
                 f"    {t} v = {load_expr(x_dt, 'x[addr]')};"]
        if kahan:
            body += [f"    {acc_t} y = v - comp; {acc_t} s = acc + y;",
                     "    comp = isinf(s) ? 0 : (s - acc) - y; acc = s;"]
        else:
            body += [f"    acc = {comb};"]
        body += ["}"]
    if tree:
        body += [f"__local {acc_t} sh[{LOCAL}];", "sh[lid] = acc;"]
        if arg:
            body += [f"__local long shi[{LOCAL}];", "shi[lid] = ai;"]
        body += ["barrier(CLK_LOCAL_MEM_FENCE);",
                 f"for (int s = {LOCAL // 2}; s > 0; s >>= 1) {{", "    if (lid < s) {"]
        if arg:
            body += ["        if (!arg_first(sh[lid], shi[lid], sh[lid + s], shi[lid + s])) {",
                     "            sh[lid] = sh[lid + s]; shi[lid] = shi[lid + s]; }"]
        else:
            comb2 = _spec(kind, t, fl)[2].replace("acc", "sh[lid]").replace("v", "sh[lid + s]")
            comb2 = comb2.replace("isnan(sh[lid + s])", "isnan(sh[lid + s])")
            body += [f"        sh[lid] = {comb2};"]
        body += ["    }", "    barrier(CLK_LOCAL_MEM_FENCE);", "}",
                 "if (lid != 0) return;", "acc = sh[0];"]
        if arg:
            body += ["ai = shi[0];"]
    if arg:
        body += [f"out[g] = {store_expr(out_dt, 'acc')}; outi[g] = ai;"]
    elif kind == "mean":
        body += [f"out[g] = {store_expr(out_dt, '(P == 1 ? acc * scale : acc)', acc_t)};"]
    else:
        body += [f"out[g] = {store_expr(out_dt, 'acc', acc_t)};"]
    helpers = _arg_helper(t, fl, kind == "argmax") if arg else ""
    lines = "\n    ".join(body)
    return f"{helpers}\n__kernel void red({', '.join(params)})\n{{\n    {lines}\n}}\n"


def _view_split(x: CLArray, dims: Sequence[int]) -> tuple[list[int], list[int], list[int],
                                                         list[int]]:
    kept = [d for d in range(x.ndim) if d not in dims]
    kdims, ks = collapse([x.shape[d] for d in kept], [[x.strides[d] for d in kept]])
    rdims, rs = collapse([x.shape[d] for d in dims], [[x.strides[d] for d in dims]])
    return kdims, ks[0], rdims, rs[0]


# Dense rows: a work-item walks its contiguous chunk with 16-wide vector loads and vector
# accumulators (no local memory, no barriers).  PoCL runs work-groups as loops on CPUs, so this
# is what reaches SIMD and memory bandwidth there; the tree kernel above serves the rest.
VEC = 16
_VEC_KINDS = ("sum", "mean", "prod", "max", "min")
_VEC_TYPES = ("float", "double", "char", "short", "int", "long", "uchar")


def _vec_ok(kind: str, x: CLArray, rdims: list[int], rs: list[int]) -> bool:
    return (kind in _VEC_KINDS and ctype(x.dtype) in _VEC_TYPES and x.dtype.kind != "b"
            and len(rdims) == 1 and rs[0] == 1 and rdims[0] >= 4 * VEC)


# var over dense rows: a work-item makes both passes over its row (the mean, then the squared
# deviations) with vector accumulators; the row is still in cache for the second pass.
_VAR_ROWS = """
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void varr(__global {t}* out, __global const {t}* x, long xo, long R, {t} inv_n, {t} inv_d
          {kparams})
{{
    long g = get_global_id(0), rr = g, base = xo;
    {decomp}
    __global const {t}* row = x + base;
    {v} acc = ({v})0, comp = ({v})0;
    long j = 0;
    for (; j + {V} <= R; j += {V}) {{
        {v} v = vload{V}(0, row + j);
        {step}
    }}
    {t} la[{V}], lc[{V}];
    vstore{V}(acc, 0, la); vstore{V}(comp, 0, lc);
    {t} m = 0;
    for (int l = 0; l < {V}; l++) m += la[l] - lc[l];
    for (; j < R; j++) m += row[j];
    m *= inv_n;
    acc = ({v})0; comp = ({v})0;
    for (j = 0; j + {V} <= R; j += {V}) {{
        {v} v = vload{V}(0, row + j) - m;
        v = v * v;
        {step}
    }}
    vstore{V}(acc, 0, la); vstore{V}(comp, 0, lc);
    {t} s2 = 0;
    for (int l = 0; l < {V}; l++) s2 += la[l] - lc[l];
    for (; j < R; j++) {{ {t} d = row[j] - m; s2 += d * d; }}
    out[g] = s2 * inv_d;
}}
"""


def var_rows(rt: Runtime, x: CLArray, dims: Sequence[int], keepdim: bool,
             correction: float) -> CLArray | None:
    """var over one dense reduced axis of a float/double ``x`` with many rows, else None."""
    kdims, ks, rdims, rs = _view_split(x, dims)
    t = ctype(x.dtype)
    if t not in ("float", "double") or not _vec_ok("sum", x, rdims, rs) or \
            math.prod(kdims) < 64:
        return None
    R = rdims[0]
    out_shape = tuple(1 if d in dims else n for d, n in enumerate(x.shape) if keepdim or
                      d not in dims)
    out = rt.empty(out_shape, x.dtype)
    nk = len(kdims)
    kparams = "".join(f", long ks{d}" for d in range(nk)) + "".join(
        f", long kn{d}" for d in range(1, nk))
    decomp = [f"base += (rr % kn{d}) * ks{d}; rr /= kn{d};" for d in range(nk - 1, 0, -1)]
    if nk:
        decomp.append("base += rr * ks0;")
    v = f"{t}{VEC}"
    src = _VAR_ROWS.format(t=t, v=v, V=VEC, kparams=kparams, decomp="\n    ".join(decomp),
                           step=_vec_step("sum", t, True))
    denom = max(R - correction, 0)
    np_t = _np_of(t)
    rt.launch(rt.kernel(src, "varr"), (math.prod(kdims),), (1,), out.buffer, x.buffer,
              np.int64(x.offset), np.int64(R), np_t(1.0 / R),
              np_t(1.0 / denom if denom else math.inf), *map(np.int64, ks),
              *map(np.int64, kdims[1:]))
    return out


def _vec_step(kind: str, t: str, fl: bool) -> str:
    """One step of a vector accumulator ``acc`` (and Kahan ``comp``) over a vector ``v``."""
    v = f"{t}{VEC}"
    if kind in ("sum", "mean"):
        # an infinite sum keeps a zero compensation (inf - inf would make it nan)
        return (f"{v} y = v - comp; {v} s = acc + y; "
                f"comp = select((s - acc) - y, ({v})(0), isinf(s)); acc = s;"
                if fl else "acc += v;")
    if kind == "prod":
        return "acc *= v;"
    if fl:  # nan sticks: once acc is nan no comparison replaces it
        return f"acc = select(acc, v, (v {'>' if kind == 'max' else '<'} acc) | isnan(v));"
    return f"acc = {kind}(acc, v);"


def _vec_source(kind: str, t: str, out_t: str, fl: bool, nk: int) -> str:
    v = f"{t}{VEC}"
    init, comb = _spec(kind, t, fl)[1:]
    kahan = kind in ("sum", "mean") and fl
    vstep = _vec_step(kind, t, fl)
    params = [f"__global {out_t}* out", f"__global const {t}* x", "long xo"]
    params += [f"long ks{d}" for d in range(nk)] + [f"long kn{d}" for d in range(1, nk)]
    params += ["long R", "long chunk", "long P", f"{t} scale"]
    decomp = [f"base += (rr % kn{d}) * ks{d}; rr /= kn{d};" for d in range(nk - 1, 0, -1)]
    if nk:
        decomp.append("base += rr * ks0;")
    scalar = (f"{{ {t} y = v - comp1; {t} s = acc1 + y; "
              f"comp1 = isinf(s) ? 0 : (s - acc1) - y; acc1 = s; }}"
              if kahan else f"acc1 = {comb.replace('acc', 'acc1')};")
    lanes = (f"for (int l = 0; l < {VEC}; l++) {{ {t} v = la[l]; {scalar} }}\n"
             f"    for (int l = 0; l < {VEC}; l++) {{ {t} v = -lc[l]; {scalar} }}"
             if kahan else f"for (int l = 0; l < {VEC}; l++) {{ {t} v = la[l]; {scalar} }}")
    store = "P == 1 ? acc1 * scale : acc1" if kind == "mean" else "acc1"
    dlines = "\n    ".join(decomp)
    return f"""
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void redv({', '.join(params)})
{{
    long g = get_global_id(0), o = g / P, p = g % P, rr = o, base = xo;
    {dlines}
    __global const {t}* row = x + base;
    long j = p * chunk, j1 = min(R, j + chunk);
    {v} acc = ({v})({init}), comp = ({v})0;
    for (; j + {VEC} <= j1; j += {VEC}) {{
        {v} v = vload{VEC}(0, row + j);
        {vstep}
    }}
    {t} la[{VEC}], lc[{VEC}];
    vstore{VEC}(acc, 0, la); vstore{VEC}(comp, 0, lc);
    {t} acc1 = {init}, comp1 = 0;
    {lanes}
    for (; j < j1; j++) {{ {t} v = row[j]; {scalar} }}
    out[g] = ({out_t})({store});
}}
"""


# Reduced axis outer, kept axis dense (column sums): a work-item owns 16 neighbouring outputs
# and walks the reduced axis with one vector load per step.
_COLS = """
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void redc(__global {out_t}* out, __global const {t}* x, long xo, long ncol, long R, long rs0,
          {t} scale {kparams})
{{
    long g = get_global_id(0), nblk = (ncol + {V} - 1) / {V};
    long ob = g / nblk, c0 = (g % nblk) * {V}, rr = ob, base = xo + c0;
    {decomp}
    __global const {t}* p = x + base;
    if (c0 + {V} <= ncol) {{
        {v} acc = ({v})({init}), comp = ({v})0;
        for (long j = 0; j < R; j++) {{
            {v} v = vload{V}(0, p + j * rs0);
            {vstep}
        }}
        {v} res = {vres};
        vstore{V}(res, 0, out + ob * ncol + c0);
        return;
    }}
    for (long l = 0; c0 + l < ncol; l++) {{
        {t} acc1 = {init}, comp1 = 0;
        for (long j = 0; j < R; j++) {{ {t} v = p[l + j * rs0]; {scalar} }}
        out[ob * ncol + c0 + l] = ({out_t})({sres});
    }}
}}
"""


def _cols_ok(kind: str, x: CLArray, kdims: list[int], ks: list[int], rdims: list[int],
             rs: list[int]) -> bool:
    return (kind in _VEC_KINDS and ctype(x.dtype) in _VEC_TYPES and x.dtype.kind != "b"
            and len(rdims) == 1 and bool(ks) and ks[-1] == 1 and kdims[-1] >= VEC)


def _launch_cols(rt: Runtime, kind: str, x: CLArray, kdims: list[int], ks: list[int], R: int,
                 rs0: int, out: CLArray, scale: float) -> None:
    t = ctype(x.dtype)
    v = f"{t}{VEC}"
    fl = is_float(x.dtype)
    init, comb = _spec(kind, t, fl)[1:]
    kahan = kind in ("sum", "mean") and fl
    vstep = _vec_step(kind, t, fl)
    scalar = (f"{{ {t} y = v - comp1; {t} s = acc1 + y; "
              f"comp1 = isinf(s) ? 0 : (s - acc1) - y; acc1 = s; }}"
              if kahan else f"acc1 = {comb.replace('acc', 'acc1')};")
    outer = kdims[:-1]
    nk = len(outer)
    kparams = "".join(f", long ks{d}, long kn{d}" for d in range(nk))
    decomp = "\n    ".join(f"base += (rr % kn{d}) * ks{d}; rr /= kn{d};"
                            for d in range(nk - 1, -1, -1))
    vres = "(acc - comp)" if kahan else "acc"
    if kind == "mean":
        vres, sres = f"{vres} * scale", "acc1 * scale"
    else:
        sres = "acc1"
    src = _COLS.format(out_t=ctype(out.dtype), t=t, v=v, V=VEC, kparams=kparams, decomp=decomp,
                       init=init, vstep=vstep, scalar=scalar, vres=vres, sres=sres)
    k = rt.kernel(src, "redc")
    ncol = kdims[-1]
    args: list[Any] = [out.buffer, x.buffer, np.int64(x.offset), np.int64(ncol), np.int64(R),
                       np.int64(rs0), _np_of(t)(scale if fl else 0)]
    for d in range(nk):
        args += [np.int64(ks[d]), np.int64(outer[d])]
    rt.launch(k, (math.prod(outer) * -(-ncol // VEC),), (1,), *args)


def _launch_vec(rt: Runtime, kind: str, x: CLArray, kdims: list[int], ks: list[int], R: int,
                out: CLArray, P: int, scale: float) -> None:
    t = ctype(x.dtype)
    src = _vec_source(kind, t, ctype(out.dtype), is_float(x.dtype), len(kdims))
    k = rt.kernel(src, "redv")
    nout = math.prod(kdims)
    chunk = -(-R // P)
    chunk = -(-chunk // VEC) * VEC  # chunks start on whole vectors
    rt.launch(k, (nout * P,), (1,), out.buffer, x.buffer, np.int64(x.offset),
              *map(np.int64, ks), *map(np.int64, kdims[1:]), np.int64(R), np.int64(chunk),
              np.int64(P), _np_of(t)(scale if t in ("float", "double") else 0))


# Arg-reductions over dense rows of float/double/int/long: per-lane best value and index in
# vectors (strict comparisons keep each lane's first occurrence; the first nan wins), then the
# lanes and the tail are combined with ``arg_first``.
_ARGV_INDEX = {"float": "int", "double": "long", "int": "int", "long": "long"}

_ARGV = """
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void argv(__global {st}* out, __global long* outi, __global const {st}* x, long xo,
          long R, long chunk, long P {kparams})
{{
    long g = get_global_id(0), o = g / P, p = g % P, rr = o, base = xo;
    {decomp}
    __global const {t}* row = x + base;
    long j = p * chunk, j1 = min(R, j + chunk);
    {t} best = 0; long bi = -1;
    if (j + {V} <= j1) {{
        {t}{V} acc = vload{V}(0, row + j);
        {it}{V} ai = ({it}{V})({lanes}) + ({it})j, step = ({it}{V})({V});
        {it}{V} vi = ai;
        for (j += {V}; j + {V} <= j1; j += {V}) {{
            {t}{V} v = vload{V}(0, row + j);
            vi += step;
            {it}{V} take = {take};
            acc = select(acc, v, take); ai = select(ai, vi, take);
        }}
        {t} la[{V}]; {it} li[{V}];
        vstore{V}(acc, 0, la); vstore{V}(ai, 0, li);
        for (int l = 0; l < {V}; l++)
            if (!arg_first(best, bi, la[l], li[l])) {{ best = la[l]; bi = li[l]; }}
    }}
    for (; j < j1; j++)
        if (!arg_first(best, bi, row[j], j)) {{ best = row[j]; bi = j; }}
    out[g] = best; outi[g] = bi;
}}
"""


def _argv_ok(kind: str, x: CLArray, rdims: list[int], rs: list[int]) -> bool:
    return (kind in ("argmax", "argmin") and ctype(x.dtype) in _ARGV_INDEX
            and len(rdims) == 1 and rs[0] == 1 and rdims[0] < (1 << 31))


def _launch_argv(rt: Runtime, kind: str, x: CLArray, kdims: list[int], ks: list[int], R: int,
                 out: CLArray, outi: CLArray, P: int) -> None:
    t = ctype(x.dtype)
    fl = is_float(x.dtype)
    cmp = ">" if kind == "argmax" else "<"
    take = f"(v {cmp} acc) | (isnan(v) & !isnan(acc))" if fl else f"v {cmp} acc"
    it = _ARGV_INDEX[t]
    if fl and t == "float":
        take = f"({take})"
    nk = len(kdims)
    kparams = "".join(f", long ks{d}" for d in range(nk)) + "".join(
        f", long kn{d}" for d in range(1, nk))
    decomp = [f"base += (rr % kn{d}) * ks{d}; rr /= kn{d};" for d in range(nk - 1, 0, -1)]
    if nk:
        decomp.append("base += rr * ks0;")
    src = _arg_helper(t, fl, kind == "argmax") + _ARGV.format(
        st=t, t=t, it=it, V=VEC, kparams=kparams, decomp="\n    ".join(decomp),
        lanes=", ".join(map(str, range(VEC))), take=take)
    k = rt.kernel(src, "argv")
    per = -(-R // P)
    chunk = -(-per // VEC) * VEC  # chunks start on whole vectors
    rt.launch(k, (math.prod(kdims) * P,), (1,), out.buffer, outi.buffer, x.buffer,
              np.int64(x.offset), np.int64(R), np.int64(chunk), np.int64(P),
              *map(np.int64, ks), *map(np.int64, kdims[1:]))


def _serial_ok(kind: str, rdims: list[int], rs: list[int]) -> bool:
    """Arg-reductions over dense rows: one work-item walks a contiguous chunk (no barriers)."""
    return kind in ("argmax", "argmin") and len(rdims) == 1 and rs[0] == 1


def _launch(rt: Runtime, kind: str, x: CLArray, kdims: list[int], ks: list[int],
            rdims: list[int], rs: list[int], out: CLArray, outi: CLArray | None,
            xi: CLArray | None, P: int, scale: float) -> None:
    t = compute_type(x.dtype)
    if outi is None and xi is None and _vec_ok(kind, x, rdims, rs):
        _launch_vec(rt, kind, x, kdims, ks, math.prod(rdims), out, P, scale)
        return
    if outi is not None and xi is None and _argv_ok(kind, x, rdims, rs):
        _launch_argv(rt, kind, x, kdims, ks, math.prod(rdims), out, outi, P)
        return
    if outi is None and xi is None and P == 1 and _cols_ok(kind, x, kdims, ks, rdims, rs):
        _launch_cols(rt, kind, x, kdims, ks, math.prod(rdims), rs[0], out, scale)
        return
    fl = is_float(x.dtype)
    arg = kind in ("argmax", "argmin")
    acc_t = t if arg else _spec(kind, t, fl)[0]
    nout = math.prod(kdims)
    R = math.prod(rdims)
    # a work-group per output when the lanes can read neighbouring elements of one row; a
    # work-item per output when neighbouring outputs are neighbours in memory (columns)
    inner_dense = bool(rs) and rs[-1] == 1 and (not ks or ks[-1] != 1)
    tree = P > 1 or (R >= LOCAL and inner_dense) or (nout < 128 and R >= 4 * LOCAL)
    if _serial_ok(kind, rdims, rs):
        tree = False  # each work-item walks its dense chunk in order
    chunk = -(-R // P) if R else 0
    src = _source(kind, x.dtype, acc_t, out.dtype, fl, len(kdims), len(rdims),
                  tree, arg, xi is not None)
    k = rt.kernel(src, "red")
    args: list[Any] = [out.buffer, x.buffer, np.int64(x.offset), *map(np.int64, ks),
                       *map(np.int64, kdims[1:]), *map(np.int64, rs), *map(np.int64, rdims[1:]),
                       np.int64(R), np.int64(chunk), np.int64(P), np.int64(nout),
                       _np_of(acc_t)(scale if acc_t in ("float", "double") else 0)]
    if arg:
        assert outi is not None
        args.append(outi.buffer)
    if xi is not None:
        args.append(xi.buffer)
    if tree:
        rt.launch(k, (nout * P * LOCAL,), (LOCAL,), *args)
    else:
        n = nout * P
        rt.launch(k, (-(-n // LOCAL) * LOCAL,), (LOCAL,), *args)


_NP = {"float": np.float32, "double": np.float64, "char": np.int8, "short": np.int16,
       "int": np.int32, "long": np.int64, "uchar": np.uint8}


def _np_of(t: str) -> Any:
    return _NP[t]


def reduce(rt: Runtime, kind: str, x: CLArray, dims: Sequence[int], keepdim: bool,
           scale: float = 1.0) -> CLArray | tuple[CLArray, CLArray]:
    """Reduce ``x`` over ``dims``; arg-reductions return (values, int64 indices)."""
    arg = kind in ("argmax", "argmin")
    out_shape = tuple(1 if d in dims else n for d, n in enumerate(x.shape) if keepdim or
                      d not in dims)
    kdims, ks, rdims, rs = _view_split(x, dims)
    nout, R = math.prod(kdims), math.prod(rdims)
    out_dt = BOOL if kind in ("any", "all") else x.dtype
    P = 1
    if _vec_ok(kind, x, rdims, rs) and not arg:
        if nout < 64:  # split long rows so both cores (or every compute unit) get chunks
            P = max(1, min(R // 32768, 64 // max(nout, 1)))
    elif _serial_ok(kind, rdims, rs):
        if nout < 64:
            P = max(1, min(R // 32768, 64 // max(nout, 1)))
    elif _cols_ok(kind, x, kdims, ks, rdims, rs) and not arg:
        pass  # one pass: every work-item owns 16 columns
    elif nout < 64 and R >= 16 * LOCAL * 8:
        P = max(1, min(-(-R // (LOCAL * 64)), 64 // max(nout, 1)))
    if P == 1:
        out = rt.empty(out_shape, out_dt)
        outi = rt.empty(out_shape, I64) if arg else None
        _launch(rt, kind, x, kdims, ks, rdims, rs, out, outi, None, 1, scale)
        return (out, outi) if arg else out  # type: ignore[return-value]  # outi set when arg
    acc_dt = out_dt if not arg else x.dtype
    if not arg and ctype(acc_dt) == "ushort":  # 16-bit float partials stay float
        acc_dt = np.dtype(np.float32)
    if kind in ("any", "all"):
        acc_dt = np.dtype(np.uint8)
    part = rt.empty((nout, P), acc_dt)
    parti = rt.empty((nout, P), I64) if arg else None
    _launch(rt, kind, x, kdims, ks, rdims, rs, part, parti, None, P, scale)
    out = rt.empty(out_shape, out_dt)
    outi = rt.empty(out_shape, I64) if arg else None
    _launch(rt, kind, part, [nout], [P], [P], [1], out, outi, parti, 1, scale)
    return (out, outi) if arg else out  # type: ignore[return-value]


# -- scans ------------------------------------------------------------------------------------

_SCAN = """
__kernel void scan(__global {t}* out, __global const {t}* x, long xo, long n, long xs, long os,
                   {params}, long total)
{{
    long g = get_global_id(0);
    if (g >= total) return;
    long r = g, xa = xo, oa = 0;
    {decomp}
    {c} acc = {init};
    for (long j = 0; j < n; j++) {{
        acc = acc {op} {load};
        out[oa + j * os] = {store};
    }}
}}
"""


def scan(rt: Runtime, x: CLArray, dim: int, op: str) -> CLArray:
    if x.ndim == 0:
        return run_map(rt, "a", [x])
    out = rt.empty(x.shape, x.dtype)
    ostr = contiguous_strides(x.shape)
    others = [d for d in range(x.ndim) if d != dim]
    params, decomp = [], []
    for j in range(len(others)):
        params += [f"long n{j}", f"long xs{j}", f"long os{j}"]
        decomp.append(f"xa += (r % n{j}) * xs{j}; oa += (r % n{j}) * os{j}; r /= n{j};")
    t = ctype(x.dtype)
    src = _SCAN.format(t=t, c=compute_type(x.dtype), load=load_expr(x.dtype, "x[xa + j * xs]"),
                       store=store_expr(x.dtype, "acc"), params=", ".join(params) or "long unused",
                       decomp="\n    ".join(decomp), init="0" if op == "+" else "1", op=op)
    k = rt.kernel(src, "scan")
    args: list[Any] = [out.buffer, x.buffer, np.int64(x.offset), np.int64(x.shape[dim]),
                       np.int64(x.strides[dim]), np.int64(ostr[dim])]
    for d in reversed(others):
        args += [np.int64(x.shape[d]), np.int64(x.strides[d]), np.int64(ostr[d])]
    if not others:
        args.append(np.int64(0))
    rows = math.prod(x.shape[d] for d in others)
    rt.launch1d(k, rows, *args)
    return out


def kernels(rt: Runtime) -> dict[Any, Any]:
    def plain(kind: str) -> Any:
        def kernel(x: CLArray, dims: tuple[int, ...] = (), keepdim: bool = False) -> CLArray:
            n = math.prod(x.shape[d] for d in dims)
            return reduce(rt, kind, x, dims, keepdim,  # type: ignore[return-value]
                          1.0 / n if n else math.inf)
        return kernel

    def var(x: CLArray, dims: tuple[int, ...] = (), keepdim: bool = False,
            correction: float = 1) -> CLArray:
        fast = var_rows(rt, x, dims, keepdim, correction)
        if fast is not None:
            return fast
        n = math.prod(x.shape[d] for d in dims)
        mean = reduce(rt, "mean", x, dims, True, 1.0 / n if n else math.inf)
        dev = run_map(rt, "(a - b) * (a - b)", [x, mean])  # type: ignore[list-item]
        denom = max(n - correction, 0)
        return reduce(rt, "mean", dev, dims, keepdim,  # type: ignore[return-value]
                      1.0 / denom if denom else math.inf)

    def arg(kind: str) -> Any:
        def kernel(x: CLArray, dim: int | None = None, keepdim: bool = False) -> CLArray:
            if dim is None:
                _, idx = reduce(rt, kind, x, tuple(range(x.ndim)), False)  # type: ignore[misc]
                if keepdim:
                    return idx.view((1,) * x.ndim, (1,) * x.ndim, idx.offset)
                return idx
            _, idx = reduce(rt, kind, x, (dim,), keepdim)  # type: ignore[misc]
            return idx
        return kernel

    return {
        rd.sum: plain("sum"), rd.prod: plain("prod"), rd.mean: plain("mean"),
        rd.max: plain("max"), rd.min: plain("min"), rd.any: plain("any"), rd.all: plain("all"),
        rd.var: var, rd.argmax: arg("argmax"), rd.argmin: arg("argmin"),
        rd.cumsum: lambda x, dim=0: scan(rt, x, dim, "+"),
        rd.cumprod: lambda x, dim=0: scan(rt, x, dim, "*"),
    }
