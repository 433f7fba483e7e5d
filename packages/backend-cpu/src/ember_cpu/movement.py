"""Movement and indexing kernels: views where numpy gives them, copies where it must."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np
from ember.ops import movement as mv

from ._common import F32, F64, LOW
from ._jit import scatter_add_rows

__all__ = ["KERNELS", "sort"]


def _reshape(x: np.ndarray, shape: tuple[int, ...] = ()) -> np.ndarray:
    return x.reshape(shape)


def _permute(x: np.ndarray, dims: tuple[int, ...] = ()) -> np.ndarray:
    return x.transpose(dims)


def _slice(x: np.ndarray, starts: tuple[int, ...] = (), stops: tuple[int, ...] = (),
           steps: tuple[int, ...] = ()) -> np.ndarray:
    # slice.indices gives stop -1 for "through index 0" with a negative step; as a Python
    # slice -1 would mean the last element, so it becomes None
    return x[tuple([builtins.slice(a, None if (b < 0 and c < 0) else b, c)
                    for a, b, c in zip(starts, stops, steps, strict=True)])]


def _pad(x: np.ndarray, pad: tuple[tuple[int, int], ...] = (), value: Any = 0) -> np.ndarray:
    shape = tuple(n + a + b for n, (a, b) in zip(x.shape, pad, strict=True))
    out = np.full(shape, value, dtype=x.dtype)
    out[tuple(builtins.slice(a, a + n) for n, (a, _) in zip(x.shape, pad, strict=True))] = x
    return out


def _flip(x: np.ndarray, dims: tuple[int, ...] = ()) -> np.ndarray:
    return np.flip(x, axis=dims) if dims else x


def _cat(*xs: np.ndarray, dim: int = 0) -> np.ndarray:
    return np.concatenate(xs, axis=dim)


def _fit(x: np.ndarray, index: np.ndarray, dim: int) -> np.ndarray:
    """``x`` cut to ``index``'s sizes on every axis but ``dim`` (PyTorch allows smaller)."""
    if all(a == b for i, (a, b) in enumerate(zip(x.shape, index.shape, strict=True)) if i != dim):
        return x
    return x[tuple(builtins.slice(None) if i == dim else builtins.slice(0, n)
                   for i, n in enumerate(index.shape))]


def _gather(x: np.ndarray, index: np.ndarray, dim: int = 0) -> np.ndarray:
    if x.ndim == 0:
        return x
    return np.take_along_axis(_fit(x, index, dim), index, axis=dim)


def _coords(index: np.ndarray, dim: int) -> tuple[np.ndarray, ...]:
    grid = list(np.ogrid[tuple(builtins.slice(0, n) for n in index.shape)])
    grid[dim] = index
    return tuple(grid)


def _scatter_add(x: np.ndarray, index: np.ndarray, src: np.ndarray, dim: int = 0) -> np.ndarray:
    out = x.copy()
    if x.ndim == 0:
        return out + src if index.size else out
    src = _fit(src, index, dim)
    if out.dtype in (F32, F64) and src.dtype == out.dtype and dim == 0 and scatter_add_rows(
            out, index, src, dim):  # one compiled pass (embedding's and gather's gradient)
        return out
    if out.dtype in LOW:  # add in float32 so that duplicates do not round at every step
        acc = out.astype(F32)
        np.add.at(acc, _coords(index, dim), src.astype(F32))
        return acc.astype(out.dtype)
    np.add.at(out, _coords(index, dim), src)
    return out


def _scatter(x: np.ndarray, index: np.ndarray, src: np.ndarray, dim: int = 0) -> np.ndarray:
    out = x.copy()
    if x.ndim == 0:
        return src.copy() if index.size else out
    out[_coords(index, dim)] = _fit(src, index, dim)
    return out


def _index_select(x: np.ndarray, index: np.ndarray, dim: int = 0) -> np.ndarray:
    return np.take(x, index, axis=dim)


def _masked_fill(x: np.ndarray, mask: np.ndarray, value: Any = 0) -> np.ndarray:
    return np.where(mask, np.asarray(value).astype(x.dtype), x)


def _tril(x: np.ndarray, k: int = 0) -> np.ndarray:
    return np.tril(x, k)


def _triu(x: np.ndarray, k: int = 0) -> np.ndarray:
    return np.triu(x, k)


def _contiguous(x: np.ndarray) -> np.ndarray:
    return x if x.flags.c_contiguous else x.copy()


def _nonzero(x: np.ndarray) -> np.ndarray:
    return np.argwhere(x).astype(np.int64, copy=False)


def _keys(x: np.ndarray) -> np.ndarray:
    # float32 holds float16 and bfloat16 exactly and sorts faster than ml_dtypes' loops
    return x.astype(F32) if x.dtype in LOW else x


def sort(x: np.ndarray, dim: int = -1, descending: bool = False,
         stable: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Values and int64 indices of ``x`` sorted along ``dim``; nan sorts as the largest."""
    if x.ndim == 0:
        return x, np.zeros((), np.int64)
    keys = _keys(x)
    if not descending:
        idx = np.argsort(keys, axis=dim, kind="stable" if stable else None)
    else:
        # stable descending: sort the reversed input stably, reverse again, map back
        n = x.shape[dim]
        rev = np.argsort(np.flip(keys, axis=dim), axis=dim, kind="stable")
        idx = (n - 1) - np.flip(rev, axis=dim)
    idx = idx.astype(np.int64, copy=False)
    return np.take_along_axis(x, idx, axis=dim), idx


def _topk(x: np.ndarray, k: int = 1, dim: int = -1,
          largest: bool = True) -> tuple[np.ndarray, np.ndarray]:
    values, idx = sort(x, dim, descending=largest, stable=True)
    if x.ndim == 0:
        return values, idx
    cut = tuple(builtins.slice(0, k) if i == dim else builtins.slice(None) for i in range(x.ndim))
    return values[cut], idx[cut]


KERNELS: dict[Any, Any] = {
    mv.reshape: _reshape,
    mv.permute: _permute,
    mv.expand: np.broadcast_to,
    mv.slice: _slice,
    mv.pad: _pad,
    mv.flip: _flip,
    mv.cat: _cat,
    mv.gather: _gather,
    mv.scatter_add: _scatter_add,
    mv.scatter: _scatter,
    mv.index_select: _index_select,
    mv.masked_fill: _masked_fill,
    mv.tril: _tril,
    mv.triu: _triu,
    mv.contiguous: _contiguous,
    mv.nonzero: _nonzero,
    mv.sort: sort,
    mv.topk: _topk,
}
