"""The ``triton-interpret`` device: ember's Triton kernels run by Triton's interpreter on host
memory.  Imports nothing heavy: triton is imported when the device is first created."""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from ember.backend import DeviceSpec
from ember.hookspecs import hookimpl

if TYPE_CHECKING:
    from .backend import TritonBackend

#: conformance cases the Triton backends cannot pass yet: ``{pattern: reason}``
SKIPS: dict[str, str] = {}


def _probe() -> tuple[bool, str]:
    if importlib.util.find_spec("triton") is None:
        return False, "triton is not installed (pip install triton)"
    return True, ""


def _factory(index: int) -> TritonBackend:
    from ._jit import enable_interpreter
    from ._memory import HostMemory

    enable_interpreter()
    from .backend import TritonBackend

    return TritonBackend(HostMemory(), "triton-interpret")


@hookimpl
def ember_devices_register() -> list[DeviceSpec]:
    """The interpreter device, available wherever triton imports."""
    return [DeviceSpec(name="triton-interpret", factory=_factory, probe=_probe, priority=-10,
                       indexed=False, plugin="triton",
                       description="ember's Triton kernels under Triton's interpreter (host)")]


@hookimpl
def ember_conformance_skips(device: str) -> dict[str, str] | None:
    """Skips of the Triton kernels on the interpreter and on GPUs."""
    base = device.rsplit("<", 1)[-1].rstrip(">").split(":")[0]
    if base in ("triton-interpret", "cuda", "rocm"):
        return dict(SKIPS)
    return None


@hookimpl
def ember_fusion_compiler(backend: str) -> Any | None:
    """Generated Triton kernels for ``fusion<triton-interpret>``, ``fusion<cuda:N>`` and
    ``fusion<rocm:N>`` (configured with the backend when the fusion device is created)."""
    if backend in ("triton-interpret", "cuda", "rocm"):
        from .fusion import TritonFusionCompiler

        return TritonFusionCompiler()
    return None
