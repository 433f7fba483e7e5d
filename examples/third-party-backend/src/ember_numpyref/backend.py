"""The ``numpyref`` device: payloads are numpy arrays, kernels are one table.

A backend subclasses ``ember.backend.Backend`` (the contract of docs/design.md): say which
dtypes you hold, move data in and out, and map every primitive (``ember.ops.primitives()``) to
a kernel.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ember
from ember import ops
from ember.backend import Backend, ir

from . import kernels, nn

#: numpy has no bfloat16, and this backend wants no other dependency: it leaves bfloat16 out
#: (the conformance suite then skips those cases, as "unsupported dtype").
DTYPES = frozenset({ember.float16, ember.float32, ember.float64, ember.int8, ember.int16,
                    ember.int32, ember.int64, ember.uint8, ember.bool_})


class NumpyRefBackend(Backend):
    """Every primitive in a few lines of numpy.  Kernels return new arrays (never views)."""

    name = "numpyref"
    dtypes = DTYPES

    def __init__(self) -> None:
        self.kernels = {**kernels.TABLE, **nn.TABLE}
        missing = [op.name for op in ops.primitives()
                   if op not in self.kernels and not ir.defined(op.name)]
        assert not missing, f"numpyref lacks kernels for {missing}"
        super().__init__()

    def ir_kernel(self, op: ops.Op) -> Any:
        # an elementwise op the table lacks but the kernel IR defines (a new op): numpy
        # evaluates its definition
        return ir.numpy_kernel(op.name) if ir.defined(op.name) else None

    def from_numpy(self, array: np.ndarray, dtype: ember.DType) -> np.ndarray:
        return np.array(array, dtype=dtype.numpy_name, copy=True)

    def to_numpy(self, payload: np.ndarray, dtype: ember.DType) -> np.ndarray:
        return np.array(payload, dtype=dtype.numpy_name, copy=True)

    def dispatch(self, op: Any, args: Any, params: dict[str, Any]) -> Any:
        with np.errstate(all="ignore"):  # nan and inf are values here, not warnings
            return super().dispatch(op, args, params)
