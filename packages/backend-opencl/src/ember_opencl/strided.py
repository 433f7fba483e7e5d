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

from .runtime import CLArray, Runtime, compute_type, ctype

__all__ = ["broadcast_view", "collapse", "copy_into", "run_map"]

_NAMES = ("a", "b", "c", "d")


def broadcast_view(x: CLArray, shape: tuple[int, ...]) -> CLArray:
    """``x`` seen with ``shape`` (numpy broadcasting: leading axes added, size-1 axes stride 0)."""
    lead = len(shape) - x.ndim
    strides = [0] * lead
    for n, s, target in zip(x.shape, x.strides, shape[lead:], strict=True):
        strides.append(0 if n == 1 and target != 1 else s)
    return x.view(shape, tuple(strides), x.offset)


def collapse(shape: Sequence[int], strides: Sequence[Sequence[int]]
             ) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 axes and merge neighbours every operand steps through contiguously."""
    keep = [d for d, n in enumerate(shape) if n != 1]
    dims = [shape[d] for d in keep]
    sts = [[s[d] for d in keep] for s in strides]
    i = 0
    while i + 1 < len(dims):
        if all(s[i] == s[i + 1] * dims[i + 1] for s in sts):
            dims[i] *= dims[i + 1]
            for s in sts:
                s[i] = s[i + 1]
                del s[i + 1]
            del dims[i + 1]
        else:
            i += 1
    return dims, sts


_CACHE: dict[tuple[Any, ...], Any] = {}


def _source(expr: str, out_t: str, in_types: Sequence[np.dtype[Any]], nd: int,
            scalar_types: Sequence[str], helpers: str) -> str:
    params = [f"__global {out_t}* out", "long oo", *[f"long os{d}" for d in range(nd)]]
    body = ["long i = get_global_id(0);", "if (i >= total) return;", "long r = i;"]
    for d in range(nd - 1, 0, -1):
        params.append(f"long n{d}")
        body.append(f"long k{d} = r % n{d}; r /= n{d};")
    if nd:
        body.append("long k0 = r;")
    for j, t in enumerate(in_types):
        params += [f"__global const {ctype(t)}* p{j}", f"long o{j}",
                   *[f"long s{j}_{d}" for d in range(nd)]]
        addr = " + ".join([f"o{j}", *[f"k{d} * s{j}_{d}" for d in range(nd)]])
        body.append(f"{compute_type(t)} {_NAMES[j]} = ({compute_type(t)})p{j}[{addr}];")
    params += [f"{t} s{j}" for j, t in enumerate(scalar_types)]
    params.append("long total")
    addr = " + ".join(["oo", *[f"k{d} * os{d}" for d in range(nd)]])
    body.append(f"out[{addr}] = ({out_t})({expr});")
    lines = "\n    ".join(body)
    return f"{helpers}\n__kernel void k({', '.join(params)})\n{{\n    {lines}\n}}\n"


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
    views = [broadcast_view(x, shape) for x in inputs]
    dims, sts = collapse(shape, [out.strides, *(v.strides for v in views)])
    nd = len(dims)
    stypes = tuple(t for t, _ in scalars)
    key = (expr, out.dtype, tuple(x.dtype for x in inputs), nd, stypes, helpers)
    kern = _CACHE.get((rt, *key))
    if kern is None:
        src = _source(expr, ctype(out.dtype), [x.dtype for x in inputs], nd, stypes, helpers)
        kern = _CACHE[(rt, *key)] = rt.kernel(src, "k")
    args: list[Any] = [out.buffer, np.int64(out.offset), *map(np.int64, sts[0])]
    args += [np.int64(n) for n in dims[1:][::-1]]
    for v, s in zip(views, sts[1:], strict=True):
        args += [v.buffer, np.int64(v.offset), *map(np.int64, s)]
    args += [_scalar(t, v) for t, v in scalars]
    rt.launch1d(kern, total, *args)
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
    if x.is_contiguous():
        return x
    return run_map(rt, "a", [x])
