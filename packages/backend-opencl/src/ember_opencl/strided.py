"""Generated strided kernels: one work-item per element of an N-d iteration space.

`run_map` evaluates a C expression over inputs broadcast to a shape and stores it into a fresh
contiguous array or into a given (strided) view.  Axes that every operand walks contiguously are
merged first, so the common dense case compiles to ``p[o + i]`` with no index arithmetic.
Programs are cached per signature (expression, dtypes, number of merged axes).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyopencl.cltypes as cltypes
from ember.backend.strided import broadcast_view, collapse, walk

from .runtime import GROUP, CLArray, Runtime, compute_type, ctype, load_expr, store_expr

__all__ = ["broadcast_view", "collapse", "contiguous", "copy_into", "run_map"]

_NAMES = ("a", "b", "c", "d")


_CACHE: dict[tuple[Any, ...], Any] = {}


MAXD = 8
GRID_MIN = 32  # inner extent from which two axes run on a 2-d grid (fewer idle lanes below)


def _source(expr: str, out_dt: np.dtype[Any], in_types: Sequence[np.dtype[Any]],
            scalar_types: Sequence[str], helpers: str) -> str:
    """Two kernels in one program (one build): ``dense`` for merged 1-d iteration spaces and
    ``general`` for up to `MAXD` axes, walked with run-time sizes and strides."""
    out_t = ctype(out_dt)
    wide = "double" if "double" in (*scalar_types, *map(compute_type, in_types)) else "float"
    store = store_expr(out_dt, f"({expr})", wide)
    # a plain copy moves the stored bits (16-bit floats, nan payloads) untouched
    raw = expr == "a" and len(in_types) == 1 and np.dtype(in_types[0]) == np.dtype(out_dt)
    if raw:
        store = "a"
    tail = [f"{t} s{j}" for j, t in enumerate(scalar_types)] + ["long total"]
    loads_d, loads_g = [], []
    dparams = [f"__global {out_t}* out", "long oo", "long os"]
    gparams = [f"__global {out_t}* out", "long oo", "long8 os", "long8 shape", "int nd"]
    gwalk = []
    for j, t in enumerate(in_types):
        c, name = (ctype(t) if raw else compute_type(t)), _NAMES[j]
        dparams += [f"__global const {ctype(t)}* p{j}", f"long o{j}", f"long q{j}"]
        gparams += [f"__global const {ctype(t)}* p{j}", f"long o{j}", f"long8 q{j}"]
        ld, lg = f"p{j}[o{j} + i * q{j}]", f"p{j}[o{j}]"
        loads_d.append(f"{c} {name} = {ld if raw else load_expr(t, ld)};")
        loads_g.append(f"{c} {name} = {lg if raw else load_expr(t, lg)};")
        lanes = ", ".join(f"q{j}.s{d}" for d in range(MAXD))
        gwalk.append(f"const long st{j}[{MAXD}] = {{{lanes}}};")
    steps = "".join(f" o{j} += k * st{j}[d];" for j in range(len(in_types)))
    grid_steps = "".join(f"\n    o{j} += i0 * q{j}.s0 + i1 * q{j}.s1;"
                         for j in range(len(in_types)))
    ld, lg = "\n    ".join(loads_d), "\n    ".join(loads_g)
    walks = "\n    ".join(gwalk)
    vec = ", ".join(f"{{v}}.s{d}" for d in range(MAXD))
    return f"""{helpers}
__kernel void dense({', '.join(dparams + tail)})
{{
    long i = get_global_id(0);
    if (i >= total) return;
    {ld}
    out[oo + i * os] = {store};
}}

__kernel void general({', '.join(gparams + tail)})
{{
    long i = get_global_id(0);
    if (i >= total) return;
    const long n_[{MAXD}] = {{{vec.format(v="shape")}}};
    const long os_[{MAXD}] = {{{vec.format(v="os")}}};
    {walks}
    long r = i;
    for (int d = nd - 1; d >= 0; d--) {{
        long k = r % n_[d]; r /= n_[d];
        oo += k * os_[d];{steps}
    }}
    {lg}
    out[oo] = {store};
}}

__kernel void grid2({', '.join(gparams + tail)})
{{
    /* two merged axes on a 2-d grid: no index division at all (cat, pad, row broadcasts) */
    long i1 = get_global_id(0), i0 = get_global_id(1);
    if (i1 >= shape.s1) return;
    long i = i0 * shape.s1 + i1;  /* the linear index expressions may use */
    oo += i0 * os.s0 + i1 * os.s1;{grid_steps}
    {lg}
    out[oo] = {store};
}}

