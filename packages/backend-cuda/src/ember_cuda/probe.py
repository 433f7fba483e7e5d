"""The CUDA `ember_triton.gpu.Vendor`: devices counted by the CUDA driver library.

No cupy or triton import happens here (``import ember`` and ``ember.devices()`` stay fast).
"""

from __future__ import annotations

import ctypes

from ember_triton.gpu import Vendor

__all__ = ["CUDA", "device_count", "probe"]


def _count(lib: ctypes.CDLL) -> tuple[int, str]:
    err = lib.cuInit(0)
    if err != 0:
        return 0, f"no CUDA driver: cuInit failed with CUDA error {err}"
    n = ctypes.c_int(0)
    err = lib.cuDeviceGetCount(ctypes.byref(n))
    if err != 0:
        return 0, f"no CUDA device: cuDeviceGetCount failed with CUDA error {err}"
    if n.value == 0:
        return 0, "no CUDA device"
    return n.value, ""


CUDA = Vendor(
    name="cuda", library="libcuda.so.1", no_library="no CUDA driver", count_devices=_count,
    cupy_missing="cupy is not installed (pip install 'ember-backend-cuda[cuda13]')",
    triton_missing="triton is not installed (pip install triton)",
    triton_driver=("triton.backends.nvidia.driver", "CudaDriver", "CudaUtils", "CudaLauncher"),
    capability=True)


def probe() -> tuple[bool, str]:
    """``(available, reason)`` for the ``cuda`` devices."""
    return CUDA.probe()


def device_count() -> int:
    return CUDA.device_count()
