"""Batched, broadcasting matmul: tiled kernels with workgroup memory.

Three kernels, chosen by `path`:

- ``tile128`` (float outputs at least 128 wide both ways): a work-group of 16x16 invocations
  computes a 128x128 tile, each invocation an 8x8 block held in sixteen ``vec4<f32>``
  registers (rows ``4ty..4ty+3`` and ``64+4ty..``, columns likewise, so the workgroup-memory
  reads of a step are four ``vec4`` loads for 64 multiply-adds); K goes by steps of 8 through
  two workgroup-memory tiles of ``vec4`` (A as ``[k][m]``, B as ``[k][n]``), each invocation
  filling one ``vec4`` of each, loaded from memory while the previous step's products run.
  The source is generated fully unrolled, so no driver has to prove an accumulator index
  constant to keep it in registers.
- ``tile64``: a 64x64 tile per 16x16 work-group, each invocation a 4x4 block, K by steps of
  16 (integers, and float outputs narrower than 128).
- ``simple``: one invocation per output walking K, no workgroup memory and no barriers (for
  outputs narrower than `NARROW`, where a tile would idle most of its invocations, and on
  software adapters, where a barrier costs more than the loads it saves).

16-bit floats are loaded into f32 and accumulate in f32.  Operands are read through their
strides (transposed and broadcast views cost no copy); batch axes are walked like an
elementwise kernel's, one ``z`` work-group row per output matrix.  Edges are masked on load
(zeros) and store.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ember.ops import linalg as la

from . import coopmat
from .render import const
from .runtime import MAXD, Runtime, WGArray
from .strided import header, load, store, wgsl_compute, wgsl_storage

__all__ = ["k_loop", "kernels", "matmul", "path"]

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


def k_loop(fetch: Callable[[str, str], list[str]], step: int, q: int,
           blocks: int) -> list[str]:
    """The K loop of a register-blocked tile kernel (``tile128``, and `ember_wgpu.conv`'s
    tiles): each invocation stores the ``vec4`` of each operand it loaded (``av``, ``bv``)
    into the workgroup tiles ``As``/``Bs`` (``q`` ``vec4`` a row), loads the next step's with
    ``fetch(k0, pad)`` while this step's products run, and multiplies ``4 * blocks`` rows by
    ``blocks`` ``vec4`` columns held in the registers ``c{row}_{h}``."""
    lines = ["    var av: vec4<f32>; var bv: vec4<f32>;", *fetch("0", "    "),
             f"    for (var k0 = 0; k0 < K; k0 = k0 + {step}) {{",
             f"        As[lak * {q} + lam / 4] = av;",
             f"        Bs[lbk * {q} + lbn / 4] = bv;",
             "        workgroupBarrier();",
             *fetch(f"k0 + {step}", "        "),
             f"        for (var k = 0; k < {step}; k = k + 1) {{"]
    lines += [f"            let ra{h} = As[k * {q} + {16 * h} + ty]; "
              f"let rb{h} = Bs[k * {q} + {16 * h} + tx];" for h in range(blocks)]
    for r in range(4 * blocks):
        a = f"ra{r // 4}.{'xyzw'[r % 4]}"
        lines.append("            " + " ".join(
            f"c{r}_{h} = fma(vec4<f32>({a}), rb{h}, c{r}_{h});" for h in range(blocks)))
    return [*lines, "        }", "        workgroupBarrier();", "    }"]


def _big_source(a_dt: np.dtype[Any], b_dt: np.dtype[Any], out_dt: np.dtype[Any]) -> str:
    """The ``tile128`` kernel (see the module docstring), generated unrolled."""
    ao, bo = _AO, _AO + 3
    q = BIG // 4  # vec4 columns of a tile row
    lines = [header([wgsl_storage(a_dt), wgsl_storage(b_dt), wgsl_storage(out_dt)], 2), "",
             f"var<workgroup> As: array<vec4<f32>, {BIG_STEP * q}>;",
             f"var<workgroup> Bs: array<vec4<f32>, {BIG_STEP * q}>;", "",
             "@compute @workgroup_size(16, 16)",
             "fn main(@builtin(workgroup_id) wg: vec3<u32>, "
             "@builtin(local_invocation_id) lid: vec3<u32>) {",
             "    let M = P[0]; let N = P[1]; let K = P[2];",
             "    let z = i32(wg.z);",
             f"    var ao = P[{ao}]; var bo = P[{bo}];",
             "    { var q = z; for (var d = P[3] - 1; d >= 0; d = d - 1) {",
             f"        let n = P[{_BN} + d]; let k = q % n; q = q / n;",
             f"        ao = ao + k * P[{_BA} + d]; bo = bo + k * P[{_BB} + d]; }} }}",
             f"    let ars = P[{ao + 1}]; let acs = P[{ao + 2}];",
             f"    let brs = P[{bo + 1}]; let bcs = P[{bo + 2}];",
             f"    let m0 = i32(wg.y) * {BIG}; let n0 = i32(wg.x) * {BIG};",
             "    let tx = i32(lid.x); let ty = i32(lid.y); let t = ty * 16 + tx;",
             # the element each invocation loads: A by k fastest (a row's k are adjacent in a
             # row-major A), B by n fastest
             f"    let lak = t % {BIG_STEP}; let lam = (t / {BIG_STEP}) * 4;",
             f"    let lbk = t / {q}; let lbn = (t % {q}) * 4;"]
    lines += [f"    var c{r}_{h} = vec4<f32>(0.0);" for r in range(8) for h in range(2)]

    def fetch(k0: str, pad: str) -> list[str]:
        """Load the invocation's ``vec4`` of A and of B for the K step at ``k0`` (zeros
        beyond the edges)."""
        out = [f"{pad}av = vec4<f32>(0.0); bv = vec4<f32>(0.0);",
               f"{pad}{{ let ak = {k0} + lak; let bk = {k0} + lbk;"]
        for i in range(4):
            c = "xyzw"[i]
            out += [f"{pad}if (m0 + lam + {i} < M && ak < K) {{ av.{c} = "
                    f"{load(a_dt, f'b0[ao + (m0 + lam + {i}) * ars + ak * acs]')}; }}",
                    f"{pad}if (bk < K && n0 + lbn + {i} < N) {{ bv.{c} = "
                    f"{load(b_dt, f'b1[bo + bk * brs + (n0 + lbn + {i}) * bcs]')}; }}"]
        return [*out, f"{pad}}}"]

    lines += k_loop(fetch, BIG_STEP, q, 2)
    for r in range(8):
        row = f"m0 + {(r // 4) * (BIG // 2)} + ty * 4 + {r % 4}"
        lines.append(f"    {{ let gm = {row};")
        lines.append("      if (gm < M) {")
        for h in range(2):
            for j in range(4):
                col = f"n0 + {h * (BIG // 2)} + tx * 4 + {j}"
                value = store(out_dt, f"c{r}_{h}.{'xyzw'[j]}")
                lines.append(f"        if ({col} < N) {{ b2[(z * M + gm) * N + {col}] = "
                             f"{value}; }}")
        lines.append("      } }")
    lines.append("}")
    return "\n".join(lines) + "\n"


#: outputs narrower than this (rows or columns) take the simple kernel
NARROW = 32
#: the ``tile128`` kernel's tile and K step
BIG = 128
BIG_STEP = 8
#: the kernels, by name (``coop``: `ember_wgpu.coopmat`, float16 where it fits and the
#: device's self-check passed)
PATHS = ("coop", "tile128", "tile64", "simple")
#: a path every matmul takes where it can (one of `PATHS`), for benchmarks comparing them;
#: None: `path` chooses (``coop`` first)
prefer: str | None = None


def path(rt: Runtime, m: int, n: int, k: int, dtype: np.dtype[Any]) -> str:
    """The kernel an ``m x k @ k x n`` matmul of ``dtype`` runs: ``tile128`` for float
    outputs at least `BIG` wide both ways, ``simple`` below `NARROW`, else ``tile64``."""
    del rt, k  # the same choice on every adapter for now
    floating = np.dtype(dtype).kind == "f" or np.dtype(dtype).name == "bfloat16"
    if prefer is not None and prefer != "coop" and (prefer != "tile128" or floating):
        return prefer
    if min(m, n) < NARROW:
        return "simple"
    if floating and min(m, n) >= BIG:
        return "tile128"
    return "tile64"

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

    if prefer in (None, "coop") and coopmat.eligible(a, b, batch) and coopmat.usable(rt):
        return coopmat.matmul(rt, a, b, out, batch)
    words = [M, N, K, len(dims), *pad(dims), *pad(sa), *pad(sb),
             a.offset, a.strides[-2], a.strides[-1], b.offset, b.strides[-2], b.strides[-1],
             out.size]
    kind = path(rt, M, N, K, out.dtype)
    key = (a.dtype, b.dtype, out.dtype, kind)
    src = _SOURCES.get(key)
    if src is None:
        make = {"simple": _simple_source, "tile64": _source, "tile128": _big_source}[kind]
        src = _SOURCES[key] = make(a.dtype, b.dtype, out.dtype)
    if kind == "simple":
        rt.dispatch(src, [a, b], [out], words, out.size)
        return out
    tile = BIG if kind == "tile128" else TILE
    groups = (-(-N // tile), -(-M // tile), nb)
    if nb > rt.max_groups:
        raise NotImplementedError(f"wgpu: matmul of more than {rt.max_groups} matrices at once")
    rt.record(src, [a, b], [out], words, groups)
    return out


def _ir(dt: np.dtype[Any]) -> str:
    from ember.backend import ir

    return ir.compute_dtype(dt.name)


def kernels(rt: Runtime) -> dict[Any, Any]:
    return {la.matmul: lambda a, b: matmul(rt, a, b)}
