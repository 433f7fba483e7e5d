"""The device page: platform look-up, one context and in-order queue, a pooled allocator, a
program cache, and `CLArray`, the strided view every kernel reads and writes.

Kernels are launched asynchronously on the queue; only host reads (`Runtime.read`) wait.
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.tools as cl_tools
from ember.backend import allocation_error
from ember.backend.strided import StridedView, contiguous_strides, is_float

GROUP = 64

# the status codes of an allocation the device cannot make
_ALLOCATION_FAILURES = frozenset({
    cl.status_code.INVALID_BUFFER_SIZE, cl.status_code.MEM_OBJECT_ALLOCATION_FAILURE,
    cl.status_code.OUT_OF_RESOURCES, cl.status_code.OUT_OF_HOST_MEMORY})

__all__ = ["GROUP", "CLArray", "Runtime", "compute_type", "contiguous_strides", "ctype",
           "is_float", "list_devices", "load_expr", "select_devices", "store_expr"]

# float16 and bfloat16 are stored as their 16 bits in a ``ushort`` (ember has no uint16 dtype,
# so the C type names them unambiguously) and computed in float: loads widen exactly, stores
# round to nearest even, as PyTorch's CPU kernels do.  This needs no cl_khr_fp16: vload_half
# and vstore_half_rte are core OpenCL C.  Data movement copies the bits untouched.
_CTYPES = {
    "float16": "ushort", "bfloat16": "ushort", "float32": "float", "float64": "double",
    "int8": "char", "int16": "short", "int32": "int", "int64": "long", "uint8": "uchar",
    "bool": "uchar",
}

# value conversions between the 16-bit storage and float (prepended to programs using them)
HALF_HELPERS = r"""
inline float h2f(ushort h) { return vload_half(0, (const __private half*)&h); }
inline ushort f2h(float f) { ushort h; vstore_half_rte(f, 0, (__private half*)&h); return h; }
inline float bf2f(ushort h) { return as_float((uint)h << 16); }
inline ushort f2bf(float f) {
    uint u = as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);  /* quiet nan */
    return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
