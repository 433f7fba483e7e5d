"""What the GPU plugins share: availability probes, ember's own Triton driver over CuPy, and
the making of a `TritonBackend` on CuPy memory, each parametrised by a `Vendor`.

``ember_cuda`` and ``ember_rocm`` are each a `Vendor` (the runtime library that counts the
devices, Triton's driver classes of that target) plus what is theirs alone (``ember_cuda``:
cuBLAS, its launcher, CUDA graphs).  CuPy runs on both: its ``cupy.cuda`` namespace wraps HIP
on ROCm builds, so memory (`ember_triton.CupyMemory`), streams and the current device come
from CuPy alike.

Triton's stock drivers ask PyTorch for the current device and stream (Triton 3.6 imports torch
when the NVIDIA driver is created, and the HIP driver still does in 3.9).  `install_driver`
subclasses the target's driver, keeps its compiler utilities and launcher, and answers those
questions from CuPy, so launches follow CuPy's current device and stream and torch is never
imported.

Nothing here imports cupy or triton at module level: probes run at ``import ember``.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import importlib.util
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import TritonBackend

__all__ = ["Vendor", "create_backend", "install_driver"]


@dataclass(frozen=True)
class Vendor:
    """One GPU vendor's plumbing.

    Parameters
    ----------
    name : the device name (``cuda``, ``rocm``); also the `TritonBackend`'s name.
    library, no_library : the vendor's runtime library (``libcuda.so.1``) and the reason given
        where it cannot be loaded (``no CUDA driver``; the library's name is added).
    count_devices : ``(library) -> (devices, reason)`` from the loaded runtime library,
        without cupy or triton (``reason`` says why there are none).  Called once per process.
    cupy_missing, triton_missing : the reasons given when cupy or triton is not installed.
    triton_driver : Triton's driver module of the target (``triton.backends.nvidia.driver``)
        and the names of its driver, utilities and launcher classes.
    capability : whether the driver reports the compute capability from CuPy (CUDA; HIP's
        driver reads the architecture through its own utilities).
    """

    name: str
    library: str
    no_library: str
    count_devices: Callable[[ctypes.CDLL], tuple[int, str]]
    cupy_missing: str
    triton_missing: str
    triton_driver: tuple[str, str, str, str]
    capability: bool = False

    @functools.cached_property
    def devices(self) -> tuple[int, str]:
        """``count_devices(library)``, once."""
        try:
            lib = ctypes.CDLL(self.library)
        except OSError:
            return 0, f"{self.no_library} ({self.library} not found)"
        return self.count_devices(lib)

    def probe(self) -> tuple[bool, str]:
        """``(available, reason)`` for this vendor's devices (cheap: no cupy or triton
        import)."""
        if importlib.util.find_spec("cupy") is None:
            return False, self.cupy_missing
        if importlib.util.find_spec("triton") is None:
            return False, self.triton_missing
        n, reason = self.devices
        return n > 0, reason

    def device_count(self) -> int:
        """Devices to register (at least one, so an absent GPU is listed with its reason)."""
        return max(self.devices[0], 1)


_LOCK = threading.Lock()
_INSTALLED: dict[str, Any] = {}


def _make_driver(vendor: Vendor) -> Any:
    import cupy

    module, driver_name, utils_name, launcher_name = vendor.triton_driver
    mod = importlib.import_module(module)
    base = getattr(mod, driver_name)
    utils_cls, launcher_cls = getattr(mod, utils_name), getattr(mod, launcher_name)

    def stream(device: int | None = None) -> int:
        return int(cupy.cuda.get_current_stream().ptr)

    def capability(device: int | None = None) -> tuple[int, int]:
        dev = cupy.cuda.runtime.getDevice() if device is None else device
        cc = int(cupy.cuda.Device(dev).compute_capability)
        return cc // 10, cc % 10

    class EmberDriver(base):  # type: ignore[misc, valid-type]  # triton has no type stubs
        def __init__(self) -> None:  # no super(): GPUDriver.__init__ imports torch
            self.utils = utils_cls()
            self.launcher_cls = launcher_cls
            self.get_current_device = cupy.cuda.runtime.getDevice
            self.set_current_device = cupy.cuda.runtime.setDevice
            self.get_current_stream = stream
            if vendor.capability:
                self.get_device_capability = capability

        @staticmethod
        def is_active() -> bool:
            return True

        def get_active_torch_device(self) -> Any:
            raise RuntimeError(f"ember's {vendor.name} driver does not use PyTorch")

    EmberDriver.__name__ = EmberDriver.__qualname__ = f"Ember{driver_name}"
    return EmberDriver()


def install_driver(vendor: Vendor) -> Any:
    """Make ember's driver for ``vendor`` Triton's active driver (once per process); returns
    it."""
    with _LOCK:
        drv = _INSTALLED.get(vendor.name)
        if drv is None:
            from triton.runtime import driver

            drv = _INSTALLED[vendor.name] = _make_driver(vendor)
            driver.set_active(drv)
        return drv


def create_backend(vendor: Vendor, index: int) -> TritonBackend:
    """A `TritonBackend` on device ``index`` of ``vendor``: CuPy memory, ember's driver, the
    float32 matmul precision of ``EMBER_MATMUL_PRECISION`` (``ieee`` by default).  Raises
    ``DeviceUnavailableError`` with the probe's reason where the device is absent."""
    ok, reason = vendor.probe()
    if not ok:
        from ember.backend import DeviceUnavailableError

        raise DeviceUnavailableError(f"device '{vendor.name}:{index}' is unavailable: {reason}")
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise RuntimeError(f"{vendor.name} devices need compiled Triton kernels, but "
                           "TRITON_INTERPRET is set in this process (the triton-interpret "
                           "device sets it)")
    from ._cupy import CupyMemory
    from .backend import TritonBackend

    memory = CupyMemory(index)
    memory.activate()
    install_driver(vendor)
    precision = os.environ.get("EMBER_MATMUL_PRECISION", "ieee")
    return TritonBackend(memory, vendor.name, matmul_precision=precision)
