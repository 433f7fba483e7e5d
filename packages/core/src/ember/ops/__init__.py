"""The primitive set every backend fills, grouped like the array API standard.

Each primitive is an :class:`Op`; a backend's op table maps ops to kernels.  Composite ops
(softmax, layer_norm, ...) are also `Op` objects (:mod:`ember.ops.composite`), but core
computes them from primitives wherever a backend has no kernel of its own for them.

Every op with params or a shape of its own has a shape rule (`RULES`, ``op.shape_rule``):
`check_shapes` runs it, `numel` counts a shape's elements with an overflow check; both are
the public face of `ember.ops._shapes`, for backends (a kernel's host-side guard) and Remote.
"""

from . import composite, creation, elementwise, linalg, movement, nn, reduction
from ._op import Op, registry
from ._shapes import (
    DATA_DEPENDENT,
    MAX_NDIM,
    RULES,
    Rule,
    Shape,
    broadcast as broadcast_rule,
    check_shapes,
    numel,
)

__all__ = ["DATA_DEPENDENT", "MAX_NDIM", "RULES", "Op", "Rule", "Shape", "broadcast_rule",
           "check_shapes",
           "composite", "composites", "creation", "elementwise", "linalg", "movement", "nn",
           "numel", "primitives", "reduction", "registry"]


def primitives() -> tuple[Op, ...]:
    """Every primitive of the core set (custom ops of plugins and composites excluded)."""
    return tuple(op for op in registry.values() if op.group not in ("custom", "composite"))


def composites() -> tuple[Op, ...]:
    """Every composite op: a backend may implement any of them for speed, none is required."""
    return tuple(op for op in registry.values() if op.composite)


def __getattr__(name: str) -> Op:
    try:
        return registry[name]
    except KeyError:
        raise AttributeError(f"ember.ops has no op {name!r}") from None
