"""Batched, broadcasting matmul: a tiled kernel with workgroup memory.

A work-group of 16x16 invocations computes a 64x64 tile of the output, each invocation a 4x4
block in registers; the K axis goes by steps of 16 through two workgroup-memory tiles (A as
``[k][m]``, B as ``[k][n]``) that the 256 invocations fill together.  Operands are read
through their strides (transposed and broadcast views cost no copy); batch axes are walked
like an elementwise kernel's, one ``z`` work-group row per output matrix.  Edges are masked
on load (zeros) and store.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember.ops import linalg as la

from .render import const
from .runtime import MAXD, Runtime, WGArray
from .strided import header, load, store, wgsl_compute, wgsl_storage

__all__ = ["kernels", "matmul"]

TILE = 64
STEP = 16

# parameter words
_BN, _BA, _BB = 4, 4 + MAXD, 4 + 2 * MAXD
_AO = 4 + 3 * MAXD  # a offset, row stride, column stride, then b's three


def _source(a_dt: np.dtype[Any], b_dt: np.dtype[Any], out_dt: np.dtype[Any]) -> str:
    ct = wgsl_compute(out_dt)
    zero = const(0, {"f32": "float32", "i32": "int32", "i64": "int64", "u32": "uint32"}[ct])
    ao, bo = _AO, _AO + 3
    return header([wgsl_storage(a_dt), wgsl_storage(b_dt), wgsl_storage(out_dt)], 2) + f"""
