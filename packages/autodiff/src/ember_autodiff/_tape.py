"""The tape: a `Cell` is an autodiff tensor's payload, a `Node` one recorded op.

Cells point to the node that made them; nodes point to their inputs' nodes (or to leaf cells),
never to the cells of intermediates.  So an intermediate's value lives only as long as a user
holds its tensor or a node saved it for its backward rule, and nothing forms a reference cycle:
reference counting frees a graph as soon as its last tensor goes.
"""

from __future__ import annotations

import weakref
from typing import Any

from ember._tensor import Tensor
from ember.ops import Op

__all__ = ["Cell", "Node"]


class Cell:
    """Payload of an `AutodiffTensor`: the inner-device tensor and where it came from.

    ``shape`` is the inner value's shape (core reads ``tensor._data.shape``).
    """

    __slots__ = ("__weakref__", "node", "requires_grad", "shape", "value")

    def __init__(self, value: Tensor, node: Node | None, requires_grad: bool) -> None:
        self.value = value
        self.shape = value._data.shape
        self.node = node
        self.requires_grad = requires_grad

    def __repr__(self) -> str:
        kind = "leaf" if self.node is None else f"from {self.node.op.name}"
        return f"Cell({kind}, shape={tuple(self.shape)}, requires_grad={self.requires_grad})"


class Node:
    """One recorded op: what its backward rule needs, and where gradients go next.

    ``parents[i]`` is the node (or leaf cell) behind input ``i``, or None where that input does
    not require grad.  ``args`` and ``out`` are the inner-device inputs and output(s) the rule
    reads; under checkpointing they are None where they can be recomputed.  ``ref`` is a weak
    reference to the output cell: the gradient of an intermediate is kept only while its
    tensor is alive.  ``depth`` counts unsaved (checkpointed) producers in a row; it is -1 for
    nodes that saved everything.
    """

    __slots__ = ("args", "depth", "op", "out", "params", "parents", "ref", "shape")

    def __init__(self, op: Op, params: dict[str, Any],
                 parents: tuple[Node | Cell | None, ...], args: tuple[Tensor | None, ...],
                 out: Any, cell: Cell, depth: int) -> None:
        self.op = op
        self.params = params
        self.parents: tuple[Node | Cell | None, ...] | None = parents
        self.args: tuple[Tensor | None, ...] | None = args
        self.out = out
        self.shape = cell.shape
        self.ref = weakref.ref(cell)
        self.depth = depth

    def free(self) -> None:
        """Drop what backward needed (called after the pass unless ``retain_graph``)."""
        self.parents = None
        self.args = None
        self.out = None

    def __repr__(self) -> str:
        return f"Node({self.op.name}, shape={tuple(self.shape)})"
