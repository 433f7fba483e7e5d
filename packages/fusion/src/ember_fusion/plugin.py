"""The ``fusion`` decorator's plugin, and the fusion compiler it ships for the ``cpu`` backend."""

from __future__ import annotations

from typing import Any

from ember.backend import DecoratorSpec, Device
from ember.hookspecs import hookimpl


def _factory(inner: Device, **options: Any) -> Any:
    from ._backend import FusionBackend

    return FusionBackend(inner, **options)


@hookimpl
def ember_decorators_register() -> list[DecoratorSpec]:
    """``fusion<inner>``: lazy tensors and fused kernels."""
    return [DecoratorSpec(name="fusion", factory=_factory, plugin="fusion",
                          description="lazy recording and kernel fusion")]


@hookimpl
def ember_fusion_compiler(backend: str) -> Any | None:
    """The generated-numpy compiler for ``cpu`` (the cpu package does not ship one)."""
    if backend == "cpu":
        from .cpu import CpuFusionCompiler

        return CpuFusionCompiler()
    return None
