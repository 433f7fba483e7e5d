"""Reductions: the reduced axes are moved last and made contiguous, then rows are reduced.

float16 and bfloat16 accumulate in float32 (as PyTorch does); rows longer than a chunk on a
GPU with few rows are split over many programs and finished in a second pass.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from ember.ops import reduction as rd

from ._array import DeviceArray, dtype_name, kind_of
from ._codegen import TL, collapse, contiguous, exact_compare

if TYPE_CHECKING:
    from .backend import TritonBackend

__all__ = ["KERNELS", "SECOND", "reduce_matrix", "rows_of", "scan"]

_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "any": 4, "all": 5}
_LOW = ("float16", "bfloat16")


def rows_of(be: TritonBackend, x: DeviceArray,
            dims: tuple[int, ...]) -> tuple[DeviceArray, int, int, tuple[int, ...]]:
    """``x`` as a contiguous ``[M, K]`` array whose rows run over ``dims``."""
    keep = tuple(i for i in range(x.ndim) if i not in dims)
    rows = contiguous(be, x.transpose(keep + tuple(dims)))
    k = math.prod(x.shape[d] for d in dims)
    m = math.prod(x.shape[d] for d in keep)
    return rows, m, k, tuple(x.shape[d] for d in keep)


def _out_shape(x: DeviceArray, dims: tuple[int, ...], keepdim: bool,
               kept: tuple[int, ...]) -> tuple[int, ...]:
    if keepdim:
        return tuple(1 if i in dims else n for i, n in enumerate(x.shape))
    return kept


def _acc_dtype(op: str, dt: np.dtype[Any]) -> np.dtype[Any]:
    if op in ("any", "all"):
        return np.dtype(np.int32)
    if dtype_name(dt) in _LOW:
        return np.dtype(np.float32)
    if kind_of(dt) == "b":
        return np.dtype(np.uint8)
    return dt


def _identity(op: str, acc: np.dtype[Any]) -> Any:
    if op in ("sum", "any"):
        return 0
    if op in ("prod", "all"):
        return 1
    if kind_of(acc) == "f":
        return -np.inf if op == "max" else np.inf
    info = np.iinfo(acc)
    return info.min if op == "max" else info.max


#: how a row of the reduced matrix walks memory: one stride, or ``(outer stride, inner size,
#: inner stride)`` for two axes that do not merge (a sum over batch and spatial axes)
RowWalk = int | tuple[int, int, int]


def _matrix(be: TritonBackend, x: DeviceArray,
            dims: tuple[int, ...]) -> tuple[DeviceArray, int, int, int, RowWalk, tuple[int, ...]]:
    """``x`` as an ``[M, K]`` matrix whose rows run over ``dims``: ``(x, M, K, SM, SK, kept
    shape)`` with element strides ``SM`` and ``SK`` (see `RowWalk`).  The kept axes must
    merge into one strided axis and the reduced ones into at most two; otherwise the rows are
    copied out first (`rows_of`)."""
    keep = tuple(i for i in range(x.ndim) if i not in dims)
    kept = tuple(x.shape[d] for d in keep)
    m = math.prod(kept)
    k = math.prod(x.shape[d] for d in dims)
    sm = _merged_stride(x, keep)
    sk = _merged_stride(x, dims, levels=2)
    if sm is None or sk is None:
        rows, m, k, kept = rows_of(be, x, dims)
        return rows, m, k, k, 1, kept
    return x, m, k, sm, sk, kept


def _merged_stride(x: DeviceArray, axes: tuple[int, ...], levels: int = 1) -> Any:
    """The stride that walks ``axes`` of ``x`` (in order) as a single axis, or with
    ``levels=2`` a two-level `RowWalk`; ``None`` if there is none."""
    shape, (strides,) = collapse(tuple(x.shape[a] for a in axes),
                                 [tuple(x.strides[a] for a in axes)])
    if len(shape) > levels:
        return None
    if len(shape) == 2:
        return strides[0], shape[1], strides[1]
    return strides[0] if shape else 1


def reduce_matrix(be: TritonBackend, rows: DeviceArray, m: int, k: int, op: str,
                 out_dtype: np.dtype[Any], sm: int | None = None,
                 walk: RowWalk = 1, plan: list[Any] | None = None) -> DeviceArray:
    """``[m]`` = the reduction of each row of ``rows`` (``m x k``, rows ``sm`` apart, walked
    by ``walk``).  Where that was one recorded launch, ``plan`` (if given) receives
    ``(entry, grid, identity array, scalars)`` to replay it (see `_reduction`)."""
    two = type(walk) is tuple
    sk, k2, sk2 = walk if type(walk) is tuple else (walk, 1, 0)
    acc = _acc_dtype(op, rows.dtype)
    ident = be.scalar(_identity(op, acc), acc)
    kern = be.module("reduction").reduce_rows
    flt = kind_of(rows.dtype) == "f" and op in ("max", "min")
    sm = k if sm is None else sm
    if (sk2 if two else sk) == 1 or be.memory.interpret:
        bm, bk = _blocks(be, m, k)
    else:  # columns: neighbouring rows are what is contiguous, so blocks run down them
        bm = min(64, be.block_size(m))
        bk = max(1, 2048 // bm)
    parts = _parts(be, m, k, bm)
    if parts > 1:
        # too few programs for the GPU (few long rows, or a column sum of a [tokens, features]
        # matrix): split every row into ``parts`` pieces, then reduce the ``[m, parts]`` partials
        chunk = -(-k // parts)
        bk = min(bk, be.block_size(chunk))
        chunk = -(-chunk // bk) * bk
        parts = -(-k // chunk)
        partial = be.empty((m, parts), acc)
        be.launch(kern, (-(-m // bm), parts), partial, rows, ident, m, k, sm, sk, k2, sk2,
                  chunk, OP=_OPS[op], FLOAT=flt, TWO_LEVEL=two, BLOCK_M=bm, BLOCK_K=bk)
        return reduce_matrix(be, partial, m, parts, SECOND[op], out_dtype)
    out = be.empty((m,), out_dtype)
    if m:
        scalars = (m, k, sm, sk, k2, sk2, max(k, 1))
        key = ("reduce_rows", op, rows.dtype, out_dtype, ident.dtype, scalars, two, bm, bk)
        grid = (-(-m // bm), 1)
        be.launch_planned(key, kern, grid, (out, rows, ident), scalars, OP=_OPS[op],
                          FLOAT=flt, TWO_LEVEL=two, BLOCK_M=bm, BLOCK_K=bk)
        entry = be._planned.get(key)
        if plan is not None and entry is not None:
            plan.append((entry, grid, ident, scalars))
    return out


#: how the partial results of a split reduction combine
SECOND = {"sum": "sum", "mean": "sum", "prod": "prod", "max": "max", "min": "min", "any": "max",
           "all": "min"}


def _parts(be: TritonBackend, m: int, k: int, bm: int) -> int:
    """Into how many pieces to split each of ``m`` rows of ``k`` (``bm`` rows a program) so
    that the GPU gets about four programs per multiprocessor, each reducing at least
    ``reduce_chunk / 4`` elements (1 = no split).  Not on the interpreter unless a test turns
    ``split_reductions`` on: its programs run one after another."""
    if not be.split_reductions or not m:
        return 1
    programs = -(-m // bm)
    want = 4 * be.processors
    if programs * 2 > want:
        return 1
    piece = max(16, be.reduce_chunk // 4 // bm)  # elements of a row per program, at least
    return max(1, min(-(-want // programs), k // piece))


def _blocks(be: TritonBackend, m: int, k: int) -> tuple[int, int]:
    if be.memory.interpret:
        bk = be.block_size(k, 1 << 12)
        bm = max(1, min(be.block_size(m), (1 << 14) // bk))
        return bm, min(bk, 1 << 12)
    bk = min(be.block_size(k), 1024)
    return max(1, 2048 // bk), bk


def _reduction(op: str) -> Any:
    def kernel(be: TritonBackend, x: DeviceArray, dims: tuple[int, ...] = (),
               keepdim: bool = False) -> DeviceArray:
        dims = tuple(dims)
        # a recurring reduction that ran as one launch on ``x`` itself replays it
        pkey = (op, x.shape, x.strides, x.dtype, dims, keepdim)
        known = be.reduce_plans.get(pkey)
        if known is not None:
            entry, grid, ident, scalars, m, out_dtype, shape, strides = known
            out = be.empty((m,), out_dtype)
            if not (out.ptr | x.ptr | ident.ptr) & 15:
                if be.capture_keep is not None:  # as `TritonBackend.scalar` does
                    be.capture_keep.append(ident)
                entry(grid, be.memory.stream(), [out.ptr, x.ptr, ident.ptr, *scalars])
                return out.view(shape, strides, 0)
        mat, m, k, sm, sk, kept = _matrix(be, x, dims)
        out_dtype = np.dtype(np.bool_) if op in ("any", "all") else x.dtype
        plan: list[Any] = []
        out = reduce_matrix(be, mat, m, k, op, out_dtype, sm, sk, plan)
        shape = _out_shape(x, dims, keepdim, kept)
        if plan and mat is x:
            if len(be.reduce_plans) >= 4096:
                be.reduce_plans.clear()
            be.reduce_plans[pkey] = (*plan[0], m, out_dtype, shape, _contig(shape))
        return out.view(shape, _contig(shape), out.offset)

    kernel.__name__ = op
    return kernel


def _contig(shape: tuple[int, ...]) -> tuple[int, ...]:
    from ._array import contiguous_strides

    return contiguous_strides(shape)


def _moments(var: bool) -> Any:
    def kernel(be: TritonBackend, x: DeviceArray, dims: tuple[int, ...] = (),
               keepdim: bool = False, correction: float = 1) -> DeviceArray:
        dims = tuple(dims)
        if not var:
            mat, m, k, sm, sk, kept = _matrix(be, x, dims)
            if k and _parts(be, m, k, 1) > 1:  # few long rows (the mean of a loss)
                from .elementwise import Expression, run

                total = reduce_matrix(be, mat, m, k, "sum", _acc_dtype("sum", x.dtype), sm, sk)
                out = run(be, Expression("r = x0 * s0", x.dtype,
                                         scalars=((1.0 / k, total.dtype),)), [total])
                shape = _out_shape(x, dims, keepdim, kept)
                return out.view(shape, _contig(shape), out.offset)
        rows, m, k, kept = rows_of(be, x, dims)
        out = be.empty((m,), x.dtype)
        if m:
            bm, bk = _blocks(be, m, k)
            denom = float(max(k - correction, 0)) if var else 1.0
            be.launch(be.module("reduction").mean_var_rows, (-(-m // bm),), out, rows, m, k,
                      denom, VAR=var, WIDE=dtype_name(x.dtype) == "float64", BLOCK_M=bm, BLOCK_K=bk)
        shape = _out_shape(x, dims, keepdim, kept)
        return out.view(shape, _contig(shape), out.offset)

    return kernel


def _arg(is_max: bool) -> Any:
    def kernel(be: TritonBackend, x: DeviceArray, dim: int | None = None,
               keepdim: bool = False) -> DeviceArray:
        from .creation import cast

        if kind_of(x.dtype) == "b":
            x = cast(be, x, np.uint8)
        x = exact_compare(be, x)
        if dim is None:
            rows, m, k, kept = rows_of(be, x, tuple(range(x.ndim)))
            shape: tuple[int, ...] = (1,) * x.ndim if keepdim else ()
        else:
            rows, m, k, kept = rows_of(be, x, (dim,))
            shape = _out_shape(x, (dim,), keepdim, kept)
        acc = rows.dtype
        ident = be.scalar(_identity("max" if is_max else "min", acc), acc)
        out = be.empty((m,), np.int64)
        if m:
            bm, bk = _blocks(be, m, k)
            be.launch(be.module("reduction").arg_rows, (-(-m // bm),), out, rows, ident, m, k,
                      IS_MAX=is_max, FLOAT=kind_of(acc) == "f", BLOCK_M=bm, BLOCK_K=bk)
        return out.view(shape, _contig(shape), out.offset)

    return kernel


def scan(be: TritonBackend, x: DeviceArray, dim: int, kind: str) -> DeviceArray:
    """Inclusive cumulative sum or product along ``dim``."""
    if x.ndim == 0:
        return x
    perm = (*tuple(i for i in range(x.ndim) if i != dim), dim)
    inv = tuple(int(i) for i in np.argsort(perm))
    rows = contiguous(be, x.transpose(perm))
    k = x.shape[dim]
    m = rows.size // k if k else 0
    out = be.empty(rows.shape, x.dtype)
    if m and k:
        acc = "tl.float32" if dtype_name(x.dtype) in _LOW else TL[dtype_name(x.dtype)]
        import triton.language as tl

        bm, bk = _blocks(be, m, k)
        be.launch(be.module("reduction").scan_rows, (-(-m // bm),), out, rows, m, k,
                  PROD=kind == "prod", BLOCK_M=bm, BLOCK_K=bk,
                  ACC=getattr(tl, acc.split(".")[1]))
    return out.transpose(inv)


def _scan(kind: str) -> Any:
    def kernel(be: TritonBackend, x: DeviceArray, dim: int = 0) -> DeviceArray:
        return scan(be, x, dim, kind)

    return kernel


KERNELS: dict[Any, Any] = {
    rd.sum: _reduction("sum"),
    rd.prod: _reduction("prod"),
    rd.max: _reduction("max"),
    rd.min: _reduction("min"),
    rd.any: _reduction("any"),
    rd.all: _reduction("all"),
    rd.mean: _moments(False),
    rd.var: _moments(True),
    rd.argmax: _arg(True),
    rd.argmin: _arg(False),
    rd.cumsum: _scan("sum"),
    rd.cumprod: _scan("prod"),
}
