"""ember's Triton kernel library and the device-independent `TritonBackend`.

``ember_cuda`` and ``ember_rocm`` run these kernels on GPUs; the ``triton-interpret`` device
(registered here) runs the same kernels under Triton's interpreter on host memory.
"""

from ._array import DeviceArray
from ._memory import HostMemory, HostPointer, Memory
from .backend import TritonBackend

__all__ = ["DeviceArray", "HostMemory", "HostPointer", "Memory", "TritonBackend"]
