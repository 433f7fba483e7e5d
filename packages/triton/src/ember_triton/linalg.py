"""Matmul: batched and broadcasting, on ``tl.dot``.

float32 runs strict IEEE products by default (PyTorch's default); ``matmul_precision="tf32"``
on the backend switches to tensor-core TF32.  float16/bfloat16 accumulate in float32.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from ember.ops import linalg as la

from ._array import DeviceArray, kind_of
from ._codegen import collapse, contiguous

if TYPE_CHECKING:
    from .backend import TritonBackend

__all__ = ["KERNELS", "matmul"]


def _batch_strides(x: DeviceArray, bshape: tuple[int, ...]) -> tuple[int, ...]:
    nb = x.ndim - 2
    pad = len(bshape) - nb
    return tuple(0 if (i < pad or x.shape[i - pad] == 1) and bshape[i] != 1
                 else x.strides[i - pad] for i in range(len(bshape)))


def matmul(be: TritonBackend, a: DeviceArray, b: DeviceArray) -> DeviceArray:
    """``a @ b`` with batch axes broadcast."""
    bshape = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    m, k = a.shape[-2:]
    n = b.shape[-1]
    cshape, (sa, sb) = collapse(bshape, [_batch_strides(a, bshape), _batch_strides(b, bshape)])
    if len(cshape) > 2:  # batch axes that do not merge: materialise both operands
        from .movement import expand

        a = contiguous(be, expand(be, a, (*bshape, m, k)))
        b = contiguous(be, expand(be, b, (*bshape, k, n)))
        return matmul(be, a, b)
    pad = 2 - len(cshape)
    b1, b2 = (1,) * pad + cshape
    sa1, sa2 = (0,) * pad + sa
    sb1, sb2 = (0,) * pad + sb
    out = be.empty((*bshape, m, n), a.dtype)
    if out.size == 0:
        return out
    import triton.language as tl

    dt = a.dtype
    dot = dt.name in ("float16", "bfloat16", "float32")
    if dot:
        acc = tl.float32
        precision = be.matmul_precision if dt.name == "float32" else "ieee"
    else:
        acc = tl.float64 if kind_of(dt) == "f" else tl.int64
        precision = "ieee"
    if be.memory.interpret:
        bm = max(16, min(64, be.block_size(m)))
        bn = max(16, min(64, be.block_size(n)))
        bk = max(16, min(64, be.block_size(k)))
    elif dot:
        bm, bn, bk = 64, 64, 32
    else:
        bm, bn, bk = 32, 32, 8
    grid = (-(-m // bm) * -(-n // bn), b1 * b2)
    be.launch(be.module("linalg").matmul, grid, out, a, b, m, n, k, b2, sa1, sa2,
              a.strides[-2], a.strides[-1], sb1, sb2, b.strides[-2], b.strides[-1],
              DOT=dot, PRECISION=precision, ACC=acc,
              UPCAST=be.memory.interpret and dt.name == "bfloat16", BM=bm, BN=bn, BK=bk)
    return out


KERNELS: dict[Any, Any] = {la.matmul: matmul}
