"""The ROCm `ember_triton.gpu.Vendor`: devices counted by the HIP runtime.  Untested on
hardware.

No cupy or triton import happens here (``import ember`` and ``ember.devices()`` stay fast).
"""

from __future__ import annotations

import ctypes

from ember_triton.gpu import Vendor

__all__ = ["ROCM", "device_count", "probe"]


def _count(lib: ctypes.CDLL) -> tuple[int, str]:
    n = ctypes.c_int(0)
    err = lib.hipGetDeviceCount(ctypes.byref(n))
    if err != 0 or n.value == 0:
        return 0, f"no AMD GPU (hipGetDeviceCount returned error {err}, {n.value} devices)"
    return n.value, ""


ROCM = Vendor(
    name="rocm", library="libamdhip64.so", no_library="no ROCm runtime", count_devices=_count,
    cupy_missing="cupy (a ROCm build) is not installed",
    triton_missing="triton is not installed",
    triton_driver=("triton.backends.amd.driver", "HIPDriver", "HIPUtils", "HIPLauncher"))


def probe() -> tuple[bool, str]:
    """``(available, reason)`` for the ``rocm`` devices."""
    return ROCM.probe()


def device_count() -> int:
    return ROCM.device_count()
