"""Creation, elementwise, reduction and movement kernels: ``kernel(*arrays, **params)``.

Parameters arrive normalised by ember core (see ``ember/ops/*.py``): axes are non-negative and
sorted, shapes have no -1, binary inputs already share one dtype.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from ember import ops
from ember.backend import DType


def _np(dtype: DType) -> np.dtype[Any]:
    return np.dtype(dtype.numpy_name)


# -- creation ---------------------------------------------------------------------------------

def _rng(seed: int, offset: int) -> np.random.Generator:
    # counter-based, as ember asks: the same (seed, offset) always gives the same numbers
    return np.random.default_rng([seed, offset])


def rand(shape: tuple[int, ...], dtype: DType, seed: int, offset: int) -> np.ndarray:
    u = _rng(seed, offset).random(shape)
    if dtype.itemsize == 2:
        u = np.floor(u * 2048) / 2048  # a grid float16 holds exactly: never rounds up to 1
    return u.astype(_np(dtype))


def randn(shape: tuple[int, ...], dtype: DType, seed: int, offset: int) -> np.ndarray:
    return _rng(seed, offset).standard_normal(shape).astype(_np(dtype))


def randint(low: int, high: int, shape: tuple[int, ...], dtype: DType, seed: int,
            offset: int) -> np.ndarray:
    return _rng(seed, offset).integers(low, high, size=shape).astype(_np(dtype))


def arange(start: float, stop: float, step: float, dtype: DType) -> np.ndarray:
    n = max(math.ceil((stop - start) / step), 0)
    return (start + np.arange(n) * step).astype(_np(dtype))


# -- elementwise ------------------------------------------------------------------------------

def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype) if x.size else x


def _keep_ints(f: Any) -> Any:
    return lambda x: x.copy() if x.dtype.kind in "iub" else f(x)


def _pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.power(a, b)
    return out


UNARY = {
    ops.exp: np.exp, ops.expm1: np.expm1, ops.log: np.log, ops.log1p: np.log1p,
    ops.sqrt: np.sqrt, ops.rsqrt: lambda x: (1 / np.sqrt(x)).astype(x.dtype),
    ops.sin: np.sin, ops.cos: np.cos, ops.tan: np.tan, ops.tanh: np.tanh,
    ops.asin: np.arcsin, ops.acos: np.arccos, ops.atan: np.arctan, ops.sinh: np.sinh,
    ops.cosh: np.cosh, ops.erf: _erf,
    ops.sigmoid: lambda x: (1 / (1 + np.exp(-x))).astype(x.dtype),
    ops.reciprocal: lambda x: (1 / x).astype(x.dtype),
    ops.neg: np.negative, ops.abs: np.abs, ops.sign: np.sign,
    ops.floor: _keep_ints(np.floor), ops.ceil: _keep_ints(np.ceil),
    ops.round: _keep_ints(np.round), ops.trunc: _keep_ints(np.trunc),
    ops.logical_not: np.logical_not, ops.isnan: np.isnan, ops.isinf: np.isinf,
    ops.bitwise_not: np.invert,
}
BINARY = {
    ops.add: np.add, ops.sub: np.subtract, ops.mul: np.multiply,
    ops.floordiv: np.floor_divide, ops.remainder: np.remainder, ops.pow: _pow,
    ops.maximum: np.maximum, ops.minimum: np.minimum, ops.div: np.true_divide,
    ops.atan2: np.arctan2, ops.eq: np.equal, ops.ne: np.not_equal, ops.lt: np.less,
    ops.le: np.less_equal, ops.gt: np.greater, ops.ge: np.greater_equal,
    ops.logical_and: np.logical_and, ops.logical_or: np.logical_or,
    ops.logical_xor: np.logical_xor, ops.bitwise_and: np.bitwise_and,
    ops.bitwise_or: np.bitwise_or, ops.bitwise_xor: np.bitwise_xor,
    ops.left_shift: np.left_shift, ops.right_shift: np.right_shift,
}


def _unary(f: Any) -> Any:
    return lambda x: np.asarray(f(x))


def _binary(f: Any) -> Any:
    def kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.asarray(f(a, b))
        # numpy computes small float and int types in themselves; keep the input dtype
        return out if out.dtype == bool or out.dtype == a.dtype else out.astype(a.dtype)
    return kernel


def clamp(x: np.ndarray, min: Any, max: Any) -> np.ndarray:
    out = x if min is None else np.maximum(x, np.asarray(min, x.dtype))
    return np.asarray(out if max is None else np.minimum(out, np.asarray(max, x.dtype)))


# -- reductions -------------------------------------------------------------------------------

def _reduce(f: Any, **kw: Any) -> Any:
    def kernel(x: np.ndarray, dims: tuple[int, ...], keepdim: bool, **more: Any) -> np.ndarray:
        with warnings.catch_warnings():
            # the mean of nothing is nan (0 / 0), which numpy computes and warns about
            warnings.simplefilter("ignore", RuntimeWarning)
            out = np.asarray(f(x, axis=dims, keepdims=keepdim, **kw, **more))
        return out if out.dtype == bool else out.astype(x.dtype)
    return kernel


def var(x: np.ndarray, dims: Any, keepdim: bool, correction: int) -> np.ndarray:
    return np.asarray(np.var(x, axis=dims, keepdims=keepdim, ddof=correction)).astype(x.dtype)


def _arg(f: Any) -> Any:
    def kernel(x: np.ndarray, dim: int | None, keepdim: bool) -> np.ndarray:
        out = np.asarray(f(x if dim is not None else x.reshape(-1), axis=dim or 0))
        if keepdim:
            out = out.reshape((1,) * x.ndim) if dim is None else np.expand_dims(out, dim)
        return out.astype(np.int64)
    return kernel


def _cumulative(f: Any) -> Any:
    return lambda x, dim: x.copy() if x.ndim == 0 else np.asarray(f(x, axis=dim), x.dtype)


# -- movement ---------------------------------------------------------------------------------

def slice_(x: np.ndarray, starts: Any, stops: Any, steps: Any) -> np.ndarray:
    # with a negative step, stop -1 means "through index 0" (slice.indices' convention)
    key = tuple(slice(a, None if (b < 0 and c < 0) else b, c)
                for a, b, c in zip(starts, stops, steps, strict=True))
    return x[key].copy()


def pad(x: np.ndarray, pad: Any, value: Any) -> np.ndarray:
    return np.pad(x, pad, constant_values=np.asarray(value, x.dtype))


def _index_grid(index: np.ndarray, dim: int) -> tuple[np.ndarray, ...]:
    grid: list[np.ndarray] = list(np.indices(index.shape, sparse=True))
    grid[dim] = index
    return tuple(grid)


def scatter_add(x: np.ndarray, index: np.ndarray, src: np.ndarray, dim: int) -> np.ndarray:
    out = x.copy()
    part = src[tuple(slice(0, n) for n in index.shape)]
    np.add.at(out, _index_grid(index, dim), part)
    return out


def scatter(x: np.ndarray, index: np.ndarray, src: np.ndarray, dim: int) -> np.ndarray:
    out = x.copy()
    part = src if src.ndim == 0 else src[tuple(slice(0, n) for n in index.shape)]
    out[_index_grid(index, dim)] = part
    return out


def gather(x: np.ndarray, index: np.ndarray, dim: int) -> np.ndarray:
    return x[_index_grid(index, dim)] if x.ndim else x.copy()


def sort(x: np.ndarray, dim: int, descending: bool, stable: bool = True) -> Any:
    if descending:  # stable descending: ties keep their order
        n = x.shape[dim]
        idx = n - 1 - np.flip(np.argsort(np.flip(x, dim), axis=dim, kind="stable"), dim)
    else:
        idx = np.argsort(x, axis=dim, kind="stable")
    return np.take_along_axis(x, idx, dim), idx.astype(np.int64)


def topk(x: np.ndarray, k: int, dim: int, largest: bool) -> Any:
    values, idx = sort(x, dim, largest)
    take = tuple(slice(0, k) if i == dim else slice(None) for i in range(x.ndim))
    return values[take].copy(), idx[take].copy()


TABLE: dict[Any, Any] = {
    ops.full: lambda shape, value, dtype: np.full(shape, value, _np(dtype)),
    ops.arange: arange, ops.rand: rand, ops.randn: randn, ops.randint: randint,
    ops.cast: lambda x, dtype: np.asarray(x.astype(_np(dtype))),
    **{op: _unary(f) for op, f in UNARY.items()},
    **{op: _binary(f) for op, f in BINARY.items()},
    ops.where: lambda c, a, b: np.where(c, a, b),
    ops.clamp: clamp,
    ops.matmul: lambda a, b: np.asarray(np.matmul(a, b)),
    ops.sum: _reduce(np.sum), ops.prod: _reduce(np.prod), ops.mean: _reduce(np.mean),
    ops.max: _reduce(np.max), ops.min: _reduce(np.min), ops.var: var,
    ops.any: _reduce(np.any), ops.all: _reduce(np.all),
    ops.argmax: _arg(np.argmax), ops.argmin: _arg(np.argmin),
    ops.cumsum: _cumulative(np.cumsum), ops.cumprod: _cumulative(np.cumprod),
    ops.reshape: lambda x, shape: x.reshape(shape).copy(),
    ops.permute: lambda x, dims: x.transpose(dims).copy(),
    ops.expand: lambda x, shape: np.broadcast_to(x, shape).copy(),
    ops.slice: slice_, ops.pad: pad,
    ops.flip: lambda x, dims: np.flip(x, dims).copy(),
    ops.cat: lambda *xs, dim: np.concatenate(xs, axis=dim),
    ops.gather: gather, ops.scatter_add: scatter_add, ops.scatter: scatter,
    ops.index_select: lambda x, index, dim: np.take(x, index, axis=dim),
    ops.masked_fill: lambda x, mask, value: np.where(mask, np.asarray(value, x.dtype), x),
    ops.tril: lambda x, k: np.tril(x, k), ops.triu: lambda x, k: np.triu(x, k),
    ops.contiguous: lambda x: x.copy(),
    ops.nonzero: lambda x: np.argwhere(x).astype(np.int64),
    ops.sort: sort, ops.topk: topk,
}
