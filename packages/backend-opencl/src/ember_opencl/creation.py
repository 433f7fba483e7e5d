"""Creation kernels: constants, ranges, casts, and Philox4x32-10 random numbers.

Random numbers depend only on ``(seed, offset)``: element ``i`` takes the Philox block of the
counter ``(i, 0, offset_lo, offset_hi)`` under the key ``(seed_lo, seed_hi)``, so two ops of one
generator never share a stream and the same pair always gives the same tensor on this backend.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from ember.backend import numpy_dtype
from ember.ops import creation as cr

from . import elementwise
from .runtime import CLArray, Runtime, compute_type, ctype, is_float, store_expr
from .strided import run_map

__all__ = ["PHILOX", "kernels"]

PHILOX = """
uint4 philox(uint4 c, uint2 k) {
    for (int r = 0; r < 10; r++) {
        ulong p0 = (ulong)0xD2511F53u * c.x;
        ulong p1 = (ulong)0xCD9E8D57u * c.z;
        c = (uint4)((uint)(p1 >> 32) ^ c.y ^ k.x, (uint)p1, (uint)(p0 >> 32) ^ c.w ^ k.y,
                    (uint)p0);
        k += (uint2)(0x9E3779B9u, 0xBB67AE85u);
    }
    return c;
}
"""

_RANDOM = """
__kernel void rng(__global {t}* out, ulong n, uint s0, uint s1, uint f0, uint f1,
                  long lo, ulong span, long total)
{{
    ulong i = get_global_id(0);
    if (i >= (ulong)total) return;
    uint4 u = philox((uint4)((uint)i, (uint)(i >> 32), f0, f1), (uint2)(s0, s1));
    out[i] = {store};
}}
"""

_EXPR = {
    ("rand", "float"): "(u.x >> 8) * (1.0f / 16777216.0f)",
    ("rand", "double"): "((ulong)(u.x >> 5) * 67108864.0 + (u.y >> 6)) * "
                        "(1.0 / 9007199254740992.0)",
    # Box-Muller on (0, 1] so that log never sees 0
    ("randn", "float"): "sqrt(-2.0f * log(((u.x >> 8) + 1.0f) * (1.0f / 16777216.0f))) * "
                        "cospi(2.0f * (u.y >> 8) * (1.0f / 16777216.0f))",
    ("randn", "double"): "sqrt(-2.0 * log((((ulong)(u.x >> 5) * 67108864.0 + (u.y >> 6)) + 1.0)"
                         " * (1.0 / 9007199254740992.0))) * cospi(2.0 * (((ulong)(u.z >> 5) * "
                         "67108864.0 + (u.w >> 6)) * (1.0 / 9007199254740992.0)))",
    # the 16-bit floats draw as many bits as their mantissa holds, so rounding never gives 1
    ("rand", "float16"): "(u.x >> 21) * (1.0f / 2048.0f)",
    ("rand", "bfloat16"): "(u.x >> 24) * (1.0f / 256.0f)",
    ("randint", None): "lo + (long)((((ulong)u.x << 32) | u.y) % span)",
}


def _random(rt: Runtime, which: str, shape: tuple[int, ...], dtype: Any, seed: int,
            offset: int, low: int = 0, high: int = 1) -> CLArray:
    nd = numpy_dtype(dtype)
    out = rt.empty(shape, nd)
    n = math.prod(shape)
    t = ctype(nd)
    if which == "randint":
        expr = _EXPR["randint", None]
    else:
        t = compute_type(nd)
        expr = _EXPR.get((which, nd.name)) or _EXPR[which, "double" if t == "double"
                                                     else "float"]
    src = PHILOX + _RANDOM.format(t=ctype(nd), store=store_expr(nd, expr, t))
    k = rt.kernel(src, "rng")
    seed &= (1 << 64) - 1
    offset &= (1 << 64) - 1
    rt.launch1d(k, n, out.buffer, np.uint64(n), np.uint32(seed & 0xFFFFFFFF),
              np.uint32(seed >> 32), np.uint32(offset & 0xFFFFFFFF), np.uint32(offset >> 32),
              np.int64(low), np.uint64(max(high - low, 1)))
    return out


def kernels(rt: Runtime) -> dict[Any, Any]:
    def full(shape: tuple[int, ...] = (), value: Any = 0, dtype: Any = None) -> CLArray:
        nd = numpy_dtype(dtype)
        out = rt.empty(tuple(shape), nd)
        v = int(bool(value)) if nd.kind == "b" else np.asarray(value).astype(nd)[()]
        return run_map(rt, "s0", [], out=out, scalars=[(compute_type(nd), v)])

    def arange(start: Any = 0, stop: Any = 0, step: Any = 1, dtype: Any = None) -> CLArray:
        nd = numpy_dtype(dtype)
        if is_float(nd):
            n = max(math.ceil((stop - start) / step), 0)
            acc = "double" if rt.fp64 else "float"
            out = rt.empty((n,), nd)
            return run_map(rt, "s0 + (" + acc + ")i * s1", [], out=out,
                           scalars=[(acc, start), (acc, step)])
        n = len(range(int(start), int(stop), int(step)))
        out = rt.empty((n,), nd)
        return run_map(rt, "s0 + i * s1", [], out=out,
                       scalars=[("long", int(start)), ("long", int(step))])

    def rand(shape: tuple[int, ...] = (), dtype: Any = None, seed: int = 0,
             offset: int = 0) -> CLArray:
        return _random(rt, "rand", shape, dtype, seed, offset)

    def randn(shape: tuple[int, ...] = (), dtype: Any = None, seed: int = 0,
              offset: int = 0) -> CLArray:
        return _random(rt, "randn", shape, dtype, seed, offset)

    def randint(low: int = 0, high: int = 1, shape: tuple[int, ...] = (), dtype: Any = None,
                seed: int = 0, offset: int = 0) -> CLArray:
        return _random(rt, "randint", shape, dtype, seed, offset, low, high)

    def cast(x: CLArray, dtype: Any = None) -> CLArray:
        return elementwise.cast(rt, x, numpy_dtype(dtype))

    return {cr.full: full, cr.arange: arange, cr.rand: rand, cr.randn: randn,
            cr.randint: randint, cr.cast: cast}
