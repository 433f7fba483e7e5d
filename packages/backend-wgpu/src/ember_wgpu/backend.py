"""The wgpu device: payloads are `WGArray` views, kernels come from one table per op group.

dtypes: float32, int32 and bool natively on every adapter; int8, int16, uint8 and bfloat16
emulated on every adapter (widened to 32-bit storage, wrapped or rounded on every store: they
have no WGSL type); int64 where the adapter offers
``shader-int64`` and float16 where it offers ``shader-f16`` (both native WGSL types through
wgpu-native's extensions).  float64 is never offered: naga's WGSL front end applies no math
built-in (not even ``sqrt`` or ``floor``) to ``f64`` and Vulkan's GLSL.std.450 has no 64-bit
transcendental functions, so only its arithmetic would be native.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ember
from ember.backend import Backend, DType, Kernel, install_kernels, ir, numpy_dtype
from ember.ops import Op

from . import creation, elementwise, linalg, movement, nn, optim, reduction
from .runtime import Runtime, WGArray, describe
from .strided import contiguous

__all__ = ["SKIPS", "WgpuBackend"]

#: conformance cases this backend declares it cannot pass yet: ``{pattern: reason}``
SKIPS: dict[str, str] = {}


class WgpuBackend(Backend):
    """One WebGPU adapter through wgpu-py: a queue, pooled storage buffers, WGSL kernels.

    Kernels are recorded and submitted in batches; only host reads (``to_numpy``) wait.

    Examples
    --------
    >>> import numpy as np
    >>> import ember
    >>> x = ember.tensor(np.arange(3, dtype=np.float32), device="wgpu:0")
    >>> (x + x).tolist()
    [0.0, 2.0, 4.0]
    """

    name = "wgpu"

    def __init__(self, adapter: Any, index: int = 0) -> None:
        self.index = index
        self.runtime = rt = Runtime(adapter)
        dtypes = {ember.float32, ember.int32, ember.bool_, ember.int8, ember.int16, ember.uint8,
                  ember.bfloat16}
        if rt.i64:
            dtypes.add(ember.int64)
        if rt.f16:
            dtypes.add(ember.float16)
        self.dtypes = frozenset(dtypes)
        groups = (creation, elementwise, reduction, movement, linalg, nn, optim)
        install_kernels(self, (group.kernels(rt) for group in groups))
        super().__init__()

    @property
    def device_name(self) -> str:
        return describe(self.runtime.adapter)

    def ir_kernel(self, op: Op) -> Kernel | None:
        """An elementwise op known only from its kernel IR definition, rendered to WGSL."""
        return elementwise.ir_kernel(self.runtime, op) if ir.defined(op.name) else None

    def from_numpy(self, array: np.ndarray, dtype: DType) -> WGArray:
        host = np.asarray(array, dtype=numpy_dtype(dtype))
        return self.runtime.upload(host)

    def to_numpy(self, payload: WGArray, dtype: DType) -> np.ndarray:
        dense = contiguous(self.runtime, payload)
        return self.runtime.read(dense).astype(numpy_dtype(dtype), copy=False)

    def synchronize(self) -> None:
        self.runtime.synchronize()

    def recording(self) -> bool:
        return self.runtime.capture is not None  # `replay.ProgramReplay` records

    def capture_program(self, program: Any) -> Any:
        """``ember.compile``'s hook: the program replayed from recorded dispatches
        (`ember_wgpu.replay`), or ``None`` (replayed as Python)."""
        from .replay import capture_program

        return capture_program(self.runtime)(program)
