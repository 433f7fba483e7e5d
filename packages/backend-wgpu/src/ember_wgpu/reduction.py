"""Reductions over any axes, arg-reductions and scans.

The input is viewed as ``[kept..., reduced...]`` (strides only, no copy) with each group of
axes merged where the strides allow.  Each output is one work-group of `lanes_for` its row's
length (`GROUP`; `WIDE_ROWS` for rows of four elements a lane or more where wide trees are
on): lane ``l`` combines elements ``l, l + lanes, ...`` of its row, then the lanes combine in
a workgroup-memory tree.  Rows longer than `SPLIT_MIN` with few outputs are first cut into
chunks, each chunk a work-group, and a second pass combines the chunks.  The combining step of
each reduction is an elementwise op of the kernel IR (``add``, ``mul``, the nan-propagating
``maximum``/``minimum``, ``logical_or``/``logical_and``), rendered like every elementwise op,
so a reduction's semantics are the elementwise op's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.backend import ir
from ember.ops import reduction as rd

from .render import const, prelude, render
from .runtime import GROUP, MAXD, Runtime, WGArray
from .strided import (
    collapse,
    header,
    is_float,
    load,
    run_map,
    scalar_words,
    shared_get,
    shared_put,
    shared_type,
    store,
    wgsl_compute,
    wgsl_storage,
)

__all__ = ["WIDE_ROWS", "kernels", "lanes_for", "reduce"]

I64 = np.dtype(np.int64)
BOOL = np.dtype(np.bool_)
#: the IR op combining two partial results, per reduction
COMBINE = {"sum": "add", "mean": "add", "prod": "mul", "max": "maximum", "min": "minimum",
           "any": "logical_or", "all": "logical_and"}
#: rows from this long with fewer outputs than `SPLIT_OUTPUTS` are reduced in two passes
SPLIT_MIN = 1 << 14
SPLIT_OUTPUTS = 64
#: this many outputs with rows this short: one invocation per output, no tree
FLAT_OUTPUTS = 256
FLAT_ROW = 512
#: the lanes of a work-group taking a long row where wide trees are on: on an H100 through
#: Vulkan, elementwise kernels in work-groups of 64 kept too few loads in flight to pass ~840
#: GB/s (docs/webgpu.md, "Where the bandwidth went"); the reductions at 64 lanes ran a row
#: softmax at 932 GB/s and an RMS norm at 1,220 there
WIDE_ROWS = 256
#: whether GPUs take wide trees: off until timed on one (`wgpu_bench.py --only rows` with this
#: on; correctness is tested on lavapipe with `WIDE_ON_CPU`)
WIDE_ON_GPU = False
#: whether software adapters (lavapipe) take them: there a barrier of 256 lanes costs more
#: than the lanes gain (rows reduced at half the speed); tests turn it on
WIDE_ON_CPU = False


def lanes_for(work: int, software: bool) -> int:
    """The work-group size of a tree over rows (or chunks) of ``work`` elements."""
    wide = work >= 4 * WIDE_ROWS and (WIDE_ON_CPU if software else WIDE_ON_GPU)
    return WIDE_ROWS if wide else GROUP


def _identity(kind: str, dt: np.dtype[Any]) -> str:
    ct = ir.compute_dtype(dt.name)
    if kind in ("any", "all"):
        return "false" if kind == "any" else "true"
    if kind in ("sum", "mean"):
        return const(0, ct)
    if kind == "prod":
        return const(1, ct)
    if is_float(dt):
        return const(-math.inf if kind == "max" else math.inf, ct)
    info = np.iinfo(dt)
    return const(info.min if kind == "max" else info.max, ct)


def _combine_fn(kind: str, dt: np.dtype[Any]) -> str:
    """``fn comb(a, b)``: the IR op of ``kind`` on two values of ``dt``'s compute type."""
    name = np.dtype(np.bool_).name if kind in ("any", "all") else dt.name
    root = ir.expand(COMBINE[kind], [name, name])
    r = render(root, ["a", "b"])
    t = "bool" if kind in ("any", "all") else wgsl_compute(dt)
    body = "".join(f"    {line}\n" for line in r.lines)
    return f"fn comb(a: {t}, b: {t}) -> {t} {{\n{body}    return {r.expr};\n}}\n"


