"""A cheap availability check: the CUDA driver library answers, and cupy/triton are installed.

No cupy or triton import happens here (``import ember`` and ``ember.devices()`` stay fast).
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util

__all__ = ["device_count", "probe"]


@functools.cache
def _driver() -> tuple[int, str]:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0, "no CUDA driver (libcuda.so.1 not found)"
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


def probe() -> tuple[bool, str]:
    """``(available, reason)`` for the ``cuda`` devices."""
    if importlib.util.find_spec("cupy") is None:
        return False, "cupy is not installed (pip install 'ember-backend-cuda[cuda13]')"
    if importlib.util.find_spec("triton") is None:
        return False, "triton is not installed (pip install triton)"
    n, reason = _driver()
    return n > 0, reason


def device_count() -> int:
    return max(_driver()[0], 1)
