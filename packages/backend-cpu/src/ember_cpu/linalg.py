"""Linear algebra: batched, broadcasting matmul on BLAS (float16/bfloat16 accumulate in
float32)."""

from __future__ import annotations

from typing import Any

import numpy as np
from ember.ops import linalg as la

from . import _blas
from ._common import F32, LOW

__all__ = ["KERNELS", "matmul"]


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` with batch axes broadcast; a product under `_blas.SMALL_GEMM_FLOPS` (an
    attention head's scores, a batch-1 layer) runs on one BLAS thread: OpenBLAS's woken and
    spinning threads made BERT-base's batched 128x64x128 products several times slower on
    the busy 2-core VM (the whole encoder 0.77 s on one thread, 2.2 s on two)."""
    dt = a.dtype
    # 2*M*K*N per product, times the batch: the larger operand's size times the other side
    flops = 2 * max(a.size * (b.shape[-1] if b.ndim > 1 else 1),
                    b.size * (a.shape[-2] if a.ndim > 1 else 1))
    if dt is not F32 and dt in LOW:  # float32 (the common case) skips the set look-up
        acc: np.ndarray = _blas.matmul(a.astype(F32), b.astype(F32), flops)
        return acc.astype(dt)
    out: np.ndarray = _blas.matmul(a, b, flops)
    return out


KERNELS: dict[Any, Any] = {la.matmul: matmul}