def _walk(var: str, count: str, shape_at: int, stride_at: int, n: int, out: str) -> list[str]:
    """WGSL adding to ``out`` the offset of linear index ``var`` over ``n`` axes whose sizes
    and strides are parameter words (axes innermost last)."""
    return [f"    {{ var q = {var};",
            f"      for (var d = {count} - 1; d >= 0; d = d - 1) {{",
            f"        let n = P[{shape_at} + d]; {out} = {out} + (q % n) * P[{stride_at} + d];"
            " q = q / n; }", "    }"] if n else []


# parameter words: [nout, R, nk, nr, kshape, kstride, rshape, rstride, xoff, chunk, scale]
_K, _KS, _R, _RS = 4, 4 + MAXD, 4 + 2 * MAXD, 4 + 3 * MAXD
_XOFF, _CHUNK, _SCALE = 4 + 4 * MAXD, 5 + 4 * MAXD, 6 + 4 * MAXD


def _source(kind: str, x_dt: np.dtype[Any], out_dt: np.dtype[Any], arg: bool,
            partial_in: bool, tree: bool = True, lanes: int = GROUP) -> str:
    """One work-group of ``lanes`` per (output, chunk): lanes stride over the chunk, then a
    tree; or, with ``tree`` off, one invocation per output walking its row alone (no barrier:
    many short rows).

    ``partial_in``: the input holds (value, index) pairs of a first pass (arg-reductions)."""
    ct = "bool" if kind in ("any", "all") else wgsl_compute(x_dt)
    reads = [wgsl_storage(x_dt)] + (["i64"] if partial_in else [])
    # arg-reductions write (value, index) of each output, the value for a second pass
    writes = [wgsl_storage(x_dt), "i64"] if arg else [wgsl_storage(out_dt)]
    lines = [header([*reads, *writes], len(reads))]
    if tree:
        lines.append(f"var<workgroup> sh: array<{shared_type(ct)}, {lanes}>;")
    if arg and tree:
        lines.append(f"var<workgroup> shi: array<i64, {lanes}>;")
    if arg:
        better = ">" if kind == "argmax" else "<"
        nan = ("    let an = isnan_(a); let bn = isnan_(b);\n"
               "    if (an || bn) { return select(an, ia <= ib, an && bn); }\n"
               if ct == "f32" else "")
        lines.append(f"""fn first(a: {ct}, ia: i64, b: {ct}, ib: i64) -> bool {{
    if (ib < 0li) {{ return true; }}
    if (ia < 0li) {{ return false; }}
{nan}    if (a {better} b) {{ return true; }}
    if (a == b) {{ return ia <= ib; }}
    return false;
}}""")
    else:
        lines.append(_combine_fn(kind, x_dt))
    wo, ro = len(reads), 0
    if tree:
        body = [f"@compute @workgroup_size({lanes})",
                "fn main(@builtin(workgroup_id) wg: vec3<u32>, "
                "@builtin(local_invocation_index) lid: u32, "
                "@builtin(num_workgroups) nwg: vec3<u32>) {",
                "    let g = i32(wg.x + wg.y * nwg.x);"]
    else:
        body = [f"@compute @workgroup_size({GROUP})",
                "fn main(@builtin(global_invocation_id) gid: vec3<u32>, "
                "@builtin(num_workgroups) nwg: vec3<u32>) {",
                f"    let g = i32(gid.x + gid.y * nwg.x * {GROUP}u);", "    let lid = 0u;"]
    body += [
            f"    let chunk = P[{_CHUNK}];",
            "    let R = P[1];",
            "    let parts = (R + chunk - 1) / max(chunk, 1);",
            "    let o = g / max(parts, 1); let p = g % max(parts, 1);",
            "    let live = o < P[0];",
            f"    var base = P[{_XOFF}];"]
    body += _walk("select(0, o, live)", "P[2]", _K, _KS, 1, "base")
    body += ["    let j0 = p * chunk; let j1 = min(R, j0 + chunk);"]
    if arg:
        zero = "false" if ct == "bool" else const(0, ir.compute_dtype(x_dt.name))
        body += [f"    var acc: {ct} = {zero};", "    var ai: i64 = -1li;"]
    else:
        body += [f"    var acc: {ct} = {_identity(kind, x_dt)};"]
    body += [f"    for (var j = j0 + i32(lid); j < j1; j = j + {lanes if tree else 1}) {{",
             "        var addr = base;"]
    body += ["    " + s for s in _walk("j", "P[3]", _R, _RS, 1, "addr")]
    v = load(x_dt, f"b{ro}[addr]")
    if kind in ("any", "all") and x_dt != BOOL:
        v = f"(!({v} == {const(0, ir.compute_dtype(x_dt.name))}))"  # nan counts as true
    if arg:
        vi = f"b{ro + 1}[addr]" if partial_in else "i64(j)"
        body += [f"        let v = {v}; let vi = {vi};",
                 "        if (!first(acc, ai, v, vi)) { acc = v; ai = vi; }", "    }"]
        if not tree:
            body += ["    if (live) {",
                     f"        b{wo}[g] = {store(x_dt, 'acc')}; b{wo + 1}[g] = ai; }}", "}"]
            return _finish(lines, body)
        get = [shared_get(ct, f"sh[{i}]") for i in ("lid", "lid + s", "0")]
        body += [f"    sh[lid] = {shared_put(ct, 'acc')}; shi[lid] = ai;",
                 "    workgroupBarrier();",
                 f"    for (var s = {lanes // 2}u; s > 0u; s = s >> 1u) {{",
                 f"        if (lid < s && !first({get[0]}, shi[lid], {get[1]}, shi[lid + s])) {{",
                 "            sh[lid] = sh[lid + s]; shi[lid] = shi[lid + s]; }",
                 "        workgroupBarrier();", "    }",
                 "    if (lid == 0u && live) {",
                 f"        b{wo}[g] = {store(x_dt, get[2])}; b{wo + 1}[g] = shi[0]; }}"]
    else:
        body += [f"        acc = comb(acc, {v});", "    }"]
        if not tree:
            res = f"(acc * bitcast<f32>(P[{_SCALE}]))" if kind == "mean" else "acc"
            body += ["    if (live) {", f"        b{wo}[g] = {store(out_dt, res)};", "    }", "}"]
            return _finish(lines, body)
        get = [shared_get(ct, f"sh[{i}]") for i in ("lid", "lid + s", "0")]
        merged = shared_put(ct, f"comb({get[0]}, {get[1]})")
        body += [f"    sh[lid] = {shared_put(ct, 'acc')};", "    workgroupBarrier();",
                 f"    for (var s = {lanes // 2}u; s > 0u; s = s >> 1u) {{",
                 f"        if (lid < s) {{ sh[lid] = {merged}; }}",
                 "        workgroupBarrier();", "    }"]
        res = get[2]
        if kind == "mean":
            res = f"({res} * bitcast<f32>(P[{_SCALE}]))"
        body += ["    if (lid == 0u && live) {", f"        b{wo}[g] = {store(out_dt, res)};",
                 "    }"]
    body.append("}")
    return _finish(lines, body)


