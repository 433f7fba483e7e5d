"""Elementwise kernels generated per signature: op body, dtypes, rank.

Every elementwise op, cast, copy and `where` goes through :func:`elementwise`.  Operands are
strided views (broadcast axes have stride 0); adjacent axes that are contiguous in every operand
are merged first, so most launches are rank 1.  The generated kernel maps each flat output
index to coordinates, and coordinates to an offset per operand.  Kernels are cached by
``(body, dtypes, rank)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from ember.backend import strided

from ._array import DeviceArray, contiguous_strides, dtype_name

if TYPE_CHECKING:
    from .backend import TritonBackend

__all__ = ["TL", "broadcast_strides", "collapse", "coordinates", "elementwise", "load_expr",
           "run_binary", "run_plan"]

#: Triton type of each numpy dtype name (bool is stored as bytes)
TL = {
    "bool": "tl.uint8", "int8": "tl.int8", "int16": "tl.int16", "int32": "tl.int32",
    "int64": "tl.int64", "uint8": "tl.uint8", "float16": "tl.float16",
    "bfloat16": "tl.bfloat16", "float32": "tl.float32", "float64": "tl.float64",
}


def collapse(shape: tuple[int, ...],
             strides: Sequence[tuple[int, ...]]) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """`ember.backend.strided.collapse` as tuples: size-1 axes dropped, axes that are
    contiguous with their successor in every operand merged."""
    dims, sts = strided.collapse(shape, strides)
    return tuple(dims), [tuple(st) for st in sts]


def broadcast_strides(a: DeviceArray, shape: tuple[int, ...]) -> tuple[int, ...]:
    """``a``'s strides as a view broadcast to ``shape`` (0 along broadcast axes)."""
    return strided.broadcast_strides(a.shape, a.strides, shape)


def coordinates(rank: int) -> list[str]:
    """Lines decoding the flat index ``offs`` into coordinates ``c0, c1, ...`` of a shape
    ``S0, S1, ...`` of rank ``rank`` (row-major)."""
    lines = ["    rem = offs"]
    for d in reversed(range(rank)):
        lines += [f"    c{d} = rem % S{d}", f"    rem = rem // S{d}"] if d else ["    c0 = rem"]
    return lines


def load_expr(ptr: str, offs: str, dtype: np.dtype[Any], widen: bool) -> str:
    """Code loading one operand, as i1 for bool and float32 for half types when ``widen``."""
    code = f"tl.load({ptr} + {offs}, mask=mask)"
    if dtype.kind == "b":
        return f"({code} != 0)"
    if widen and dtype.name in ("float16", "bfloat16"):
        return f"{code}.to(tl.float32)"
    return code


def _source(name: str, nin: int, nsc: int, rank: int, body: str, in_dtypes: Sequence[Any],
            sc_dtypes: Sequence[Any], out_dtype: np.dtype[Any], widen: bool) -> str:
    args = ["out_ptr", *[f"in{i}" for i in range(nin)], *[f"sc{i}" for i in range(nsc)], "n"]
    args += [f"S{d}" for d in range(rank)] + [f"O{d}" for d in range(rank)]
    args += [f"A{i}_{d}" for i in range(nin) for d in range(rank)]
    lines = ["@triton.jit", f"def {name}({', '.join(args)}, BLOCK: tl.constexpr):",
             "    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
             "    mask = offs < n"]
    if rank:
        lines += coordinates(rank)

    def offset(prefix: str) -> str:
        return " + ".join(f"c{d} * {prefix}{d}" for d in range(rank)) if rank else "offs * 0"

    for i in range(nin):
        lines.append(f"    x{i} = {load_expr(f'in{i}', offset(f'A{i}_'), in_dtypes[i], widen)}")
    for i in range(nsc):
        sc = load_expr(f"sc{i}", "0", sc_dtypes[i], widen).replace(", mask=mask", "")
        lines.append(f"    s{i} = {sc}")
    for line in body.splitlines():
        lines.append(f"    {line}")
    conv = f"r.to({TL[out_dtype.name]})"
    if out_dtype.name in ("float16", "bfloat16"):  # via float32: the interpreter needs that
        conv = f"r.to(tl.float32).to({TL[out_dtype.name]})"
    lines.append(f"    tl.store(out_ptr + {offset('O')}, {conv}, mask=mask)")
    return "\n".join(lines) + "\n"


