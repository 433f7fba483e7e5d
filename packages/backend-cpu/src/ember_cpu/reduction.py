"""Reductions over sorted axis tuples, scans, and arg-reductions.

float16 and bfloat16 accumulate in float32 and cast back, as PyTorch does; results are always
ndarrays (numpy returns scalars from full reductions).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from ember.ops import reduction as rd

from ._common import F32, LOW, quiet

__all__ = ["KERNELS"]


def _accumulating(fn: Any) -> Any:
    def kernel(x: np.ndarray, dims: tuple[int, ...] = (), keepdim: bool = False) -> np.ndarray:
        dt = x.dtype
        if dt in LOW:
            return np.asarray(fn(x, axis=dims, dtype=F32, keepdims=keepdim)).astype(dt)
        return np.asarray(fn(x, axis=dims, keepdims=keepdim), dtype=dt)

    kernel.__name__ = fn.__name__
    return kernel


def _extreme(fn: Any) -> Any:
    # max/min propagate nan (numpy's maximum.reduce does)
    def kernel(x: np.ndarray, dims: tuple[int, ...] = (), keepdim: bool = False) -> np.ndarray:
        return np.asarray(fn(x, axis=dims, keepdims=keepdim))

    kernel.__name__ = fn.__name__
    return kernel


def _var(x: np.ndarray, dims: tuple[int, ...] = (), keepdim: bool = False,
         correction: float = 1) -> np.ndarray:
    dt = x.dtype
    xs = x.astype(F32) if dt in LOW else x
    n = math.prod(x.shape[d] for d in dims)
    mean = np.mean(xs, axis=dims, keepdims=True)
    dev = xs - mean
    # Note: no numpy "degrees of freedom" warning: n <= correction gives inf or nan as PyTorch
    ss = np.sum(dev * dev, axis=dims, keepdims=keepdim)
    return np.asarray(ss / max(n - correction, 0)).astype(dt, copy=False)


def _logical(fn: Any) -> Any:
    def kernel(x: np.ndarray, dims: tuple[int, ...] = (), keepdim: bool = False) -> np.ndarray:
        return np.asarray(fn(x, axis=dims, keepdims=keepdim))

    return kernel


def _arg(fn: Any) -> Any:
    def kernel(x: np.ndarray, dim: int | None = None, keepdim: bool = False) -> np.ndarray:
        return np.asarray(fn(x, axis=dim, keepdims=keepdim), dtype=np.int64)

    return kernel


def _scan(fn: Any) -> Any:
    def kernel(x: np.ndarray, dim: int = 0) -> np.ndarray:
        dt = x.dtype
        if x.ndim == 0:
            return x
        if dt in LOW:
            return fn(x, axis=dim, dtype=F32).astype(dt)
        return fn(x, axis=dim, dtype=dt)

    return kernel


KERNELS: dict[Any, Any] = {
    rd.sum: quiet(_accumulating(np.sum)),
    rd.prod: quiet(_accumulating(np.prod)),
    rd.mean: quiet(_accumulating(np.mean)),
    rd.max: _extreme(np.max),
    rd.min: _extreme(np.min),
    rd.var: quiet(_var),
    rd.any: _logical(np.any),
    rd.all: _logical(np.all),
    rd.argmax: _arg(np.argmax),
    rd.argmin: _arg(np.argmin),
    rd.cumsum: quiet(_scan(np.cumsum)),
    rd.cumprod: quiet(_scan(np.cumprod)),
}
