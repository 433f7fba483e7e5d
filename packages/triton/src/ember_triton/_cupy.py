"""CuPy memory for `TritonBackend` (CUDA and ROCm builds of CuPy alike): allocations from
CuPy's memory pool on one device.  cupy is imported when a `CupyMemory` is created."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

from ._array import DeviceArray
from ._memory import Memory, allocation_failed

__all__ = ["CupyMemory", "CupyPointer"]

_DTYPES: dict[str, np.dtype[Any]] = {}
_new_array = object.__new__


class CupyPointer:
    """What Triton launches with: a device address and a dtype name."""

    __slots__ = ("_ptr", "dtype")

    def __init__(self, ptr: int, dtype: Any) -> None:
        self._ptr = ptr
        self.dtype = dtype

    def data_ptr(self) -> int:
        return self._ptr


class _Scratch:
    """A global-scratch buffer handed to Triton's launcher (it asks for ``data_ptr()``)."""

    __slots__ = ("ptr", "size", "storage")

    def __init__(self, storage: Any, alignment: int, size: int) -> None:
        self.storage = storage
        self.ptr = -(-int(storage.ptr) // alignment) * alignment
        self.size = size

    def data_ptr(self) -> int:
        return self.ptr


class CupyMemory(Memory):
    """Byte buffers from CuPy's default memory pool on device ``index``.

    ``pool`` defaults to ``cupy.get_default_memory_pool()``; freed blocks return to it and are
    reused, so a steady training loop stops allocating from the driver.
    """

    interpret = False

    def __init__(self, index: int, pool: Any = None) -> None:
        import cupy

        self.cupy = cupy
        self.index = index
        self.device = cupy.cuda.Device(index)
        self.pool = pool if pool is not None else cupy.get_default_memory_pool()
        self._get_device = cupy.cuda.runtime.getDevice
        self._many = cupy.cuda.runtime.getDeviceCount() > 1
        self._current_stream = cupy.cuda.get_current_stream
        self._alloc = cupy.cuda.alloc  # the current allocator (a recording graph's pool)
        self._peak = 0  # `peak_bytes`'s high-water mark while `reset_peak` tracks
        self._scratch: dict[int, _Scratch] = {}
        self._scratch_outgrown: list[_Scratch] = []

    def activate(self) -> None:
        # with one GPU in the process its device is always the current one: no driver query
        if self._many and self._get_device() != self.index:
            self.device.use()

    def stream(self) -> int:
        # the stream ember's Triton driver reports to the JIT: CuPy's current one
        return self._current_stream().ptr  # type: ignore[no-any-return]

    # storages are CuPy ``MemoryPointer``s from the current allocator (a recording CUDA graph
    # swaps in its own pool); a pointer keeps its block alive and returns it when dropped

    def allocate(self, nbytes: int) -> Any:
        return self.allocate_at(nbytes)[0]

    def allocate_at(self, nbytes: int) -> tuple[Any, int]:
        self.activate()
        storage = self._alloc(max(nbytes, 1))
        return storage, storage.ptr

    def fresh_array(self, nbytes: int, shape: tuple[int, ...], dtype: np.dtype[Any],
                    strides: tuple[int, ...]) -> DeviceArray:
        # `Memory.fresh_array` without its two calls (`allocate_at`, `DeviceArray.fresh`),
        # and one statement a field (a tuple assignment builds a tuple first): the eager path
        # of every elementwise op runs this, and it costs 0.22 µs against 0.52 µs before
        # on the development VM's CPU (device calls stubbed out)
        if self._many and self._get_device() != self.index:
            self.device.use()
        try:
            storage = self._alloc(nbytes or 1)
        except MemoryError as exc:  # CuPy's OutOfMemoryError: named for ember (free unless raised)
            raise allocation_failed(shape, dtype, nbytes, exc) from exc
        a = _new_array(DeviceArray)
        a.memory = self
        a.storage = storage
        a.shape = shape
        a.dtype = dtype
        a.strides = strides
        a.offset = 0
        a.ptr = storage.ptr
        return a

    def upload(self, array: np.ndarray) -> Any:
        # one asynchronous copy straight from the (pageable) host array: the driver stages
        # pageable memory before the call returns, so ``array`` may change right after, and
        # nothing waits for the device (CuPy's asarray stages through a pinned buffer of its
        # own first, which costs more host time per upload)
        self.activate()
        n = array.nbytes
        storage = self._alloc(max(n, 1))
        if n:
            self.cupy.cuda.runtime.memcpyAsync(storage.ptr, array.ctypes.data, n, 1,
                                               self.stream())
        return storage

    def download(self, storage: Any, byte_offset: int, nbytes: int) -> np.ndarray:
        self.activate()
        cp = self.cupy
        view = cp.ndarray((nbytes,), cp.uint8, storage + byte_offset)
        out: np.ndarray = cp.asnumpy(view)
        return out

    def address(self, storage: Any) -> int:
        return int(storage.ptr)

    def pointer(self, storage: Any, byte_offset: int, dtype_name: str) -> CupyPointer:
        # numpy dtypes, as CuPy arrays carry them: what Triton's specialiser was verified with
        dt = _DTYPES.get(dtype_name)
        if dt is None:
            dt = _DTYPES[dtype_name] = np.dtype(ml_dtypes.bfloat16 if dtype_name == "bfloat16"
                                                else dtype_name)
        return CupyPointer(storage.ptr + byte_offset, dt)

    def synchronize(self) -> None:
        self.device.synchronize()

    def device_id(self) -> str:
        props = self.cupy.cuda.runtime.getDeviceProperties(self.index)
        name = props["name"]
        name = name.decode() if isinstance(name, bytes) else str(name)
        return f"{name} sm{self.device.compute_capability}"

    def processors(self) -> int:
        props = self.cupy.cuda.runtime.getDeviceProperties(self.index)
        return int(props["multiProcessorCount"])

    def f32_tensor_cores(self) -> bool:
        return not self.cupy.cuda.runtime.is_hip and int(self.device.compute_capability) >= 80

    def tma(self) -> bool:
        return not self.cupy.cuda.runtime.is_hip and int(self.device.compute_capability) >= 90

    def use_scratch(self) -> None:
        import triton

        triton.set_allocator(self._scratch_for)

    def workspace(self, nbytes: int) -> int:
        """The address of the current stream's scratch buffer, grown to ``nbytes`` at least
        and 256-byte aligned (cuBLASLt's workspace; kernels on one stream take turns)."""
        return self._scratch_for(nbytes, 256, self.stream()).ptr

    def _scratch_for(self, size: int, alignment: int, stream: int | None) -> _Scratch:
        """Triton's allocator: one buffer per stream, kept and grown (kernels on one stream run
        in order, so they can share it).  A buffer outgrown stays allocated: a CUDA graph that
        recorded a launch keeps using the address it was given."""
        key = 0 if stream is None else int(stream)
        buf = self._scratch.get(key)
        if buf is None or buf.size < size or buf.ptr % alignment:
            if buf is not None:
                self._scratch_outgrown.append(buf)
            self.activate()
            storage = self._alloc(max(size, 1 << 16) + alignment)
            buf = self._scratch[key] = _Scratch(storage, alignment, max(size, 1 << 16))
        return buf

    def timer(self, fn: Callable[[], Any]) -> float:
        """Milliseconds per call of ``fn`` on this device's current stream (CUDA events):
        one warm-up call (it may compile), then the best of 3 batches of calls lasting
        about 10 ms each."""
        cp = self.cupy
        self.activate()
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        fn()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        reps = max(1, min(100, int(10.0 / max(cp.cuda.get_elapsed_time(start, stop), 1e-3))))
        best = float("inf")
        for _ in range(3):
            start.record()
            for _ in range(reps):
                fn()
            stop.record()
            stop.synchronize()
            best = min(best, cp.cuda.get_elapsed_time(start, stop) / reps)
        return best

    def stats(self) -> dict[str, int]:
        return {"used_bytes": int(self.pool.used_bytes()),
                "pool_bytes": int(self.pool.total_bytes()),
                "free_blocks": int(self.pool.n_free_blocks())}

    def reset_peak(self, track: bool = True) -> None:
        """Start a new high-water mark of the pool's bytes in use (`stats`'s ``used_bytes``),
        as ``torch.cuda.reset_peak_memory_stats``: from now on every allocation reads the
        pool's count, until ``reset_peak(track=False)`` takes that read out of the allocation
        path again.  Allocations into another pool (a CUDA graph's private pool while it
        records) are not counted."""
        alloc = self._alloc = self.cupy.cuda.alloc
        used = self.pool.used_bytes
        self._peak = int(used())
        if not track:
            return

        def tracked(nbytes: int) -> Any:
            storage = alloc(nbytes)
            n = used()
            if n > self._peak:
                self._peak = n
            return storage
        self._alloc = tracked

    def peak_bytes(self) -> int:
        """The most bytes in use in the pool since the last `reset_peak` (while tracking; with
        tracking off, the larger of the count at the reset and now)."""
        return max(self._peak, int(self.pool.used_bytes()))