def run_binary(be: TritonBackend, plan: tuple[Any, ...], a: DeviceArray,
               b: DeviceArray) -> DeviceArray:
    """`run_plan` for two operands and no scalars (every binary op's eager path), unrolled."""
    direct = plan[8]
    pa, pb = a.ptr, b.ptr
    if direct is not None and not (pa | pb) & 15:
        mem = be.memory
        out = mem.fresh_array(plan[6], plan[2], plan[3], plan[7])
        ptr = out.ptr
        if not ptr & 15:
            direct(plan[1], mem.stream(), [ptr, pa, pb, *plan[4]])
        else:
            be.launch(plan[0], plan[1], out, a, b, *plan[4], BLOCK=plan[5])
        return out
    return run_plan(be, plan, (a, b))


def run_plan(be: TritonBackend, plan: tuple[Any, ...], inputs: Sequence[DeviceArray],
             scalars: Sequence[DeviceArray] = ()) -> DeviceArray:
    """Run a recorded elementwise launch (see `elementwise`) on operands of the same layouts."""
    kernel, grid, pshape, pdtype, ints, block, nbytes, pstrides, direct = plan
    mem = be.memory
    out = mem.fresh_array(nbytes, pshape, pdtype, pstrides)
    ptr = out.ptr
    if direct is not None:
        # the compiled kernel, launched with addresses: it was compiled for 16-byte aligned
        # operands, which every operand still is (else the general path)
        addrs = [ptr]
        bits = ptr
        for a in inputs:
            addrs.append(a.ptr)
            bits |= a.ptr
        for a in scalars:
            addrs.append(a.ptr)
            bits |= a.ptr
        if not bits & 15:
            addrs += ints
            direct(grid, mem.stream(), addrs)
            return out
    be.launch(kernel, grid, out, *inputs, *scalars, *ints, BLOCK=block)
    return out


