"""Linear algebra: batched, broadcasting matmul on BLAS (float16/bfloat16 accumulate in
float32)."""

from __future__ import annotations

from typing import Any

import numpy as np
from ember.ops import linalg as la

from ._common import F32, LOW

__all__ = ["KERNELS", "matmul"]


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` with batch axes broadcast."""
    dt = a.dtype
    if dt is not F32 and dt in LOW:  # float32 (the common case) skips the set look-up
        acc: np.ndarray = np.matmul(a.astype(F32), b.astype(F32))
        return acc.astype(dt)
    out: np.ndarray = np.matmul(a, b)
    return out


KERNELS: dict[Any, Any] = {la.matmul: matmul}
