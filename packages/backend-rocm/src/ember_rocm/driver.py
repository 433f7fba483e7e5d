"""ember's own Triton driver for AMD GPUs: device, stream and architecture from CuPy-ROCm.

Untested on hardware.  Mirrors ``ember_cuda.driver``: Triton's HIP driver asks torch for the
current device and stream; this subclass keeps Triton's HIP utilities and launcher and answers
from CuPy (whose ``cupy.cuda`` namespace wraps HIP on ROCm builds).
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["install"]

_LOCK = threading.Lock()
_INSTALLED: list[Any] = []


def _make_driver() -> Any:
    import cupy
    from triton.backends.amd import driver as hip

    class EmberHipDriver(hip.HIPDriver):  # type: ignore[misc]  # triton has no type stubs
        def __init__(self) -> None:  # no super(): GPUDriver.__init__ imports torch
            self.utils = hip.HIPUtils()
            self.launcher_cls = hip.HIPLauncher
            self.get_current_device = cupy.cuda.runtime.getDevice
            self.set_current_device = cupy.cuda.runtime.setDevice
            self.get_current_stream = self._stream

        @staticmethod
        def _stream(device: int | None = None) -> int:
            return int(cupy.cuda.get_current_stream().ptr)

        @staticmethod
        def is_active() -> bool:
            return True

        def get_active_torch_device(self) -> Any:
            raise RuntimeError("ember's ROCm driver does not use PyTorch")

    return EmberHipDriver()


def install() -> Any:
    """Make ember's HIP driver Triton's active driver (once per process); returns it."""
    with _LOCK:
        if not _INSTALLED:
            from triton.runtime import driver

            drv = _make_driver()
            driver.set_active(drv)
            _INSTALLED.append(drv)
        return _INSTALLED[0]
