"""Memory layers: where a `TritonBackend` keeps its allocations.

A memory layer allocates flat byte storages, copies host arrays in and out, and turns a
storage plus a byte offset into the pointer object Triton launches with.  `HostMemory` keeps
numpy buffers for the interpreter (``TRITON_INTERPRET=1``); ``ember_cuda`` and ``ember_rocm``
supply CuPy-backed layers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from ember.backend import OutOfMemoryError, allocation_error

from ._array import DeviceArray, int_shape

__all__ = ["HostMemory", "HostPointer", "Memory", "allocation_failed"]


def allocation_failed(shape: tuple[int, ...], dtype: Any, nbytes: int,
                      exc: MemoryError) -> OutOfMemoryError:
    """The `ember.OutOfMemoryError` for a storage of ``nbytes`` meant for ``shape`` elements of
    ``dtype`` that a memory layer could not allocate (``exc``, the allocator's error); core's
    dispatch adds the op and the device."""
    reason = exc.reason if isinstance(exc, OutOfMemoryError) else f"{type(exc).__name__}: {exc}"
    return allocation_error(shape, dtype, nbytes, reason=reason)


class Memory:
    """Base of memory layers.  Subclasses implement the four storage methods."""

    interpret = False  # whether kernels run under Triton's interpreter
    #: ``timer(fn) -> ms`` for one call of ``fn`` on the device; ``None``: no kernel selection
    timer: Callable[[Callable[[], Any]], float] | None = None

    def allocate(self, nbytes: int) -> Any:
        raise NotImplementedError

    def upload(self, array: np.ndarray) -> Any:
        """A new storage holding ``array``'s bytes (``array`` is C-contiguous)."""
        raise NotImplementedError

    def download(self, storage: Any, byte_offset: int, nbytes: int) -> np.ndarray:
        """``nbytes`` bytes of ``storage`` from ``byte_offset`` as a new uint8 host array."""
        raise NotImplementedError

    def pointer(self, storage: Any, byte_offset: int, dtype_name: str) -> Any:
        raise NotImplementedError

    def address(self, storage: Any) -> int:
        """The device address of ``storage``'s first byte (what a launcher takes)."""
        raise NotImplementedError

    def allocate_at(self, nbytes: int) -> tuple[Any, int]:
        """A new storage and its address."""
        storage = self.allocate(nbytes)
        return storage, self.address(storage)

    def fresh_array(self, nbytes: int, shape: tuple[int, ...], dtype: np.dtype[Any],
                    strides: tuple[int, ...]) -> DeviceArray:
        """A contiguous array over a new allocation of ``nbytes`` (``shape`` a tuple of ints,
        ``dtype`` a numpy dtype, ``strides`` its contiguous strides): the output of every
        recorded elementwise launch, one call on the per-op path."""
        try:
            storage, ptr = self.allocate_at(nbytes)
        except MemoryError as exc:
            raise allocation_failed(shape, dtype, nbytes, exc) from exc
        return DeviceArray.fresh(self, storage, shape, dtype, ptr, strides)

    def synchronize(self) -> None:
        pass

    def activate(self) -> None:
        """Make this memory's device current before a launch (GPU layers)."""

    def stream(self) -> int:
        """The handle of the stream launches go to (GPU layers)."""
        return 0

    def stats(self) -> dict[str, int]:
        return {}

    def device_id(self) -> str | None:
        """The device model, naming its kernel-selection cache (``None``: not cached)."""
        return None

    def processors(self) -> int:
        """How many programs the device runs at once, roughly (its multiprocessors): what
        split-K fills.  The interpreter's nominal 8 makes small problems take that path too,
        so CI runs it."""
        return 8

    def f32_tensor_cores(self) -> bool:
        """Whether float32 products can run on tensor cores as 3xTF32 (CUDA sm80 and later):
        each operand split into a TF32 head and tail, three TF32 products summed in float32,
        float32's accuracy (the fused attention's strict-float32 products, as PyTorch's
        memory-efficient attention computes them there).  The interpreter multiplies in float32."""
        return False

    def tma(self) -> bool:
        """Whether the device loads tiles through tensor descriptors in hardware (Hopper's TMA,
        CUDA sm90 and later): the persistent matmul kernels' candidates.  The interpreter runs
        those kernels too (tests), but kernel selection does not offer them there."""
        return False

    def use_scratch(self) -> None:
        """Make this memory Triton's allocator for kernels' global scratch (device-side tensor
        descriptors) in the calling thread (GPU layers)."""

    # -- shared ----------------------------------------------------------------------------

    def empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> DeviceArray:
        shape = int_shape(shape)
        if not isinstance(dtype, np.dtype):
            dtype = np.dtype(dtype)
        nbytes = max(math.prod(shape), 1) * dtype.itemsize
        try:
            storage, ptr = self.allocate_at(nbytes)
        except MemoryError as exc:
            raise allocation_failed(shape, dtype, nbytes, exc) from exc
        return DeviceArray.fresh(self, storage, shape, dtype, ptr)

    def empty_many(self, specs: Sequence[tuple[tuple[int, ...], Any]]) -> list[DeviceArray]:
        """New contiguous arrays of the ``(shape, dtype)`` pairs over one allocation, each
        starting on a 256-byte boundary: outputs that are always replaced together (Adam's
        moments) cost one allocation instead of one each."""
        layout = []
        at = 0
        for shape, dtype in specs:
            shape, dtype = int_shape(shape), np.dtype(dtype)
            layout.append((shape, dtype, at))
            at += -(-max(math.prod(shape), 1) * dtype.itemsize // 256) * 256
        try:
            storage, base = self.allocate_at(max(at, 1))
        except MemoryError as exc:
            shape, dtype, _ = max(layout, key=lambda s: math.prod(s[0]) * s[1].itemsize)
            raise allocation_failed(shape, dtype, max(at, 1), exc) from exc
        fresh = DeviceArray.fresh
        return [fresh(self, storage, shape, dtype, base + start, None, start // dtype.itemsize)
                for shape, dtype, start in layout]

    def from_numpy(self, array: np.ndarray) -> DeviceArray:
        flat = np.asarray(array)  # Note: not ascontiguousarray, which makes 0-d arrays 1-d
        if not flat.flags.c_contiguous:
            flat = flat.copy()
        data = flat.reshape(-1).view(np.uint8) if flat.size else np.zeros(flat.itemsize, np.uint8)
        try:
            storage = self.upload(data)
        except MemoryError as exc:
            raise allocation_failed(flat.shape, flat.dtype, data.nbytes, exc) from exc
        return DeviceArray(self, storage, flat.shape, flat.dtype)

    def to_numpy(self, a: DeviceArray) -> np.ndarray:
        """A host copy of a *contiguous* array."""
        if a.size == 0:
            return np.zeros(a.shape, a.dtype)
        raw = self.download(a.storage, a.offset * a.dtype.itemsize, a.size * a.dtype.itemsize)
        return raw.view(a.dtype).reshape(a.shape)


class HostPointer:
    """A pointer into host memory that Triton's interpreter accepts.

    The interpreter copies "device" tensors to the host through a torch-like protocol; on host
    memory every step of it is the identity, so no torch is needed.
    """

    __slots__ = ("_ptr", "dtype")

    def __init__(self, ptr: int, dtype: str) -> None:
        self._ptr = ptr
        self.dtype = dtype

    def data_ptr(self) -> int:
        return self._ptr

    def untyped_storage(self) -> HostPointer:
        return self

    def cpu(self) -> HostPointer:
        return self

    def new_empty(self, *args: Any, **kwargs: Any) -> HostPointer:
        return self

    def set_(self, *args: Any) -> HostPointer:
        return self

    def copy_(self, other: Any) -> HostPointer:
        return self

    def storage_offset(self) -> int:
        return 0

    def size(self) -> tuple[int, ...]:
        return ()

    def stride(self) -> tuple[int, ...]:
        return ()


class HostMemory(Memory):
    """Host numpy buffers, for kernels run by Triton's interpreter."""

    interpret = True

    def __init__(self) -> None:
        self.allocated = 0

    def allocate(self, nbytes: int) -> np.ndarray:
        # 16-byte aligned like device allocations: Triton assumes aligned pointers
        try:
            buf = np.empty(nbytes + 16, np.uint8)
        except (MemoryError, ValueError) as exc:  # ValueError: beyond the address space
            why = "host memory" if isinstance(exc, MemoryError) else f"host memory: {exc}"
            raise allocation_error(None, None, nbytes, reason=why) from exc
        start = (-buf.ctypes.data) % 16
        self.allocated += nbytes
        return buf[start:start + nbytes]

    def upload(self, array: np.ndarray) -> np.ndarray:
        buf = self.allocate(array.nbytes)
        buf[:] = array
        return buf

    def download(self, storage: np.ndarray, byte_offset: int, nbytes: int) -> np.ndarray:
        return storage[byte_offset:byte_offset + nbytes].copy()

    def pointer(self, storage: np.ndarray, byte_offset: int, dtype_name: str) -> HostPointer:
        return HostPointer(storage.ctypes.data + byte_offset, dtype_name)

    def address(self, storage: np.ndarray) -> int:
        return int(storage.ctypes.data)

    def stats(self) -> dict[str, int]:
        return {"allocated_bytes_total": self.allocated}
