"""The cpu device: payloads are numpy arrays, kernels come from one table per op group."""

from __future__ import annotations

from typing import Any

import numpy as np
from ember.backend import (
    ALL_DTYPES,
    Backend,
    DType,
    Kernel,
    dtype_of_numpy,
    ir,
    numpy_dtype,
    rows,
)
from ember.ops import Op

from . import (
    activation,
    attention,
    composite,
    creation,
    elementwise,
    linalg,
    movement,
    nn,
    recurrent,
    reduction,
)
from ._inplace import CpuInplace

__all__ = ["KERNELS", "CpuBackend"]

#: Every primitive's kernel on the cpu.
KERNELS: dict[Any, Kernel] = {
    **creation.KERNELS,
    **elementwise.KERNELS,
    **reduction.KERNELS,
    **movement.KERNELS,
    **linalg.KERNELS,
    **nn.KERNELS,
    **activation.KERNELS,
    **attention.KERNELS,
    **recurrent.KERNELS,
    **composite.KERNELS,
}


class CpuBackend(Backend):
    """numpy on the host.

    Tensors are immutable, so payloads may be views of one another (``reshape``, ``permute``,
    ``expand``, ``slice`` cost no copy); kernels never write into their inputs.

    Examples
    --------
    >>> import numpy as np
    >>> from ember import ops
    >>> from ember_cpu import CpuBackend
    >>> CpuBackend().kernels[ops.add](np.ones(2), np.ones(2))
    array([2., 2.])
    """

    name = "cpu"
    dtypes = frozenset(ALL_DTYPES)

    #: `ember.compile` writes a dying input's ufunc result in place (see ``_inplace``)
    inplace = CpuInplace()

    def __init__(self) -> None:
        self.kernels = dict(KERNELS)
        super().__init__()

    def ir_kernel(self, op: Op) -> Kernel | None:
        """An elementwise op known only from its kernel IR definition, evaluated with numpy."""
        return ir.numpy_kernel(op.name) if ir.defined(op.name) else None

    def row_kernel(self, op: Op) -> Kernel | None:
        """A row kernel known only from its row program: numba loops (`ember_cpu._rows`)."""
        from . import _rows

        return _rows.kernel(op.name) if rows.defined(op.name) else None

    def from_numpy(self, array: np.ndarray, dtype: DType) -> np.ndarray:
        return np.array(array, dtype=numpy_dtype(dtype), copy=True)

    def to_numpy(self, payload: np.ndarray, dtype: DType) -> np.ndarray:
        # a copy: the caller may write into it, and the tensor must not change
        return np.array(payload, dtype=numpy_dtype(dtype), copy=True)

    # -- DLPack: zero-copy exchange with numpy, PyTorch, JAX --------------------------------

    def to_dlpack(self, payload: np.ndarray, stream: Any = None) -> Any:
        """A DLPack capsule of ``payload`` itself (no copy)."""
        arr = np.asarray(payload)
        try:
            return arr.__dlpack__()
        except BufferError:  # read-only views (expand) cannot be exported as they are
            return np.array(arr).__dlpack__()

    def dlpack_device(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU

    def from_dlpack(self, obj: Any) -> tuple[np.ndarray, DType]:
        """A payload sharing the producer's host memory, and its ember dtype."""
        arr = np.from_dlpack(obj)
        return arr, dtype_of_numpy(arr.dtype)