var<workgroup> As: array<{ct}, {TILE * STEP}>;
var<workgroup> Bs: array<{ct}, {TILE * STEP}>;

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {{
    let M = P[0]; let N = P[1]; let K = P[2];
    let z = i32(wg.z);
    var ao = P[{ao}]; var bo = P[{bo}];
    {{ var q = z; for (var d = P[3] - 1; d >= 0; d = d - 1) {{
        let n = P[{_BN} + d]; let k = q % n; q = q / n;
        ao = ao + k * P[{_BA} + d]; bo = bo + k * P[{_BB} + d]; }} }}
    let ars = P[{ao + 1}]; let acs = P[{ao + 2}]; let brs = P[{bo + 1}]; let bcs = P[{bo + 2}];
    let m0 = i32(wg.y) * {TILE}; let n0 = i32(wg.x) * {TILE};
    let tx = i32(lid.x); let ty = i32(lid.y); let t = ty * 16 + tx;
    var acc: array<{ct}, 16>;
    for (var r = 0; r < 16; r = r + 1) {{ acc[r] = {zero}; }}
    for (var k0 = 0; k0 < K; k0 = k0 + {STEP}) {{
        for (var r = 0; r < {TILE * STEP // 256}; r = r + 1) {{
            let e = t + r * 256;
            let am = e / {STEP}; let ak = e % {STEP};
            var av = {zero};
            if (m0 + am < M && k0 + ak < K) {{
                av = {load(a_dt, "b0[ao + (m0 + am) * ars + (k0 + ak) * acs]")};
            }}
            As[ak * {TILE} + am] = av;
            let bk = e / {TILE}; let bn = e % {TILE};
            var bv = {zero};
            if (k0 + bk < K && n0 + bn < N) {{
                bv = {load(b_dt, "b1[bo + (k0 + bk) * brs + (n0 + bn) * bcs]")};
            }}
            Bs[bk * {TILE} + bn] = bv;
        }}
        workgroupBarrier();
        for (var k = 0; k < {STEP}; k = k + 1) {{
            let a0 = As[k * {TILE} + ty * 4]; let a1 = As[k * {TILE} + ty * 4 + 1];
            let a2 = As[k * {TILE} + ty * 4 + 2]; let a3 = As[k * {TILE} + ty * 4 + 3];
            for (var j = 0; j < 4; j = j + 1) {{
                let bv = Bs[k * {TILE} + tx * 4 + j];
                acc[j] = acc[j] + a0 * bv; acc[4 + j] = acc[4 + j] + a1 * bv;
                acc[8 + j] = acc[8 + j] + a2 * bv; acc[12 + j] = acc[12 + j] + a3 * bv;
            }}
        }}
        workgroupBarrier();
    }}
    for (var i = 0; i < 4; i = i + 1) {{
        for (var j = 0; j < 4; j = j + 1) {{
            let gm = m0 + ty * 4 + i; let gn = n0 + tx * 4 + j;
            if (gm < M && gn < N) {{
                b2[(z * M + gm) * N + gn] = {store(out_dt, "acc[i * 4 + j]")};
            }}
        }}
    }}
}}
"""


def _simple_source(a_dt: np.dtype[Any], b_dt: np.dtype[Any], out_dt: np.dtype[Any]) -> str:
    """One invocation per output element walking K: no workgroup memory and no barriers (for
    narrow outputs, where a 64x64 tile would idle most of its invocations, and on software
    adapters, where a barrier costs more than the loads it saves)."""
    ct = wgsl_compute(out_dt)
    zero = const(0, {"f32": "float32", "i32": "int32", "i64": "int64", "u32": "uint32"}[ct])
    ao, bo = _AO, _AO + 3
    return header([wgsl_storage(a_dt), wgsl_storage(b_dt), wgsl_storage(out_dt)], 2) + f"""
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let i = i32(gid.x + gid.y * nwg.x * 64u);
    let M = P[0]; let N = P[1]; let K = P[2];
    if (i >= P[{_AO + 6}]) {{ return; }}
    let gn = i % N; let gm = (i / N) % M; let z = i / (M * N);
    var ao = P[{ao}]; var bo = P[{bo}];
    {{ var q = z; for (var d = P[3] - 1; d >= 0; d = d - 1) {{
        let n = P[{_BN} + d]; let k = q % n; q = q / n;
        ao = ao + k * P[{_BA} + d]; bo = bo + k * P[{_BB} + d]; }} }}
    let ars = P[{ao + 1}]; let acs = P[{ao + 2}]; let brs = P[{bo + 1}]; let bcs = P[{bo + 2}];
    var acc = {zero};
    var pa = ao + gm * ars; var pb = bo + gn * bcs;
    for (var k = 0; k < K; k = k + 1) {{
        acc = acc + {load(a_dt, "b0[pa]")} * {load(b_dt, "b1[pb]")};
        pa = pa + acs; pb = pb + brs;
    }}
    b2[i] = {store(out_dt, "acc")};
}}
"""


#: outputs narrower than this (rows or columns) take the simple kernel
NARROW = 32

_SOURCES: dict[tuple[Any, ...], str] = {}


def matmul(rt: Runtime, a: WGArray, b: WGArray) -> WGArray:
    M, K = a.shape[-2:]
    N = b.shape[-1]
    batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    out = rt.empty((*batch, M, N), a.dtype)
    nb = math.prod(batch)
    if out.size == 0:
        return out
    if K == 0:
        from .strided import run_map

        return run_map(rt, "s0", [], out=out, scalars=[(_ir(a.dtype), 0)])

    def bstrides(x: WGArray) -> list[int]:
        lead = len(batch) - (x.ndim - 2)
        st = [0] * lead + [0 if n == 1 else s for n, s in zip(x.shape[:-2], x.strides[:-2],
                                                              strict=True)]
        return st

    dims = [n for n in batch if n != 1]
    sa = [s for n, s in zip(batch, bstrides(a), strict=True) if n != 1]
    sb = [s for n, s in zip(batch, bstrides(b), strict=True) if n != 1]
    if len(dims) > MAXD:
        raise NotImplementedError(f"wgpu: matmul walks at most {MAXD} batch axes")

    def pad(v: list[int]) -> list[int]:
        return [*v, *([0] * (MAXD - len(v)))]

    words = [M, N, K, len(dims), *pad(dims), *pad(sa), *pad(sb),
             a.offset, a.strides[-2], a.strides[-1], b.offset, b.strides[-2], b.strides[-1],
             out.size]
    simple = min(M, N) < NARROW
    key = (a.dtype, b.dtype, out.dtype, simple)
    src = _SOURCES.get(key)
    if src is None:
        make = _simple_source if simple else _source
        src = _SOURCES[key] = make(a.dtype, b.dtype, out.dtype)
    if simple:
        rt.dispatch(src, [a, b], [out], words, out.size)
        return out
    groups = (-(-N // TILE), -(-M // TILE), nb)
    if nb > rt.max_groups:
        raise NotImplementedError(f"wgpu: matmul of more than {rt.max_groups} matrices at once")
    rt.record(src, [a, b], [out], words, groups)
    return out


def _ir(dt: np.dtype[Any]) -> str:
    from ember.backend import ir

    return ir.compute_dtype(dt.name)


def kernels(rt: Runtime) -> dict[Any, Any]:
    return {la.matmul: lambda a, b: matmul(rt, a, b)}
