"""A cheap availability check: the HIP runtime answers, and cupy/triton are installed."""

from __future__ import annotations

import ctypes
import functools
import importlib.util

__all__ = ["device_count", "probe"]


@functools.cache
def _runtime() -> tuple[int, str]:
    try:
        lib = ctypes.CDLL("libamdhip64.so")
    except OSError:
        return 0, "no ROCm runtime (libamdhip64.so not found)"
    n = ctypes.c_int(0)
    err = lib.hipGetDeviceCount(ctypes.byref(n))
    if err != 0 or n.value == 0:
        return 0, f"no AMD GPU (hipGetDeviceCount returned error {err}, {n.value} devices)"
    return n.value, ""


def probe() -> tuple[bool, str]:
    """``(available, reason)`` for the ``rocm`` devices."""
    if importlib.util.find_spec("cupy") is None:
        return False, "cupy (a ROCm build) is not installed"
    if importlib.util.find_spec("triton") is None:
        return False, "triton is not installed"
    n, reason = _runtime()
    return n > 0, reason


def device_count() -> int:
    return max(_runtime()[0], 1)
