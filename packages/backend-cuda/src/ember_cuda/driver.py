"""ember's own Triton driver for NVIDIA GPUs: device, stream and capability come from CuPy.

Triton's stock CUDA driver asks PyTorch for the current device and stream (Triton 3.6 imports
torch when the driver is created).  This subclass keeps Triton's compiler utilities and
launcher but answers those questions from CuPy, so launches follow CuPy's current device and
stream and torch is never imported.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["install"]

_LOCK = threading.Lock()
_INSTALLED: list[Any] = []


def _make_driver() -> Any:
    import cupy
    from triton.backends.nvidia import driver as nv

    class EmberCudaDriver(nv.CudaDriver):  # type: ignore[misc]  # triton has no type stubs
        def __init__(self) -> None:  # no super(): GPUDriver.__init__ imports torch
            self.utils = nv.CudaUtils()
            self.launcher_cls = nv.CudaLauncher
            self.get_current_device = cupy.cuda.runtime.getDevice
            self.set_current_device = cupy.cuda.runtime.setDevice
            self.get_current_stream = self._stream
            self.get_device_capability = self._capability

        @staticmethod
        def _stream(device: int | None = None) -> int:
            return int(cupy.cuda.get_current_stream().ptr)

        @staticmethod
        def _capability(device: int | None = None) -> tuple[int, int]:
            dev = cupy.cuda.runtime.getDevice() if device is None else device
            cc = int(cupy.cuda.Device(dev).compute_capability)
            return cc // 10, cc % 10

        @staticmethod
        def is_active() -> bool:
            return True

        def get_active_torch_device(self) -> Any:
            raise RuntimeError("ember's CUDA driver does not use PyTorch")

    return EmberCudaDriver()


def install() -> Any:
    """Make ember's driver Triton's active driver (once per process); returns it."""
    with _LOCK:
        if not _INSTALLED:
            from triton.runtime import driver

            drv = _make_driver()
            driver.set_active(drv)
            _INSTALLED.append(drv)
        return _INSTALLED[0]
