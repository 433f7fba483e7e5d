"""ONNX element types (``TensorProto.DataType`` numbers) and ember dtypes, both ways."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _dtype as dt
from .._host import dtype_of_numpy, numpy_dtype as _numpy_dtype

__all__ = ["FROM_ONNX", "TO_ONNX", "ember_dtype", "numpy_dtype", "onnx_type"]

# TensorProto: FLOAT=1 UINT8=2 INT8=3 INT16=5 INT32=6 INT64=7 BOOL=9 FLOAT16=10 DOUBLE=11
# BFLOAT16=16
FROM_ONNX: dict[int, dt.DType] = {
    1: dt.float32, 2: dt.uint8, 3: dt.int8, 5: dt.int16, 6: dt.int32, 7: dt.int64,
    9: dt.bool_, 10: dt.float16, 11: dt.float64, 16: dt.bfloat16,
}
TO_ONNX: dict[dt.DType, int] = {v: k for k, v in FROM_ONNX.items()}

_NAMES = {1: "FLOAT", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16", 6: "INT32", 7: "INT64",
          8: "STRING", 9: "BOOL", 10: "FLOAT16", 11: "DOUBLE", 12: "UINT32", 13: "UINT64",
          14: "COMPLEX64", 15: "COMPLEX128", 16: "BFLOAT16", 17: "FLOAT8E4M3FN",
          18: "FLOAT8E4M3FNUZ", 19: "FLOAT8E5M2", 20: "FLOAT8E5M2FNUZ", 21: "UINT4", 22: "INT4",
          23: "FLOAT4E2M1", 24: "FLOAT8E8M0", 25: "UINT2", 26: "INT2"}


def ember_dtype(code: int, where: str) -> dt.DType:
    """The ember dtype of ONNX element type ``code`` (an error naming ``where`` if none)."""
    d = FROM_ONNX.get(code)
    if d is None:
        raise TypeError(f"{where}: ONNX element type {_NAMES.get(code, code)} has no ember "
                        f"dtype (supported: {', '.join(_NAMES[c] for c in sorted(FROM_ONNX))})")
    return d


def numpy_dtype(code: int, where: str) -> np.dtype[Any]:
    return _numpy_dtype(ember_dtype(code, where))


def onnx_type(dtype: dt.DType | np.dtype[Any]) -> int:
    """The ONNX element type of an ember or numpy dtype."""
    if isinstance(dtype, np.dtype):
        dtype = dtype_of_numpy(dtype)
    code = TO_ONNX.get(dtype)
    if code is None:
        raise TypeError(f"ember dtype {dtype.name} has no ONNX element type")
    return code
