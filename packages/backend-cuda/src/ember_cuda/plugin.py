"""The ``cuda:N`` devices.  Registers everywhere; unavailable (with the reason) without a GPU.

A device is `ember_triton.gpu.create_backend` (CuPy memory, ember's Triton driver) plus what
is CUDA's alone, through the hooks of `ember_triton.vendor`: cuBLASLt and cuBLAS as matmul
candidates (`gemm.CublasGemm`; ``EMBER_CUBLAS=0`` leaves matmuls to Triton), the compiled
launcher (`launcher.make_entry`), and ember.compile's programs replayed as CUDA graphs.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ember.backend import DeviceSpec
from ember.hookspecs import hookimpl

from .probe import CUDA, device_count, probe

if TYPE_CHECKING:
    from ember_triton import TritonBackend


def _factory(index: int) -> TritonBackend:
    from ember_triton.gpu import create_backend

    from .gemm import CublasGemm
    from .launcher import make_entry

    backend = create_backend(CUDA, index)
    backend.vendor_gemm = CublasGemm(index)
    backend.use_vendor_gemm = os.environ.get("EMBER_CUBLAS", "1") != "0"
    backend.make_launch = make_entry
    # ember.compile's programs replay as CUDA graphs (cuBLASLt's calls recorded inside them)
    backend.capture_program = _capture_program(backend)
    return backend


def _capture_program(backend: TritonBackend) -> Any:
    from .graph import capture_program

    class _Base:  # what ProgramGraph needs of the device before the backend has one
        def __init__(self) -> None:
            self.backend = backend

        def synchronize(self) -> None:
            backend.synchronize()
    return capture_program(_Base())


@hookimpl
def ember_devices_register() -> list[DeviceSpec]:
    """NVIDIA GPUs through Triton and CuPy."""
    return [DeviceSpec(name="cuda", factory=_factory, probe=probe, count=device_count,
                       priority=20, plugin="cuda",
                       description="NVIDIA GPU: ember's Triton kernels on CuPy memory")]
