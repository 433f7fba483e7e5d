"""The entry point: registers the ``count`` decorator with ember (``ember.plugins``)."""

from __future__ import annotations

from typing import Any

from ember.backend import DecoratorSpec, Device
from ember.hookspecs import hookimpl


def _factory(inner: Device, **options: Any) -> Any:
    from .backend import CountingBackend

    return CountingBackend(inner, **options)


@hookimpl
def ember_decorators_register() -> list[DecoratorSpec]:
    """``count<inner>``: every op runs on ``inner`` and is counted by name."""
    return [DecoratorSpec(name="count", factory=_factory, plugin="callcount",
                          description="counts the ops run on the inner device")]
