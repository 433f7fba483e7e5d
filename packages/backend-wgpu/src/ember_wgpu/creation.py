"""Creation kernels: constants, ranges, casts, and Philox4x32-10 random numbers.

Random numbers depend only on ``(seed, offset)``: element ``i`` takes the Philox block of the
counter ``(i, 0, offset_lo, offset_hi)`` under the key ``(seed_lo, seed_hi)`` (the OpenCL
backend's scheme), so the same pair always gives the same tensor on this backend.  WGSL has no
32x32->64-bit multiply: `PHILOX` forms the high word from 16-bit halves.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember.backend import ir, numpy_dtype
from ember.ops import creation as cr

from . import elementwise
from .runtime import Runtime, WGArray
from .strided import header, is_float, run_map, scalar_words, store, wgsl_storage

__all__ = ["PHILOX", "kernels"]

PHILOX = """
fn mulhi(a: u32, b: u32) -> u32 {
    let a0 = a & 0xffffu; let a1 = a >> 16u; let b0 = b & 0xffffu; let b1 = b >> 16u;
    let m = a1 * b0 + ((a0 * b0) >> 16u);
    let n = a0 * b1 + (m & 0xffffu);
    return a1 * b1 + (m >> 16u) + (n >> 16u);
}
fn philox(c0: vec4<u32>, k0: vec2<u32>) -> vec4<u32> {
    var c = c0; var k = k0;
    for (var r = 0; r < 10; r = r + 1) {
        let h0 = mulhi(0xD2511F53u, c.x); let l0 = 0xD2511F53u * c.x;
        let h1 = mulhi(0xCD9E8D57u, c.z); let l1 = 0xCD9E8D57u * c.z;
        c = vec4<u32>(h1 ^ c.y ^ k.x, l1, h0 ^ c.w ^ k.y, l0);
        k = k + vec2<u32>(0x9E3779B9u, 0xBB67AE85u);
    }
    return c;
}
"""

_EXPR = {
    "rand": "f32(u.x >> 8u) * (1.0 / 16777216.0)",
    # the 16-bit float draws as many bits as its mantissa holds, so rounding never gives 1
    "rand-float16": "f32(u.x >> 21u) * (1.0 / 2048.0)",
    "rand-bfloat16": "f32(u.x >> 24u) * (1.0 / 256.0)",
    # Box-Muller on (0, 1] so that log never sees 0
    "randn": "sqrt(-2.0 * log((f32(u.x >> 8u) + 1.0) * (1.0 / 16777216.0))) * "
             "cos(6.283185307179586 * f32(u.y >> 8u) * (1.0 / 16777216.0))",
    "randint": "lo + i64((((u64(u.x) << 32u) | u64(u.y)) % span))",
}


def _random(rt: Runtime, which: str, shape: tuple[int, ...], dtype: Any, seed: int,
            offset: int, low: int = 0, high: int = 1) -> WGArray:
    nd = numpy_dtype(dtype)
    out = rt.empty(shape, nd)
    n = math.prod(shape)
    expr = _EXPR.get(f"{which}-{nd.name}") or _EXPR[which]
    extra = ""
    if which == "randint":
        extra = ("    let lo = i64(bitcast<u32>(P[5])) | (i64(P[6]) << 32u);\n"
                 "    let span = u64(bitcast<u32>(P[7])) | (u64(bitcast<u32>(P[8])) << 32u);\n")
    value = expr if nd.name in ("int64", "float32", "float16", "bfloat16", "bool") else \
        f"{_wgsl_of(nd)}({expr})"
    src = (header([wgsl_storage(nd)], 0) + PHILOX +
           "@compute @workgroup_size(64)\n"
           "fn main(@builtin(global_invocation_id) gid: vec3<u32>, "
           "@builtin(num_workgroups) nwg: vec3<u32>) {\n"
           "    let i = gid.x + gid.y * nwg.x * 64u;\n"
           "    if (i >= bitcast<u32>(P[0])) { return; }\n"
           "    let u = philox(vec4<u32>(i, 0u, bitcast<u32>(P[3]), bitcast<u32>(P[4])), "
           "vec2<u32>(bitcast<u32>(P[1]), bitcast<u32>(P[2])));\n" + extra +
           f"    b0[i] = {store(nd, value)};\n}}\n")
    seed &= (1 << 64) - 1
    offset &= (1 << 64) - 1
    words = [n, *scalar_words("uint64", seed), *scalar_words("uint64", offset),
             *scalar_words("int64", low), *scalar_words("uint64", max(high - low, 1))]
    rt.dispatch(src, [], [out], words, n)
    return out


def _wgsl_of(nd: np.dtype[Any]) -> str:
    return {"int32": "i32", "float32": "f32"}.get(nd.name, "f32")


def kernels(rt: Runtime) -> dict[Any, Any]:
    def full(shape: tuple[int, ...] = (), value: Any = 0, dtype: Any = None) -> WGArray:
        nd = numpy_dtype(dtype)
        out = rt.empty(tuple(shape), nd)
        ct = ir.compute_dtype(nd.name)
        v = bool(value) if nd.kind == "b" else np.asarray(value).astype(nd)[()]
        return run_map(rt, "s0", [], out=out, scalars=[(ct, v)])

    def arange(start: Any = 0, stop: Any = 0, step: Any = 1, dtype: Any = None) -> WGArray:
        nd = numpy_dtype(dtype)
        if is_float(nd):
            n = max(math.ceil((stop - start) / step), 0)
            out = rt.empty((n,), nd)
            return run_map(rt, "s0 + f32(i) * s1", [], out=out,
                           scalars=[("float32", start), ("float32", step)])
        n = len(range(int(start), int(stop), int(step)))
        out = rt.empty((n,), nd)
        t = "i64" if nd.name == "int64" else ("u32" if nd.name == "uint8" else "i32")
        ct = {"i64": "int64", "u32": "uint32", "i32": "int32"}[t]
        return run_map(rt, f"s0 + {t}(i) * s1", [], out=out,
                       scalars=[(ct, int(start)), (ct, int(step))])

    def rand(shape: tuple[int, ...] = (), dtype: Any = None, seed: int = 0,
             offset: int = 0) -> WGArray:
        return _random(rt, "rand", tuple(shape), dtype, seed, offset)

    def randn(shape: tuple[int, ...] = (), dtype: Any = None, seed: int = 0,
              offset: int = 0) -> WGArray:
        return _random(rt, "randn", tuple(shape), dtype, seed, offset)

    def randint(low: int = 0, high: int = 1, shape: tuple[int, ...] = (), dtype: Any = None,
                seed: int = 0, offset: int = 0) -> WGArray:
        nd = numpy_dtype(dtype)
        if nd.name == "int64":
            return _random(rt, "randint", tuple(shape), dtype, seed, offset, low, high)
        wide = _random(rt, "randint", tuple(shape), _int64(), seed, offset, low, high)
        return elementwise.cast(rt, wide, nd)

    def cast(x: WGArray, dtype: Any = None) -> WGArray:
        return elementwise.cast(rt, x, numpy_dtype(dtype))

    return {cr.full: full, cr.arange: arange, cr.rand: rand, cr.randn: randn,
            cr.randint: randint, cr.cast: cast}


def _int64() -> Any:
    import ember

    return ember.int64

