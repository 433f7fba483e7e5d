"""The opencl device: payloads are `CLArray` views, kernels come from one table per op group."""

from __future__ import annotations

import ember
import numpy as np
from ember.backend import Backend, DType, Kernel, install_kernels, ir, numpy_dtype
from ember.ops import Op

from . import creation, elementwise, linalg, movement, nn, reduction, rows
from .runtime import CLArray, Runtime
from .strided import contiguous

__all__ = ["OpenCLBackend"]

# float16 and bfloat16 everywhere: stored as 16 bits, computed in float (see runtime.py)
_BASE_DTYPES = (ember.float16, ember.bfloat16, ember.float32, ember.int8, ember.int16,
                ember.int32, ember.int64, ember.uint8, ember.bool_)


class OpenCLBackend(Backend):
    """One OpenCL device through pyopencl: an in-order queue, pooled buffers, generated kernels.

    Kernels are queued asynchronously; only host reads (``to_numpy``) wait for the queue.

    Examples
    --------
    >>> import numpy as np
    >>> import ember
    >>> from ember_opencl import OpenCLBackend
    >>> b = OpenCLBackend(0)
    >>> x = b.from_numpy(np.arange(3, dtype=np.float32), ember.float32)
    >>> b.to_numpy(b.kernels[ember.ops.add](x, x), ember.float32)
    array([0., 2., 4.], dtype=float32)
    """

    name = "opencl"

    def __init__(self, index: int = 0) -> None:
        from .runtime import select_devices

        devs = select_devices()
        if not 0 <= index < len(devs):
            listed = "; ".join(f"opencl:{i} = {d.name.strip()} (platform {p}, device {j})"
                               for i, (p, j, d) in enumerate(devs)) or "none"
            raise IndexError(f"no OpenCL device opencl:{index}; devices: {listed}")
        self.platform_index, self.device_index, dev = devs[index]
        self.runtime = rt = Runtime(dev)
        dtypes = set(_BASE_DTYPES)
        if rt.fp64:
            dtypes.add(ember.float64)
        self.dtypes = frozenset(dtypes)
        groups = (creation, elementwise, reduction, movement, linalg, nn, rows)
        install_kernels(self, (group.kernels(rt) for group in groups))
        super().__init__()

    @property
    def device_name(self) -> str:
        return str(self.runtime.device.name).strip()

    def ir_kernel(self, op: Op) -> Kernel | None:
        """An elementwise op known only from its kernel IR definition, rendered to C."""
        return elementwise.ir_kernel(self.runtime, op) if ir.defined(op.name) else None

    def row_kernel(self, op: Op) -> Kernel | None:
        """A row kernel known only from its row program, rendered to C (`rows`)."""
        return rows.row_kernel(self.runtime, op.name)

    def from_numpy(self, array: np.ndarray, dtype: DType) -> CLArray:
        host = np.require(np.asarray(array, dtype=numpy_dtype(dtype)), requirements="C")
        if host.dtype == np.bool_:
            host = host.view(np.uint8)
        out = self.runtime.upload(host)
        out.dtype = np.dtype(host.dtype if dtype is not ember.bool_ else np.bool_)
        return out

    def to_numpy(self, payload: CLArray, dtype: DType) -> np.ndarray:
        dense = contiguous(self.runtime, payload)
        host = self.runtime.read(dense)
        return host.astype(numpy_dtype(dtype), copy=False)

    def synchronize(self) -> None:
        self.runtime.synchronize()

    def memory_stats(self) -> dict[str, int]:
        pool = self.runtime.pool
        return {"held_blocks": int(pool.held_blocks), "active_blocks": int(pool.active_blocks),
                "managed_bytes": int(getattr(pool, "managed_bytes", 0)),
                "active_bytes": int(getattr(pool, "active_bytes", 0))}