def elementwise(be: TritonBackend, body: str, inputs: Sequence[DeviceArray],
                out_dtype: Any, *, scalars: Sequence[DeviceArray] = (),
                out: DeviceArray | None = None, widen: bool = True,
                shape: tuple[int, ...] | None = None, plan_key: Any = None) -> DeviceArray:
    """Run ``body`` (code setting ``r`` from ``x0, x1, ...`` and scalars ``s0, ...``).

    Inputs broadcast to ``shape`` (their common shape by default); the result is written to a
    new contiguous array, or into the view ``out``.

    Calls that make a new array remember their launch (kernel, grid, sizes and strides) by the
    operands' layouts, so a recurring call does no analysis at all (`run_plan`).  Callers
    that know a cheaper key standing for all of ``body``, dtypes and layouts pass it as
    ``plan_key`` and look the plan up themselves.
    """
    if out is None and shape is None:
        if plan_key is None:
            plan_key = (body, widen, out_dtype,
                        *[(a.shape, a.strides, a.dtype) for a in inputs],
                        *[sc.dtype for sc in scalars])
            plan = be.elementwise_plans.get(plan_key)
            if plan is not None:
                return run_plan(be, plan, inputs, scalars)
    else:
        plan_key = None
    out_dtype = np.dtype(out_dtype)
    if shape is None:
        shape = inputs[0].shape if inputs else ()
        if any(a.shape != shape for a in inputs):
            shape = np.broadcast_shapes(*(a.shape for a in inputs))
    if out is None:
        out = be.empty(shape, out_dtype)
    n = out.size
    if n == 0:
        return out
    dense = contiguous_strides(shape)
    if out.strides == dense and all(a.shape == shape and a.strides == dense for a in inputs):
        # the common case, same-shape contiguous operands: one flat axis, no analysis
        cshape: tuple[int, ...] = (n,) if n != 1 else ()
        cstrides: list[tuple[int, ...]] = [(1,) if n != 1 else ()] * (len(inputs) + 1)
    else:
        strides = [out.strides, *(broadcast_strides(a, shape) for a in inputs)]
        cshape, cstrides = collapse(shape, strides)
    rank = len(cshape)
    in_dtypes = tuple(a.dtype for a in inputs)
    sc_dtypes = tuple(s.dtype for s in scalars)
    key = ("ew", body, in_dtypes, sc_dtypes, out_dtype, rank, widen)
    kernel = be.library.generated(
        key, "ember_ew",
        lambda: _source("ember_ew", len(inputs), len(scalars), rank, body, in_dtypes, sc_dtypes,
                        out_dtype, widen),
        be.kernel_scope)
    block = be.block_size(n)
    ints = (n, *cshape, *(s for st in cstrides for s in st))
    grid = (-(-n // block),)
    direct = be.launch(kernel, grid, out, *inputs, *scalars, *ints, BLOCK=block)
    if plan_key is not None:
        plans = be.elementwise_plans
        if len(plans) >= 4096:
            plans.clear()
        if direct is not None and any(a.ptr & 15 for a in (out, *inputs, *scalars)):
            direct = None  # compiled for an unaligned operand: keep the general path
        plans[plan_key] = (kernel, grid, out.shape, out.dtype, ints, block,
                           max(n, 1) * out.dtype.itemsize, out.strides, direct)
    return out


def exact_compare(be: TritonBackend, x: DeviceArray) -> DeviceArray:
    """``x``, or on the interpreter its bfloat16 values widened to float32.

    Triton's interpreter keeps bfloat16 as raw 16-bit integers, so comparing two of them
    compares bit patterns; compiled kernels compare bfloat16 natively.
    """
    if be.memory.interpret and dtype_name(x.dtype) == "bfloat16":
        return elementwise(be, "r = x0", [x], np.float32)
    return x


def copy_into(be: TritonBackend, src: DeviceArray, out: DeviceArray) -> DeviceArray:
    """Copy ``src`` (broadcasting) into the view ``out``, keeping dtype bits as they are."""
    return elementwise(be, "r = x0", [src], out.dtype, out=out, widen=False, shape=out.shape)


def contiguous(be: TritonBackend, a: DeviceArray) -> DeviceArray:
    """``a`` itself when its strides are contiguous, else a contiguous copy (see `copy_plan`)."""
    if a.strides == contiguous_strides(a.shape):
        return a
    if a.is_contiguous():  # contiguous but for the strides of size-1 axes
        return a.view(a.shape, contiguous_strides(a.shape), a.offset)
    key = ("copy", a.shape, a.strides, a.dtype)
    plan: Any = be.elementwise_plans.get(key)
    if plan is None:
        plan = copy_plan(be, a) or False  # False: the elementwise copy
        if len(be.elementwise_plans) >= 4096:
            be.elementwise_plans.clear()
        be.elementwise_plans[key] = plan
    if plan is False:
        return elementwise(be, "r = x0", [a], a.dtype, widen=False)
    kernel, grid, ints, meta = plan
    out = be.empty(a.shape, a.dtype)
    be.launch_planned(key, kernel, grid, (out, a), ints, **meta)
    return out


#: copies of at least this many elements whose innermost axis moves use the tiled transpose
#: kernels (both sides coalesced); smaller ones the elementwise copy
TRANSPOSE_MIN = 1 << 12
#: rows of at least this many elements contiguous in both source and copy use `copy_rows`
ROWS_MIN = 16
#: bytes `copy_rows` moves a program on a GPU
ROWS_BYTES = 1 << 14
#: elements a row or tiled copy moves a program on the interpreter (which pays per program)
INTERPRET_COPY = 1 << 16
#: offsets from this on are computed in int64 (int32 below: divisions are cheaper)
WIDE_FROM = 1 << 31
#: batch axes the row and tiled copies decode (more: the elementwise copy)
_MAX_BATCH = 4


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def copy_plan(be: TritonBackend, a: DeviceArray) -> tuple[Any, tuple[int, ...],
                                                             tuple[int, ...],
                                                             dict[str, Any]] | None:
    """How to copy the strided view ``a`` into a new contiguous array: ``(kernel, grid, ints,
    meta)`` for ``launch_planned(key, kernel, grid, (out, a), ints, **meta)``, or ``None`` for
    the elementwise copy.

    Axes are merged where both sides allow (`collapse`).  When the innermost axis stays
    contiguous in ``a`` (a permute that keeps the last axis: ``[b, h, t, d] -> [b, t, h, d]``)
    `copy_rows` moves blocks of whole rows, one offset computation per row; when it moves,
    and ``a`` is contiguous along another axis, `transpose` (2-D) or `transpose_batched`
    move tiles read along ``a``'s contiguous axis and written along the copy's.
    """
    cshape, (ost, ast) = collapse(a.shape, [contiguous_strides(a.shape), a.strides])
    rank = len(cshape)
    if rank < 2:
        return None
    wide = a.size >= WIDE_FROM or sum((n - 1) * abs(s) for n, s in zip(cshape, ast,
                                                                       strict=True)) >= WIDE_FROM
    interp = be.memory.interpret
    mod = be.module("movement")
    item = a.dtype.itemsize
    if ast[-1] == 1:
        d = cshape[-1]
        if d < ROWS_MIN or rank - 1 > _MAX_BATCH:
            return None
        r = a.size // d
        nb = rank - 1
        sizes = (*cshape[1:nb], *(1,) * (_MAX_BATCH - nb))[:_MAX_BATCH - 1]
        strides = (*ast[:nb], *(0,) * (_MAX_BATCH - nb))
        # ROWS_BYTES a program on a GPU (rows of up to 1024 elements a block); the
        # interpreter takes what it can in one program
        per = INTERPRET_COPY if interp else max(1024, ROWS_BYTES // item)
        bd = min(_pow2(d), per if interp else 1024)
        br = max(1, min(_pow2(r), per // bd))
        meta: dict[str, Any] = {"NB": nb, "WIDE": wide, "BR": br, "BD": bd}
        if not interp:
            meta["num_warps"] = 4 if br * bd * item <= 1 << 13 else 8
        return (mod.copy_rows, (-(-r // br), -(-d // bd)), (r, d, *sizes, *strides), meta)
    if a.size < TRANSPOSE_MIN or 1 not in ast:
        return None
    k = ast.index(1)
    c = rank - 1
    kn, cn = cshape[k], cshape[c]
    # tiles of 16 KB (32 KB for 2-byte types), 8 warps: 3.74 / 3.96 TB/s for 4096² / 8192²
    # float32 and 3.88 for 8192² float16 on the H200 (`benchmarks/gpu/transpose_tiles.py`)
    block = (128 if item <= 2 else 64) if not interp else \
        1 << (INTERPRET_COPY.bit_length() - 1) // 2
    meta = {"WIDE": wide, **({} if interp else {"num_warps": 8})}
    if rank == 2:  # k == 0: a transposed matrix
        if cn >= 1 << 22:  # the grid's second axis: C / 64 programs at most
            return None
        return (mod.transpose, (-(-kn // block), -(-cn // block)), (kn, cn, 1, ast[c]),
                {**meta, "BR": block, "BC": block})
    batch = [i for i in range(rank) if i not in (k, c)]
    nb = len(batch)
    if nb > _MAX_BATCH:
        return None
    bk = min(block, _pow2(kn)) if interp else block
    bc = min(block, _pow2(cn)) if interp else block
    programs = -(-kn // bk) * -(-cn // bc) * (a.size // (kn * cn))
    if programs >= 1 << 31:
        return None
    pad = _MAX_BATCH - nb
    sizes = (*(cshape[i] for i in batch[1:]), *(1,) * pad)[:_MAX_BATCH - 1]
    xs = (*(ast[i] for i in batch), *(0,) * pad)
    os_ = (*(ost[i] for i in batch), *(0,) * pad)
    return (mod.transpose_batched, (programs,), (kn, cn, ast[c], ost[k], *sizes, *xs, *os_),
            {**meta, "NB": nb, "BK": bk, "BC": bc})
