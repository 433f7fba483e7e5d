"""The ``cpu`` device's plugin.  Imports nothing heavy: the backend is built on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.backend import DeviceSpec
from ember.hookspecs import hookimpl

if TYPE_CHECKING:
    from .backend import CpuBackend


def _factory(index: int) -> CpuBackend:
    from .backend import CpuBackend

    return CpuBackend()


@hookimpl
def ember_devices_register() -> list[DeviceSpec]:
    """The host CPU, always available."""
    return [DeviceSpec(name="cpu", factory=_factory, priority=0, indexed=False,
                       description="the host CPU (numpy)", plugin="cpu")]


@hookimpl
def ember_fusion_compiler(backend: str) -> Any | None:
    """The generated-numpy compiler for ``fusion<cpu>`` (see ``ember_cpu.fusion``)."""
    if backend != "cpu":
        return None
    from .fusion import CpuFusionCompiler

    return CpuFusionCompiler()
