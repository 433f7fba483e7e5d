"""The ``cuda:N`` devices.  Registers everywhere; unavailable (with the reason) without a GPU."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ember.backend import DeviceSpec
from ember.hookspecs import hookimpl

from .probe import device_count, probe

if TYPE_CHECKING:
    from ember_triton import TritonBackend


def _factory(index: int) -> TritonBackend:
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise RuntimeError("cuda devices need compiled Triton kernels, but TRITON_INTERPRET is "
                           "set in this process (the triton-interpret device sets it)")
    ok, reason = probe()
    if not ok:
        from ember.backend import DeviceUnavailableError

        raise DeviceUnavailableError(f"device 'cuda:{index}' is unavailable: {reason}")
    from ember_triton import CupyMemory, TritonBackend

    from .driver import install

    memory = CupyMemory(index)
    memory.activate()
    install()
    precision = os.environ.get("EMBER_MATMUL_PRECISION", "ieee")
    backend = TritonBackend(memory, "cuda", matmul_precision=precision)
    # ember.compile's programs replay as CUDA graphs (cuBLASLt's calls recorded inside them)
    backend.capture_program = _capture_program(backend)
    return backend


def _capture_program(backend: TritonBackend) -> object:
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
