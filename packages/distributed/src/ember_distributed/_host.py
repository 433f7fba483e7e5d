"""Host staging: tensors of any device as contiguous numpy buffers, and back."""

from __future__ import annotations

import numpy as np

import ember

__all__ = ["from_host", "mean_in_place", "reduce_dtype", "to_host"]

# dtypes MPI reduces natively; the others are reduced in float32 (float16, bfloat16) or int64
_NATIVE = {np.dtype(t) for t in (np.float32, np.float64, np.int8, np.int16, np.int32,
                                  np.int64, np.uint8)}


def to_host(t: ember.Tensor) -> np.ndarray:
    """A private, C-contiguous copy of ``t``'s values (tensors are values: never write into
    the array a backend hands out)."""
    return np.array(t.numpy(), copy=True, order="C")


def from_host(a: np.ndarray, like: ember.Tensor) -> ember.Tensor:
    """``a`` as a tensor of ``like``'s dtype on ``like``'s device."""
    out = ember.from_numpy(np.ascontiguousarray(a), device=like.device)
    return out if out.dtype == like.dtype else out.to(like.dtype)


def reduce_dtype(a: np.ndarray) -> np.ndarray:
    """``a`` in a dtype MPI can reduce (a copy only when it must change)."""
    if a.dtype in _NATIVE:
        return a
    if a.dtype == np.bool_:
        return a.astype(np.int64)
    return a.astype(np.float32)


def mean_in_place(total: np.ndarray, n: int) -> np.ndarray:
    """``total / n`` in ``total``'s dtype; integers round toward zero (NCCL's average)."""
    if np.issubdtype(total.dtype, np.integer):
        out: np.ndarray = (np.sign(total) * (np.abs(total) // n)).astype(total.dtype)
        return out
    total /= n
    return total
