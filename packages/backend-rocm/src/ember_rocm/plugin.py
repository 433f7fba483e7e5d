"""The ``rocm:N`` devices.  Registers everywhere; unavailable (with the reason) without an AMD
GPU.  Untested on hardware."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ember.backend import DeviceSpec
from ember.hookspecs import hookimpl

from .probe import device_count, probe

if TYPE_CHECKING:
    from ember_triton import TritonBackend


def _factory(index: int) -> TritonBackend:
    ok, reason = probe()
    if not ok:
        from ember.backend import DeviceUnavailableError

        raise DeviceUnavailableError(f"device 'rocm:{index}' is unavailable: {reason}")
    # CuPy's memory layer is the same on ROCm builds of CuPy
    from ember_triton import CupyMemory, TritonBackend

    from .driver import install

    memory = CupyMemory(index)
    memory.activate()
    install()
    return TritonBackend(memory, "rocm",
                         matmul_precision=os.environ.get("EMBER_MATMUL_PRECISION", "ieee"))


@hookimpl
def ember_devices_register() -> list[DeviceSpec]:
    """AMD GPUs through Triton's HIP backend and CuPy-ROCm (untested on hardware)."""
    return [DeviceSpec(name="rocm", factory=_factory, probe=probe, count=device_count,
                       priority=15, plugin="rocm",
                       description="AMD GPU: ember's Triton kernels on CuPy-ROCm memory "
                                   "(untested on hardware)")]
