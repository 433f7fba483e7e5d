"""The primitive set every backend fills, grouped like the array API standard.

Each primitive is an :class:`Op`; a backend's op table maps ops to kernels.  Composite ops
(softmax, layer_norm, ...) are built from these in :mod:`ember.functional` and need nothing
from a backend.
"""

from . import creation, elementwise, linalg, movement, nn, reduction
from ._op import Op, registry

__all__ = ["Op", "creation", "elementwise", "linalg", "movement", "nn", "primitives",
           "reduction", "registry"]


def primitives() -> tuple[Op, ...]:
    """Every primitive of the core set (custom ops of plugins excluded)."""
    return tuple(op for op in registry.values() if op.group != "custom")


def __getattr__(name: str) -> Op:
    try:
        return registry[name]
    except KeyError:
        raise AttributeError(f"ember.ops has no op {name!r}") from None