"""
_HALF_HELPERS_FP64 = r"""
inline ushort d2h(double f) { ushort h; vstore_half_rte(f, 0, (__private half*)&h); return h; }
"""


def ctype(dtype: np.dtype[Any]) -> str:
    """The OpenCL C type storing ``dtype`` (bool is a 0/1 ``uchar``, the 16-bit floats their
    bits in a ``ushort``)."""
    return _CTYPES[np.dtype(dtype).name]


def compute_type(dtype: np.dtype[Any]) -> str:
    """The type arithmetic happens in: the 16-bit floats compute in ``float``."""
    t = ctype(dtype)
    return "float" if t == "ushort" else t


def load_expr(dtype: np.dtype[Any], value: str) -> str:
    """C converting the stored ``value`` of ``dtype`` to its compute type."""
    name = np.dtype(dtype).name
    if name == "float16":
        return f"h2f({value})"
    if name == "bfloat16":
        return f"bf2f({value})"
    return f"({compute_type(dtype)})({value})"


def store_expr(dtype: np.dtype[Any], value: str, src: str = "float") -> str:
    """C converting ``value`` (of C type ``src``) to the storage of ``dtype``, rounding to
    nearest even for the 16-bit floats."""
    name = np.dtype(dtype).name
    if name == "float16":
        return f"d2h({value})" if src == "double" else f"f2h((float)({value}))"
    if name == "bfloat16":
        return f"f2bf((float)({value}))"
    return f"({ctype(dtype)})({value})"


def list_devices() -> list[tuple[int, int, cl.Device]]:
    """Every OpenCL device as ``(platform index, device index, device)``."""
    out = []
    for p, platform in enumerate(cl.get_platforms()):
        try:
            devs = platform.get_devices()
        except cl.Error:  # a platform without devices raises instead of returning []
            continue
        out += [(p, d, dev) for d, dev in enumerate(devs)]
    return out


def select_devices() -> list[tuple[int, int, cl.Device]]:
    """The devices ``opencl:N`` indexes: all of them, or ``EMBER_OPENCL_DEVICE=p:d`` only."""
    devs = list_devices()
    want = os.environ.get("EMBER_OPENCL_DEVICE", "").strip()
    if not want:
        return devs
    p, _, d = want.partition(":")
    return [row for row in devs if row[0] == int(p) and (not d or row[1] == int(d))]


class CLArray(StridedView):
    """A strided view of an OpenCL buffer: ``shape``, ``strides`` and ``offset`` in elements.

    Tensors are immutable, so views share buffers freely; no kernel writes into an input.
    """

    __slots__ = ("buffer", "dtype", "offset", "shape", "strides")

    def __init__(self, buffer: Any, shape: tuple[int, ...], dtype: np.dtype[Any],
                 strides: tuple[int, ...] | None = None, offset: int = 0) -> None:
        self.buffer = buffer
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.strides = contiguous_strides(self.shape) if strides is None else tuple(strides)
        self.offset = offset

    def view(self, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> CLArray:
        return CLArray(self.buffer, shape, self.dtype, strides, offset)

    def __repr__(self) -> str:
        return f"CLArray(shape={self.shape}, dtype={self.dtype}, strides={self.strides})"


class Runtime:
    """One OpenCL device: context, in-order queue, memory pool and compiled programs."""

    def __init__(self, device: cl.Device) -> None:
        self.device = device
        self.context = cl.Context([device])
        self.queue = cl.CommandQueue(self.context)
        self.pool = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(self.queue))
        ext = device.extensions
        self.fp64 = "cl_khr_fp64" in ext
        self.fp16 = "cl_khr_fp16" in ext
        self.max_group = int(device.max_work_group_size)
        self.max_alloc = int(device.max_mem_alloc_size)
        self._programs: dict[str, cl.Program] = {}
        self._kernels: dict[tuple[str, str], cl.Kernel] = {}

    # -- memory -------------------------------------------------------------------------------

    def empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> CLArray:
        """A new contiguous array; a failed allocation is an `ember.OutOfMemoryError` naming
        the shape, dtype and bytes (core's dispatch adds the op and the device)."""
        nbytes = max(math.prod(shape) * np.dtype(dtype).itemsize, 8)
        if nbytes > self.max_alloc:  # the driver's error would not say why (or not be raised)
            raise allocation_error(shape, dtype, nbytes, reason=(
                f"the OpenCL device {self.device.name.strip()!r} allocates at most "
                f"{self.max_alloc} bytes at once"))
        try:
            buffer = self.pool.allocate(nbytes)
        except cl.Error as exc:
            if getattr(exc, "code", None) not in _ALLOCATION_FAILURES:
                raise
            raise allocation_error(shape, dtype, nbytes, reason=f"OpenCL: {exc}") from exc
        return CLArray(buffer, shape, dtype)

    def upload(self, array: np.ndarray) -> CLArray:
        # Note: not np.ascontiguousarray, which turns 0-d arrays into 1-d ones
        host = np.require(array, requirements='C')
        out = self.empty(host.shape, host.dtype)
        if host.size:
            cl.enqueue_copy(self.queue, out.buffer, host, is_blocking=True)
        return out

    def read(self, arr: CLArray) -> np.ndarray:
        """The values of a contiguous ``arr`` on the host (waits for the queue)."""
        host = np.empty(arr.shape, arr.dtype)
        if host.size:
            cl.enqueue_copy(self.queue, host, arr.buffer,
                            src_offset=arr.offset * arr.dtype.itemsize, is_blocking=True)
        return host

    # -- programs -----------------------------------------------------------------------------

    def kernel(self, source: str, name: str) -> cl.Kernel:
        """The kernel ``name`` of ``source``, built once per process (and cached on disk by
        pyopencl and PoCL across processes)."""
        key = (source, name)
        k = self._kernels.get(key)
        if k is None:
            prog = self._programs.get(source)
            if prog is None:
                head = ""
                if "double" in source:
                    head += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
                if any(f in source for f in ("h2f(", "f2h(", "bf2f(", "f2bf(", "d2h(")):
                    head += HALF_HELPERS + (_HALF_HELPERS_FP64 if "d2h(" in source else "")
                with warnings.catch_warnings():
                    # PoCL prints harmless build logs that pyopencl turns into warnings
                    warnings.simplefilter("ignore")
                    prog = cl.Program(self.context, head + source).build()
                self._programs[source] = prog
            k = self._kernels[key] = cl.Kernel(prog, name)
        return k

    def launch(self, kernel: cl.Kernel, gsize: tuple[int, ...], lsize: tuple[int, ...] | None,
               *args: Any) -> None:
        if math.prod(gsize) == 0:
            return
        kernel(self.queue, gsize, lsize, *args)

    def launch1d(self, kernel: cl.Kernel, n: int, *args: Any) -> None:
        """Run ``n`` work-items in groups of `GROUP`; the kernel's last argument is ``n``.

        A fixed local size matters on PoCL: it compiles a work-group function per local size,
        and letting the runtime choose one makes every new tensor size a new compilation.
        """
        if n == 0:
            return
        kernel(self.queue, (-(-n // GROUP) * GROUP,), (GROUP,), *args, np.int64(n))

    def synchronize(self) -> None:
        self.queue.finish()