def _finish(lines: list[str], body: list[str]) -> str:
    main = "\n".join(body) + "\n"
    src = "\n".join(lines) + "\n"
    return src + prelude(src + main) + main


def _axes(x: WGArray, dims: Sequence[int]) -> tuple[list[int], list[int], list[int], list[int]]:
    kept = [d for d in range(x.ndim) if d not in dims]
    kd, ks = collapse([x.shape[d] for d in kept], [[x.strides[d] for d in kept]])
    rdims, rs = collapse([x.shape[d] for d in dims], [[x.strides[d] for d in dims]])
    return kd, ks[0], rdims, rs[0]


def _pad(v: Sequence[int]) -> list[int]:
    return [*v, *([0] * (MAXD - len(v)))]


def _launch(rt: Runtime, kind: str, x: WGArray, dims: Sequence[int], out_dt: np.dtype[Any],
            arg: bool, index: WGArray | None = None) -> WGArray | tuple[WGArray, WGArray]:
    kd, ks, rdims, rs = _axes(x, dims)
    if len(kd) > MAXD or len(rdims) > MAXD:
        raise NotImplementedError(f"wgpu: reductions walk at most {MAXD} axes of each kind")
    nout, R = math.prod(kd), math.prod(rdims)
    chunk = max(R, 1)
    if R >= SPLIT_MIN and nout < SPLIT_OUTPUTS and kind not in ("mean",):
        chunk = max(GROUP * 16, -(-R // 256))
    parts = -(-R // chunk) if R else 1
    groups = nout * parts
    scale = 1.0 / R if R else math.nan
    words = [nout, R, len(kd), len(rdims), *_pad(kd), *_pad(ks), *_pad(rdims), *_pad(rs),
             x.offset, chunk, *scalar_words("float32", scale)]
    tree = not (parts == 1 and nout >= FLAT_OUTPUTS and R <= FLAT_ROW)
    lanes = lanes_for(min(R, chunk), rt.software)
    src = _source(kind, x.dtype, out_dt, arg, index is not None, tree, lanes)
    if arg:
        outs = [rt.empty((groups,), x.dtype), rt.empty((groups,), I64)]
    else:
        # a first pass keeps partial results in the input's dtype (bools for any/all)
        mid = BOOL if kind in ("any", "all") else x.dtype
        outs = [rt.empty((groups,), out_dt if parts == 1 else mid)]
    if nout == 0:
        return (outs[0], outs[1]) if arg else outs[0]
    reads = [x] + ([index] if index is not None else [])
    if not tree:
        rt.dispatch(src, reads, outs, words, nout)
        return (outs[0], outs[1]) if arg else outs[0]
    gx, gy = groups, 1
    if groups > rt.max_groups:
        gy = -(-groups // rt.max_groups)
        gx = -(-groups // gy)
    rt.record(src, reads, outs, words, (gx, gy, 1))
    if parts > 1:  # combine the chunks of each output: [nout, parts] over axis 1
        if arg:
            v = outs[0].view((nout, parts), (parts, 1), 0)
            ix = outs[1].view((nout, parts), (parts, 1), 0)
            return _launch(rt, kind, v, (1,), out_dt, True, ix)
        part = outs[0].view((nout, parts), (parts, 1), 0)
        return _launch(rt, kind, part, (1,), out_dt, False)
    return (outs[0], outs[1]) if arg else outs[0]


def reduce(rt: Runtime, kind: str, x: WGArray, dims: Sequence[int], keepdim: bool,
           out_dt: np.dtype[Any] | None = None) -> WGArray:
    """``kind`` (sum, prod, mean, max, min, any, all) of ``x`` over ``dims``."""
    dims = tuple(sorted(dims))
    out_dt = np.dtype(out_dt) if out_dt is not None else (
        BOOL if kind in ("any", "all") else x.dtype)
    shape = tuple(1 if d in dims else n for d, n in enumerate(x.shape)) if keepdim else \
        tuple(n for d, n in enumerate(x.shape) if d not in dims)
    res = _launch(rt, kind, x, dims, out_dt, False)
    assert isinstance(res, WGArray)
    return res.view(shape, _dense(shape), 0)


def _dense(shape: Sequence[int]) -> tuple[int, ...]:
    from .runtime import contiguous_strides

    return contiguous_strides(shape)


def argreduce(rt: Runtime, kind: str, x: WGArray, dim: int | None, keepdim: bool) -> WGArray:
    if dim is None:
        dims: tuple[int, ...] = tuple(range(x.ndim))
        shape: tuple[int, ...] = (1,) * x.ndim if keepdim else ()
    else:
        dims = (dim,)
        shape = tuple(1 if d == dim else n for d, n in enumerate(x.shape)) if keepdim else \
            tuple(n for d, n in enumerate(x.shape) if d != dim)
    if x.ndim == 0:
        return run_map(rt, "0li", [], shape=(), dtype=I64)
    res = _launch(rt, kind, x, dims, I64, True)
    assert isinstance(res, tuple)
    return res[1].view(shape, _dense(shape), 0)


def var(rt: Runtime, x: WGArray, dims: Sequence[int], keepdim: bool, correction: float) -> WGArray:
    """Two passes: the mean, then the sum of squared deviations, over ``n - correction``."""
    n = math.prod(x.shape[d] for d in dims)
    mean = reduce(rt, "mean", x, dims, True)
    dev = run_map(rt, "(a - b) * (a - b)", [x, mean], dtype=x.dtype)
    ss = reduce(rt, "sum", dev, dims, keepdim)
    div = n - correction
    scale = 1.0 / div if div > 0 else math.inf
    return run_map(rt, "a * s0", [ss], scalars=[("float32", scale)])


def scan(rt: Runtime, kind: str, x: WGArray, dim: int) -> WGArray:
    """cumsum/cumprod along ``dim``: one invocation per line walks it in order."""
    from .runtime import contiguous_strides

    out = rt.empty(x.shape, x.dtype)
    if x.size == 0:
        return out
    if x.ndim == 0:
        return run_map(rt, "a", [x])
    n = x.shape[dim]
    lines = x.size // n
    others = [d for d in range(x.ndim) if d != dim]
    ostr = contiguous_strides(x.shape)
    od, sts = collapse([x.shape[d] for d in others], [[x.strides[d] for d in others],
                                                      [ostr[d] for d in others]])
    ct = wgsl_compute(x.dtype)
    op = "+" if kind == "cumsum" else "*"
    ident = const(0 if kind == "cumsum" else 1, ir.compute_dtype(x.dtype.name))
    src = (header([wgsl_storage(x.dtype), wgsl_storage(x.dtype)], 1) +
           "\n@compute @workgroup_size(64)\n"
           "fn main(@builtin(global_invocation_id) gid: vec3<u32>, "
           "@builtin(num_workgroups) nwg: vec3<u32>) {\n"
           "    let i = i32(gid.x + gid.y * nwg.x * 64u);\n"
           "    if (i >= P[0]) { return; }\n"
           "    var xo = P[2]; var oo = 0;\n"
           "    { var q = i; for (var d = P[1] - 1; d >= 0; d = d - 1) {\n"
           f"        let n = P[{5} + d]; let k = q % n; q = q / n;\n"
           f"        xo = xo + k * P[{5 + MAXD} + d]; oo = oo + k * P[{5 + 2 * MAXD} + d]; }} }}\n"
           f"    var acc: {ct} = {ident};\n"
           "    for (var j = 0; j < P[3]; j = j + 1) {\n"
           f"        acc = acc {op} {load(x.dtype, 'b0[xo + j * P[4]]')};\n"
           f"        b1[oo + j * {ostr[dim]}] = {store(x.dtype, 'acc')};\n"
           "    }\n}\n")
    words = [lines, len(od), x.offset, n, x.strides[dim], *_pad(od), *_pad(sts[0]),
             *_pad(sts[1])]
    rt.dispatch(src, [x], [out], words, lines)
    return out


def kernels(rt: Runtime) -> dict[Any, Any]:
    def plain(kind: str) -> Any:
        def kernel(x: WGArray, dims: Sequence[int] = (), keepdim: bool = False) -> WGArray:
            return reduce(rt, kind, x, dims, keepdim)

        kernel.__name__ = kind
        return kernel

    def arg(kind: str) -> Any:
        def kernel(x: WGArray, dim: int | None = None, keepdim: bool = False) -> WGArray:
            return argreduce(rt, kind, x, dim, keepdim)

        kernel.__name__ = kind
        return kernel

    return {
        rd.sum: plain("sum"), rd.prod: plain("prod"), rd.mean: plain("mean"),
        rd.max: plain("max"), rd.min: plain("min"), rd.any: plain("any"),
        rd.all: plain("all"), rd.argmax: arg("argmax"), rd.argmin: arg("argmin"),
        rd.var: lambda x, dims=(), keepdim=False, correction=1: var(rt, x, dims, keepdim,
                                                                    correction),
        rd.cumsum: lambda x, dim=0: scan(rt, "cumsum", x, dim),
        rd.cumprod: lambda x, dim=0: scan(rt, "cumprod", x, dim),
    }
