"""Movement and indexing: views where strides allow, strided copies, index kernels, sort."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from ember.backend import strided
from ember.backend.movement import first_k
from ember.backend.strided import view_strides
from ember.ops import movement as mv

from ._array import DeviceArray, contiguous_strides, dtype_name, kind_of
from ._codegen import TL, contiguous, copy_into, elementwise, exact_compare

if TYPE_CHECKING:
    from .backend import TritonBackend

__all__ = ["KERNELS", "VIEWS", "sort", "view_strides"]


def reshape(be: TritonBackend, x: DeviceArray, shape: tuple[int, ...] = ()) -> DeviceArray:
    """A view where the strides allow one (as numpy's reshape), else a contiguous copy."""
    shape = tuple(shape)
    strides = view_strides(x.shape, x.strides, shape)
    if strides is not None:
        return x.view(shape, strides, x.offset)
    src = contiguous(be, x)
    return src.view(shape, contiguous_strides(shape), src.offset)


def _pad(be: TritonBackend, x: DeviceArray, pad: tuple[tuple[int, int], ...] = (),
         value: Any = 0) -> DeviceArray:
    from .creation import full

    out = full(be, strided.padded_shape(x.shape, pad), value, x.dtype)
    if x.size:
        copy_into(be, x, strided.pad_interior(out, x.shape, pad))
    return out


def _cat(be: TritonBackend, *xs: DeviceArray, dim: int = 0) -> DeviceArray:
    shape = list(xs[0].shape)
    shape[dim] = sum(x.shape[dim] for x in xs)
    out = be.empty(tuple(shape), xs[0].dtype)
    parts = strided.cat_parts(out, [x.shape[dim] for x in xs], dim)
    for part, x in zip(parts, xs, strict=True):
        if x.size:
            copy_into(be, x, part)
    return out


#: the ops that only make a view (`ember.backend.strided.StridedView`'s)
VIEWS: dict[Any, Any] = {
    mv.permute: lambda be, x, dims=(): x.permute(dims),
    mv.expand: lambda be, x, shape=(): x.broadcast_to(shape),
    mv.slice: lambda be, x, starts=(), stops=(), steps=(): x.slice(starts, stops, steps),
    mv.flip: lambda be, x, dims=(): x.flip(dims),
}


# -- index kernels, generated per rank ---------------------------------------------------------

def _coords(rank: int) -> list[str]:
    lines = ["    rem = offs"]
    for d in reversed(range(rank)):
        lines += [f"    c{d} = rem % S{d}", f"    rem = rem // S{d}"] if d else ["    c0 = rem"]
    return lines


def _dot(prefix: str, rank: int, skip: int = -1, repl: str = "") -> str:
    terms = [repl if d == skip else f"c{d} * {prefix}{d}" for d in range(rank)]
    return " + ".join(terms) or "0"


def _index_kernel(be: TritonBackend, kind: str, rank: int, dim: int, dtype: np.dtype[Any],
                  index_dtype: np.dtype[Any]) -> Any:
    """gather / index_select / scatter / scatter_add over a rank-``rank`` index space."""
    name = f"ember_{kind}"
    args = ["out", "src", "idx", "n", "size"] + [f"S{d}" for d in range(rank)]
    args += [f"X{d}" for d in range(rank)] + [f"Y{d}" for d in range(rank)]
    args += [f"I{d}" for d in range(rank)]
    lines = ["@triton.jit", f"def {name}({', '.join(args)}, BLOCK: tl.constexpr):",
             "    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
             "    mask = offs < n", *_coords(rank)]
    ioff = f"c{dim} * I{dim}" if kind == "index_select" else _dot("I", rank)
    lines.append(f"    iv = tl.load(idx + {ioff}, mask=mask, other=0).to(tl.int64)")
    # negative indices wrap once; one still outside [0, size) reads and writes nothing (a
    # gather gives 0 there): core has recorded the error, which surfaces at the next sync
    lines.append("    iv = tl.where(iv < 0, iv + size, iv)")
    lines.append("    inside = mask & (iv >= 0) & (iv < size)")
    lines.append("    iv = tl.where(inside, iv, 0)")
    # X: strides of the indexed array, Y: strides of the other operand
    xoff = _dot("X", rank, dim, f"iv * X{dim}")
    if kind in ("gather", "index_select"):
        lines.append(f"    v = tl.load(src + {xoff}, mask=inside, other=0)")
        lines.append(f"    tl.store(out + {_dot('Y', rank)}, v, mask=mask)")
    else:
        lines.append(f"    v = tl.load(src + {_dot('Y', rank)}, mask=mask)")
        if kind == "scatter":
            lines.append(f"    tl.store(out + {xoff}, v, mask=inside)")
        else:
            lines.append(f"    tl.atomic_add(out + {xoff}, v.to({TL[dtype.name]}), mask=inside)")
    source = "\n".join(lines) + "\n"
    key = (kind, rank, dim, dtype, index_dtype, "bounded")
    return be.library.generated(key, name, source, be.kernel_scope)


def _launch_index(be: TritonBackend, kind: str, out: DeviceArray, src: DeviceArray,
                  index: DeviceArray, space: tuple[int, ...], dim: int, x_strides: Any,
                  y_strides: Any, dtype: np.dtype[Any], size: int) -> None:
    """``size``: the length of the indexed axis (indices are valid in ``[-size, size)``)."""
    n = math.prod(space)
    if n == 0:
        return
    rank = len(space)
    kernel = _index_kernel(be, kind, rank, dim, dtype, index.dtype)
    block = be.block_size(n)
    be.launch(kernel, (-(-n // block),), out, src, index, n, size, *space, *x_strides,
              *y_strides, *index.strides, BLOCK=block)


def _as1d(x: DeviceArray) -> DeviceArray:
    return x.view((1,), (1,), x.offset) if x.ndim == 0 else x


def gather(be: TritonBackend, x: DeviceArray, index: DeviceArray, dim: int = 0) -> DeviceArray:
    if x.ndim == 0:
        return x
    out = be.empty(index.shape, x.dtype)
    _launch_index(be, "gather", out, x, index, index.shape, dim, x.strides, out.strides,
                  x.dtype, x.shape[dim])
    return out


def _index_select(be: TritonBackend, x: DeviceArray, index: DeviceArray,
                  dim: int = 0) -> DeviceArray:
    shape = tuple(index.shape[0] if i == dim else n for i, n in enumerate(x.shape))
    out = be.empty(shape, x.dtype)
    # the index is read at c[dim] * its stride: give it that stride on axis ``dim`` only
    idx = index.view(shape, tuple(index.strides[0] if i == dim else 0 for i in range(x.ndim)),
                     index.offset)
    _launch_index(be, "index_select", out, x, idx, shape, dim, x.strides, out.strides, x.dtype,
                  x.shape[dim])
    return out


_ACC = {"float16": np.float32, "bfloat16": np.float32, "int8": np.int32, "int16": np.int32,
        "uint8": np.int32, "bool": np.int32}


def _scatter_common(be: TritonBackend, kind: str, x: DeviceArray, index: DeviceArray,
                    src: DeviceArray, dim: int) -> DeviceArray:
    from .creation import cast

    zero_d = x.ndim == 0
    x, index, src = _as1d(x), _as1d(index), _as1d(src)
    acc = np.dtype(_ACC.get(dtype_name(x.dtype), x.dtype)) if kind == "scatter_add" else x.dtype
    out = contiguous(be, cast(be, x, acc)) if acc != x.dtype else be.empty(x.shape, x.dtype)
    if acc == x.dtype:
        copy_into(be, x, out)
    srcv = cast(be, src, acc) if kind == "scatter_add" and acc != src.dtype else src
    _launch_index(be, kind, out, srcv, index, index.shape, dim, out.strides, srcv.strides, acc,
                  out.shape[dim])
    if acc != x.dtype:
        out = cast(be, out, x.dtype)
    return out.view((), (), out.offset) if zero_d else out


def _scatter_add(be: TritonBackend, x: DeviceArray, index: DeviceArray, src: DeviceArray,
                 dim: int = 0) -> DeviceArray:
    return _scatter_common(be, "scatter_add", x, index, src, dim)


def _scatter(be: TritonBackend, x: DeviceArray, index: DeviceArray, src: DeviceArray,
             dim: int = 0) -> DeviceArray:
    return _scatter_common(be, "scatter", x, index, src, dim)


def _masked_fill(be: TritonBackend, x: DeviceArray, mask: DeviceArray,
                 value: Any = 0) -> DeviceArray:
    return elementwise(be, "r = tl.where(x1, s0, x0)", [x, mask], x.dtype,
                       scalars=[be.scalar(value, x.dtype)], widen=False, shape=x.shape)


def _triangle(be: TritonBackend, x: DeviceArray, k: int, lower: bool) -> DeviceArray:
    src = contiguous(be, x)
    out = be.empty(x.shape, x.dtype)
    n = x.size
    if n:
        r, c = x.shape[-2], x.shape[-1]
        block = be.block_size(n)
        be.launch(be.module("movement").triangle, (-(-n // block),), out, src, n, r, c, int(k),
                  LOWER=lower, BLOCK=block)
    return out


def _tril(be: TritonBackend, x: DeviceArray, k: int = 0) -> DeviceArray:
    return _triangle(be, x, k, True)


def _triu(be: TritonBackend, x: DeviceArray, k: int = 0) -> DeviceArray:
    return _triangle(be, x, k, False)


def _contiguous(be: TritonBackend, x: DeviceArray) -> DeviceArray:
    return contiguous(be, x)


def _nonzero(be: TritonBackend, x: DeviceArray) -> DeviceArray:
    from .creation import cast
    from .reduction import scan

    ndim = x.ndim
    flags = cast(be, contiguous(be, x), np.bool_) if kind_of(x.dtype) != "b" else contiguous(be, x)
    flat = flags.view((x.size,), (1,), flags.offset)
    if x.size == 0:
        return be.empty((0, ndim), np.int64)
    csum = scan(be, cast(be, flat, np.int64), 0, "sum")
    total = int(be.memory.to_numpy(csum.view((1,), (1,), csum.offset + x.size - 1))[0])
    out = be.empty((total, ndim), np.int64)
    if total and ndim:
        block = be.block_size(x.size)
        if ndim > 8:
            raise NotImplementedError("nonzero: at most 8 dimensions on Triton backends")
        sizes = list(x.shape) + [1] * (8 - ndim)
        be.launch(be.module("movement").nonzero_rows, (-(-x.size // block),), out, flat, csum,
                  x.size, ndim, *sizes, BLOCK=block)
    return out


def sort(be: TritonBackend, x: DeviceArray, dim: int = -1, descending: bool = False,
         stable: bool = False) -> tuple[DeviceArray, DeviceArray]:
    """Values and int64 indices sorted along ``dim`` (always stable; nan sorts largest)."""
    if x.ndim == 0:
        from .creation import full

        return x, full(be, (), 0, np.int64)
    dim = dim % x.ndim
    from .creation import cast

    dtype, x = x.dtype, exact_compare(be, x)
    perm = (*tuple(i for i in range(x.ndim) if i != dim), dim)
    inv = tuple(np.argsort(perm))
    rows = contiguous(be, x.transpose(perm))
    k = x.shape[dim]
    m = rows.size // k if k else 0
    vals = be.empty(rows.shape, x.dtype)
    idxs = be.empty(rows.shape, np.int64)
    if rows.size:
        bi = min(be.block_size(k, 128), 1024 if be.memory.interpret else 128)
        bj = min(be.block_size(k, 64), 1024 if be.memory.interpret else 64)
        be.launch(be.module("movement").rank_sort, (m, -(-k // bi)), vals, idxs, rows, k,
                  DESCENDING=bool(descending), FLOAT=kind_of(x.dtype) == "f", BLOCK_I=bi,
                  BLOCK_J=bj)
    return cast(be, vals, dtype).transpose(inv), idxs.transpose(inv)


def _topk(be: TritonBackend, x: DeviceArray, k: int = 1, dim: int = -1,
          largest: bool = True) -> tuple[DeviceArray, DeviceArray]:
    values, idx = sort(be, x, dim, descending=largest, stable=True)
    if x.ndim == 0:
        return values, idx
    dim = dim % x.ndim
    return contiguous(be, first_k(values, k, dim)), contiguous(be, first_k(idx, k, dim))


KERNELS: dict[Any, Any] = {
    **VIEWS,
    # copies where a view cannot do
    mv.reshape: reshape, mv.contiguous: _contiguous, mv.pad: _pad, mv.cat: _cat,
    # index kernels
    mv.gather: gather, mv.index_select: _index_select, mv.nonzero: _nonzero,
    mv.scatter: _scatter, mv.scatter_add: _scatter_add,
    # masks
    mv.masked_fill: _masked_fill, mv.tril: _tril, mv.triu: _triu,
    # sorting
    mv.sort: sort, mv.topk: _topk,
}
