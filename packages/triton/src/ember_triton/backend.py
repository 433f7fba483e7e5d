"""`TritonBackend`: the device-independent Triton backend, parametrised by a memory layer.

``ember_cuda`` and ``ember_rocm`` give it CuPy memory and their driver; the ``triton-interpret``
device gives it host memory, and its kernels run under Triton's interpreter.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np
from ember import _dtype
from ember._backend import Backend
from ember._host import numpy_dtype

from . import creation, elementwise, linalg, movement, nn, reduction
from ._array import DeviceArray
from ._autotune import KernelSelector
from ._codegen import contiguous
from ._jit import KernelLibrary
from ._memory import Memory

__all__ = ["TritonBackend"]

_FAMILIES = (creation, elementwise, reduction, movement, linalg, nn)


class TritonBackend(Backend):
    """Every primitive as Triton kernels over a `Memory` layer.

    Parameters
    ----------
    memory : where arrays live (`HostMemory` for the interpreter, CuPy memory on GPUs).
    name : the backend's name (``triton-interpret``, ``cuda``, ``rocm``).
    matmul_precision : float32 matmul mode, ``"ieee"`` (strict, the default, like PyTorch) or
        ``"tf32"`` (tensor cores).

    Examples
    --------
    >>> import numpy as np
    >>> from ember import ops
    >>> from ember_triton import HostMemory, TritonBackend
    >>> be = TritonBackend(HostMemory(), "triton-interpret")
    >>> x = be.memory.from_numpy(np.arange(3.0))
    >>> be.to_numpy(be.kernels[ops.add](x, x), None)
    array([0., 2., 4.])
    """

    dtypes = frozenset(_dtype.ALL_DTYPES)

    def __init__(self, memory: Memory, name: str = "triton",
                 matmul_precision: str = "ieee") -> None:
        self.memory = memory
        self.name = name
        self.matmul_precision = matmul_precision
        self.library = KernelLibrary.get(memory.interpret)
        #: long rows with few of them are reduced in two passes of ``reduce_chunk`` pieces
        self.split_reductions = not memory.interpret
        self.reduce_chunk = 1 << 14
        #: matmul's kernel selection: timed choices per shape bucket, cached on disk per GPU
        self.selector = KernelSelector(memory.device_id(), memory.timer)
        self.use_cublas = os.environ.get("EMBER_CUBLAS", "1") != "0"
        self.kernels = {}
        for family in _FAMILIES:
            for op, fn in family.KERNELS.items():
                self.kernels[op] = functools.partial(fn, self)
        super().__init__()

    # -- helpers for kernel families ---------------------------------------------------------

    def kernel_scope(self) -> dict[str, Any]:
        """Globals of generated kernels: triton, tl and the device math functions."""
        import triton
        import triton.language as tl

        scope = {k: v for k, v in vars(self.library.module("mathlib")).items()
                 if not k.startswith("__")}
        scope.update(triton=triton, tl=tl)
        return scope

    def module(self, name: str) -> Any:
        return self.library.module(name)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> DeviceArray:
        return self.memory.empty(tuple(shape), np.dtype(dtype))

    def scalar(self, value: Any, dtype: Any) -> DeviceArray:
        """A one-element array holding ``value`` in ``dtype`` (kernels load scalars)."""
        return self.memory.from_numpy(np.asarray(value).astype(np.dtype(dtype)).reshape(()))

    def block_size(self, n: int, cap: int = 1024) -> int:
        # the interpreter pays per program instance, so it takes big blocks
        top = 1 << 16 if self.memory.interpret else cap
        b = 16
        while b < n and b < top:
            b *= 2
        return b

    def launch(self, kernel: Any, grid: tuple[int, ...], *args: Any, **meta: Any) -> None:
        self.memory.activate()
        call = [a.arg() if isinstance(a, DeviceArray) else a for a in args]
        if self.memory.interpret:
            # the interpreter computes with numpy, which warns about inf/nan where a GPU is silent
            with np.errstate(all="ignore"):
                kernel[grid](*call, **meta)
        else:
            kernel[grid](*call, **meta)

    def contiguous(self, a: DeviceArray) -> DeviceArray:
        return contiguous(self, a)

    # -- Backend ----------------------------------------------------------------------------

    def from_numpy(self, array: np.ndarray, dtype: _dtype.DType) -> DeviceArray:
        return self.memory.from_numpy(np.asarray(array, dtype=numpy_dtype(dtype)))

    def to_numpy(self, payload: DeviceArray, dtype: _dtype.DType | None) -> np.ndarray:
        # a fresh host copy: the caller may write into it
        return self.memory.to_numpy(contiguous(self, payload))

    def synchronize(self) -> None:
        self.memory.synchronize()

    def memory_stats(self) -> dict[str, int]:
        return self.memory.stats()

