"""The ``fusion`` decorator's plugin (each backend ships its own fusion compiler)."""

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
