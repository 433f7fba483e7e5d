"""The tape: a `Cell` is an autodiff tensor's payload, a `Node` one recorded op.

Cells point to the node that made them; nodes point to their inputs' nodes (or to leaf cells),
never to the cells of intermediates.  So an intermediate's value lives only as long as a user
holds its tensor or a node saved it for its backward rule, and nothing forms a reference cycle:
reference counting frees a graph as soon as its last tensor goes.  A node saves only the values
its rule reads (`ember_autodiff.rules.READS`); the rule gets an `Unsaved` for the others.
"""

from __future__ import annotations

import weakref
from typing import Any

from ember.backend import Tensor
from ember.ops import Op

__all__ = ["Cell", "Node", "Unsaved"]


class Cell:
    """Payload of an `AutodiffTensor`: the inner-device tensor and where it came from.

    ``shape`` is the inner value's shape (what ``tensor.payload.shape`` reads).
    """

    __slots__ = ("__weakref__", "node", "requires_grad", "shape", "value")

    def __init__(self, value: Tensor, node: Node | None, requires_grad: bool) -> None:
        self.value = value
        self.shape = value.payload.shape
        self.node = node
        self.requires_grad = requires_grad

    def __repr__(self) -> str:
        kind = "leaf" if self.node is None else f"from {self.node.op.name}"
        return f"Cell({kind}, shape={tuple(self.shape)}, requires_grad={self.requires_grad})"


class Unsaved:
    """What a rule gets for an input or output whose value it does not read: the tensor's
    shape, dtype and device, read as on a tensor (``x.shape``, ``x.dtype``, ``x.device``,
    ``x.payload.shape``), so that it can still build zeros of it or cast to its dtype.  The
    value itself was not kept alive (PyTorch's ``save_for_backward`` picks what to keep the
    same way).
    """

    __slots__ = ("device", "dtype", "shape")

    def __init__(self, shape: tuple[int, ...], dtype: Any, device: Any) -> None:
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = device

    @property
    def payload(self) -> Unsaved:  # the rules read ``t.payload.shape``
        return self

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"Unsaved(shape={self.shape}, dtype={self.dtype}, device={self.device})"


class Node:
    """One recorded op: what its backward rule needs, and where gradients go next.

    ``parents[i]`` is the node (or leaf cell) behind input ``i``, or None where that input does
    not require grad.  ``args`` and ``out`` are the inner-device inputs and output(s) the rule
    reads; under checkpointing they are None where they can be recomputed.  ``ref`` is a weak
    reference to the output cell: the gradient of an intermediate is kept only while its
    tensor is alive.  ``depth`` counts unsaved (checkpointed) producers in a row; it is -1 for
    nodes that saved everything, and -2 for nodes that saved what their rule reads: their
    ``args`` and ``out`` are None for the values of intermediates that it does not read (and
    for the first output), described again by the parent nodes' (and this node's) ``shape``
    and ``dtype`` when the rule runs (`Unsaved`).
    """

    __slots__ = ("args", "depth", "dtype", "op", "out", "params", "parents", "ref", "shape")

    def __init__(self, op: Op, params: dict[str, Any],
                 parents: tuple[Node | Cell | None, ...], args: tuple[Tensor | None, ...],
                 out: Any, cell: Cell, depth: int) -> None:
        self.op = op
        self.params = params
        self.parents: tuple[Node | Cell | None, ...] | None = parents
        self.args: tuple[Tensor | None, ...] | None = args
        self.out = out
        self.shape = cell.shape
        self.dtype = cell.value.dtype
        self.ref = weakref.ref(cell)
        self.depth = depth

    def free(self) -> None:
        """Drop what backward needed (called after the pass unless ``retain_graph``)."""
        self.parents = None
        self.args = None
        self.out = None

    def __repr__(self) -> str:
        return f"Node({self.op.name}, shape={tuple(self.shape)})"
