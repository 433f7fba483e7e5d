"""The ``rocm:N`` devices.  Registers everywhere; unavailable (with the reason) without an AMD
GPU.  Untested on hardware."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ember.backend import DeviceSpec
from ember.hookspecs import hookimpl

from .probe import ROCM, device_count, probe

if TYPE_CHECKING:
    from ember_triton import TritonBackend


def _factory(index: int) -> TritonBackend:
    # CuPy memory, ember's HIP driver; no vendor GEMM (rocBLAS is not wired in): Triton's
    # matmul kernels only, and Triton's own launcher
    from ember_triton.gpu import create_backend

    return create_backend(ROCM, index)


@hookimpl
def ember_devices_register() -> list[DeviceSpec]:
    """AMD GPUs through Triton's HIP backend and CuPy-ROCm (untested on hardware)."""
    return [DeviceSpec(name="rocm", factory=_factory, probe=probe, count=device_count,
                       priority=15, plugin="rocm",
                       description="AMD GPU: ember's Triton kernels on CuPy-ROCm memory "
                                   "(untested on hardware)")]
