"""cuBLAS through CuPy, as one of matmul's candidates on NVIDIA GPUs.

cuBLAS is column-major; a row-major ``C[m, n] = A[m, k] @ B[k, n]`` is the column-major
``C^T = B^T @ A^T``, so B is passed first.  An operand whose rows are contiguous
(``stride[-1] == 1``) is "not transposed" to cuBLAS with leading dimension ``stride[-2]``; one
whose columns are contiguous is "transposed" with leading dimension ``stride[-1]``; anything
else (two non-unit strides) is not a cuBLAS candidate.  One batch axis maps to
``gemmStridedBatchedEx`` (stride 0 broadcasts).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ember_triton.vendor import dtype_name

__all__ = ["gemm_layout", "strided_batched_gemm"]

# cudaDataType / cublasComputeType_t values (stable parts of the CUDA ABI)
_CUDA_R = {"float16": 2, "bfloat16": 14, "float32": 0, "float64": 1}
_COMPUTE_32F, _COMPUTE_32F_FAST_TF32, _COMPUTE_64F = 68, 77, 70
_OP_N, _OP_T = 0, 1
_GEMM_DEFAULT = -1
_ONE: dict[str, np.ndarray] = {"f4": np.ones(1, np.float32), "f8": np.ones(1, np.float64)}
_ZERO: dict[str, np.ndarray] = {"f4": np.zeros(1, np.float32), "f8": np.zeros(1, np.float64)}
#: their host addresses (``ndarray.ctypes`` builds a helper object on every access)
_ONE_AT = {k: int(v.ctypes.data) for k, v in _ONE.items()}
_ZERO_AT = {k: int(v.ctypes.data) for k, v in _ZERO.items()}


def gemm_layout(rows: int, cols: int, s_row: int, s_col: int) -> tuple[int, int] | None:
    """``(op, leading dimension)`` of a row-major ``rows x cols`` operand, or ``None``."""
    if s_col == 1 and s_row >= max(cols, 1):
        return _OP_N, max(s_row, 1)
    if s_row == 1 and s_col >= max(rows, 1):
        return _OP_T, max(s_col, 1)
    if rows == 1 and s_col == 1:
        return _OP_N, max(cols, 1)
    if cols == 1 and s_row == 1:
        return _OP_T, max(rows, 1)
    return None


def strided_batched_gemm(c_ptr: int, a_ptr: int, b_ptr: int, m: int, n: int, k: int,
                         batch: int, sa_batch: int, sb_batch: int,
                         a_layout: tuple[int, int], b_layout: tuple[int, int],
                         dtype: np.dtype[Any], precision: str) -> None:
    """``C = A @ B`` for ``batch`` matrices on CuPy's current stream (element strides)."""
    from cupy.cuda import cublas, device, get_current_stream

    name = dtype_name(dtype)
    cuda_type = _CUDA_R[name]
    if name == "float64":
        compute, scal = _COMPUTE_64F, "f8"
    else:
        compute = _COMPUTE_32F_FAST_TF32 if name == "float32" and precision == "tf32" \
            else _COMPUTE_32F
        scal = "f4"
    handle = device.get_cublas_handle()
    # CuPy's handle keeps whatever stream it was last given: ours must follow CuPy's current
    # stream (a side stream, a stream recording a CUDA graph)
    cublas.setStream(handle, get_current_stream().ptr)
    op_a, lda = a_layout
    op_b, ldb = b_layout
    cublas.gemmStridedBatchedEx(
        handle, op_b, op_a, n, m, k, _ONE_AT[scal],
        b_ptr, cuda_type, ldb, sb_batch,
        a_ptr, cuda_type, lda, sa_batch,
        _ZERO_AT[scal], c_ptr, cuda_type, n, m * n, batch, compute, _GEMM_DEFAULT)