__kernel void general32({', '.join(gparams + tail)})
{{
    /* the same walk with 32-bit index arithmetic (total < 2^31): divisions cost a third */
    uint i = get_global_id(0);
    if (i >= (uint)total) return;
    const uint n_[{MAXD}] = {{{vec.format(v="(uint)shape")}}};
    const long os_[{MAXD}] = {{{vec.format(v="os")}}};
    {walks}
    uint r = i;
    for (int d = nd - 1; d >= 0; d--) {{
        uint k = r % n_[d]; r /= n_[d];
        oo += k * os_[d];{steps}
    }}
    {lg}
    out[oo] = {store};
}}
"""


def _long8(vals: Sequence[int]) -> Any:
    # make_long8 is created at import time (pyopencl.cltypes fills its globals in a loop)
    return cltypes.make_long8(*vals, *([0] * (MAXD - len(vals))))  # type: ignore[attr-defined]


def run_map(rt: Runtime, expr: str, inputs: Sequence[CLArray], *,
            out: CLArray | None = None, shape: tuple[int, ...] | None = None,
            dtype: np.dtype[Any] | None = None,
            scalars: Sequence[tuple[str, Any]] = (), helpers: str = "") -> CLArray:
    """Evaluate ``expr`` (inputs named ``a b c d``, scalars ``s0 s1``, linear index ``i``)."""
    if out is None:
        if shape is None:
            shape = np.broadcast_shapes(*(x.shape for x in inputs))
        out = rt.empty(tuple(shape), inputs[0].dtype if dtype is None else np.dtype(dtype))
    shape = out.shape
    total = math.prod(shape)
    if total == 0:
        return out
    dims, walked = walk(shape, inputs, [out], MAXD, "opencl: elementwise kernels")
    sts = [walked[-1], *walked[:-1]]  # out first, as the kernels take it
    stypes = tuple(t for t, _ in scalars)
    key = (rt, expr, out.dtype, tuple(x.dtype for x in inputs), stypes, helpers)
    pair = _CACHE.get(key)
    if pair is None:
        src = _source(expr, out.dtype, [x.dtype for x in inputs], stypes, helpers)
        pair = _CACHE[key] = (rt.kernel(src, "dense"), rt.kernel(src, "general"),
                              rt.kernel(src, "general32"), rt.kernel(src, "grid2"))
    sargs = [_scalar(t, v) for t, v in scalars]
    if len(dims) <= 1:
        args: list[Any] = [out.buffer, np.int64(out.offset), np.int64(sts[0][0] if dims else 0)]
        for v, s in zip(inputs, sts[1:], strict=True):
            args += [v.buffer, np.int64(v.offset), np.int64(s[0] if dims else 0)]
        rt.launch1d(pair[0], total, *args, *sargs)
        return out
    args = [out.buffer, np.int64(out.offset), _long8(sts[0]), _long8(dims), np.int32(len(dims))]
    for v, s in zip(inputs, sts[1:], strict=True):
        args += [v.buffer, np.int64(v.offset), _long8(s)]
    if len(dims) == 2 and dims[1] >= GRID_MIN:
        rt.launch(pair[3], (-(-dims[1] // GROUP) * GROUP, dims[0]), (GROUP, 1), *args, *sargs,
                  np.int64(total))
        return out
    rt.launch1d(pair[2] if total < (1 << 31) else pair[1], total, *args, *sargs)
    return out


_SCALAR_NP = {"float": np.float32, "double": np.float64, "char": np.int8, "short": np.int16,
              "int": np.int32, "long": np.int64, "uchar": np.uint8, "half": np.float32,
              "ulong": np.uint64, "uint": np.uint32}


def _scalar(t: str, v: Any) -> Any:
    npt = _SCALAR_NP[t]
    if np.issubdtype(npt, np.integer):
        return npt(int(v) % (1 << (8 * np.dtype(npt).itemsize))) if np.issubdtype(
            npt, np.unsignedinteger) else np.array(int(v)).astype(npt)[()]
    return npt(v)


def copy_into(rt: Runtime, dst: CLArray, src: CLArray) -> CLArray:
    """Copy ``src`` (broadcast) into the view ``dst``."""
    return run_map(rt, "a", [src], out=dst)


def contiguous(rt: Runtime, x: CLArray) -> CLArray:
    """``x`` itself when dense, else a dense copy."""
    return x if x.is_contiguous() else run_map(rt, "a", [x])

