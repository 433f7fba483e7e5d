"""Reductions over sorted axis tuples, scans, and arg-reductions.

float16 and bfloat16 accumulate in float32 and cast back, as PyTorch does; results are always
ndarrays (numpy returns scalars from full reductions).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from ember.ops import reduction as rd

from ._common import F32, LOW, quiet

__all__ = ["KERNELS"]


def _accumulating(ufunc: Any) -> Any:
    # ufunc.reduce skips the array-function layer of np.sum (~3 µs on small inputs)
    reduce = ufunc.reduce

    def kernel(x: np.ndarray, dims: tuple[int, ...] = (), keepdim: bool = False) -> np.ndarray:
        dt = x.dtype
        if dt in LOW:
            return np.asarray(reduce(x, axis=dims, dtype=F32, keepdims=keepdim)).astype(dt)
        return np.asarray(reduce(x, axis=dims, dtype=dt, keepdims=keepdim))

    kernel.__name__ = ufunc.__name__
    return kernel


def _mean(x: np.ndarray, dims: tuple[int, ...] = (), keepdim: bool = False) -> np.ndarray:
    dt = x.dtype
    n = math.prod(x.shape[d] for d in dims)
    acc = F32 if dt in LOW else dt
    total = np.add.reduce(  # type: ignore[call-overload]  # stubs want a literal keepdims
        x, axis=dims, dtype=acc, keepdims=keepdim)
    return np.asarray(total / n if n else total * np.nan).astype(dt, copy=False)


def _extreme(ufunc: Any) -> Any:
    # maximum/minimum.reduce propagate nan, as PyTorch's max/min do
    reduce = ufunc.reduce

    def kernel(x: np.ndarray, dims: tuple[int, ...] = (), keepdim: bool = False) -> np.ndarray:
        return np.asarray(reduce(x, axis=dims, keepdims=keepdim))

    kernel.__name__ = ufunc.__name__
    return kernel


def _var(x: np.ndarray, dims: tuple[int, ...] = (), keepdim: bool = False,
         correction: float = 1) -> np.ndarray:
    dt = x.dtype
    xs = x.astype(F32) if dt in LOW else x
    n = math.prod(x.shape[d] for d in dims)
    mean = np.add.reduce(xs, axis=dims, keepdims=True) / max(n, 1)
    dev = xs - mean
    # Note: no numpy "degrees of freedom" warning: n <= correction gives inf or nan as PyTorch
    ss = np.add.reduce(  # type: ignore[call-overload]  # stubs want a literal keepdims
        dev * dev, axis=dims, keepdims=keepdim)
    return np.asarray(ss / max(n - correction, 0)).astype(dt, copy=False)


def _logical(ufunc: Any) -> Any:
    reduce = ufunc.reduce

    def kernel(x: np.ndarray, dims: tuple[int, ...] = (), keepdim: bool = False) -> np.ndarray:
        return np.asarray(reduce(x, axis=dims, dtype=np.bool_, keepdims=keepdim))

    return kernel


def _arg(fn: Any) -> Any:
    def kernel(x: np.ndarray, dim: int | None = None, keepdim: bool = False) -> np.ndarray:
        return np.asarray(fn(x, axis=dim, keepdims=keepdim), dtype=np.int64)

    return kernel


def _scan(fn: Callable[..., np.ndarray]) -> Any:
    def kernel(x: np.ndarray, dim: int = 0) -> np.ndarray:
        dt = x.dtype
        if x.ndim == 0:
            return x
        if dt in LOW:
            return fn(x, axis=dim, dtype=F32).astype(dt)
        return fn(x, axis=dim, dtype=dt)

    return kernel


KERNELS: dict[Any, Any] = {
    rd.sum: quiet(_accumulating(np.add)),
    rd.prod: quiet(_accumulating(np.multiply)),
    rd.mean: quiet(_mean),
    rd.max: quiet(_extreme(np.maximum)),  # bfloat16 nan warns in ufunc.reduce
    rd.min: quiet(_extreme(np.minimum)),
    rd.var: quiet(_var),
    rd.any: _logical(np.logical_or),
    rd.all: _logical(np.logical_and),
    rd.argmax: _arg(np.argmax),
    rd.argmin: _arg(np.argmin),
    rd.cumsum: quiet(_scan(np.cumsum)),
    rd.cumprod: quiet(_scan(np.cumprod)),
}
