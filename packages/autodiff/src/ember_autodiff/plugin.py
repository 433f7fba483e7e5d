"""The ``autodiff`` decorator's plugin: registers ``autodiff<inner>``; imports nothing heavy."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.backend import DecoratorSpec
from ember.hookspecs import hookimpl

if TYPE_CHECKING:
    from ember.backend import Device

    from .backend import AutodiffBackend


def _factory(inner: Device, **options: Any) -> AutodiffBackend:
    from .backend import AutodiffBackend

    return AutodiffBackend(inner, **options)


@hookimpl
def ember_decorators_register() -> list[DecoratorSpec]:
    """``autodiff<inner>``, with the option ``checkpointing=true``."""
    return [DecoratorSpec(name="autodiff", factory=_factory, plugin="autodiff",
                          description="reverse-mode gradients on a tape over any device")]
