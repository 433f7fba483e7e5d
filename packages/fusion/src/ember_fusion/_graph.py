"""The lazy graph: `Node` (one recorded op), `Handle` (a fusion tensor's payload), shape rules.

A fusion tensor's payload is a `Handle`; the recorded graph links `Node` objects, and each node
holds only a *weak* reference to its handle.  So "is this intermediate held by a Python object?"
is "is its handle still alive?": whatever keeps the payload (a tensor, a parameter rebound to
another's payload, an autodiff tape) keeps the handle, and nothing inside Fusion does.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ember import ops
from ember.backend import broadcast_shapes, ir

if TYPE_CHECKING:
    from ember import DType, Tensor
    from ember.ops import Op

    from ._stream import Stream

__all__ = ["SHAPE_RULES", "Handle", "Node", "Shape", "pending"]

Shape = tuple[int, ...]


class Node:
    """One value of the graph: an op recorded in a stream, computed by its flush.

    ``value`` is the inner device's tensor once computed; ``op``/``params`` describe the
    recorded op (the stream keeps where its inputs come from).
    """

    __slots__ = ("dtype", "error", "handle", "index", "op", "owner", "params", "shape",
                 "stream", "value")

    def __init__(self, shape: Shape, dtype: DType, op: Op | None, params: dict[str, Any],
                 value: Tensor | None, stream: Stream | None) -> None:
        self.shape = shape
        self.dtype = dtype
        self.op = op
        self.params = params
        self.value = value
        self.stream = stream  # the stream this node is pending in (None once materialised)
        self.index = -1  # position in that stream
        self.handle: weakref.ref[Handle] | None = None
        #: the tensor the recording op returned: a flush that computes this node gives it the
        #: value's payload, so later ops see a computed tensor (others sharing the handle,
        #: e.g. a parameter rebound to it, keep reading it through the handle)
        self.owner: weakref.ref[Tensor] | None = None
        self.error: BaseException | None = None  # why the flush computing it failed

    def __repr__(self) -> str:
        what = "value" if self.value is not None else (self.op.name if self.op else "?")
        return f"Node({what}, {self.shape}, {self.dtype.name})"


class Handle:
    """The payload of a fusion tensor: its node and shape (core reads ``payload.shape``)."""

    __slots__ = ("__weakref__", "node", "shape")

    def __init__(self, node: Node) -> None:
        self.node = node
        self.shape = node.shape
        node.handle = weakref.ref(self)

    def __repr__(self) -> str:
        return f"Handle({self.node!r})"


_new = object.__new__


def pending(shape: Shape, dtype: DType, op: Op, params: dict[str, Any], stream: Stream,
            index: int) -> Handle:
    """The handle of a node recorded at ``index`` of ``stream``: ``Handle(Node(...))`` without
    the calls, as this runs once per recorded op."""
    node: Node = _new(Node)
    node.shape = shape
    node.dtype = dtype
    node.op = op
    node.params = params
    node.value = None
    node.stream = stream
    node.index = index
    node.owner = None
    node.error = None
    h: Handle = _new(Handle)
    h.node = node
    h.shape = shape
    node.handle = weakref.ref(h)
    return h


# -- shape rules of the ops Fusion records lazily ----------------------------------------------

ShapeRule = Callable[[Sequence[Shape], dict[str, Any]], Shape]


#: broadcasts of two different shapes seen so far (a training step repeats a few, and
#: `broadcast_shapes` is general, so it costs microseconds)
_BROADCASTS: dict[tuple[Shape, Shape], Shape] = {}


def _broadcast(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    first = shapes[0]
    if len(shapes) == 1:
        return first
    if len(shapes) == 2:
        second = shapes[1]
        if second == first or not second:  # one shape, or a tensor and a 0-d value
            return first
        if not first:
            return second
        key = (first, second)
        try:
            out = _BROADCASTS.get(key)
        except TypeError:  # not tuples: not remembered
            return broadcast_shapes(first, second)
        if out is None:
            out = broadcast_shapes(first, second)  # raises for shapes that do not broadcast
            if len(_BROADCASTS) >= 4096:
                _BROADCASTS.clear()
            _BROADCASTS[key] = out
        return out
    if all(s == first for s in shapes):
        return first
    return broadcast_shapes(*shapes)


def _core(op: Op) -> ShapeRule:
    """Core's rule of ``op`` (`ember.ops.RULES`): the one rule every device checks, so that a
    recorded op is refused at the call, naming the op, and no fused kernel or view ever sees
    params or shapes that do not fit."""
    rule = op.shape_rule
    if rule is None:  # every op below has one in core; a missing one is a bug, not a pass
        raise RuntimeError(f"ember.ops.{op.name} has no shape rule")
    return rule


EW = ops.elementwise
RD = ops.reduction

#: ops whose value is computed by a fused kernel (elementwise, reductions, matmul heads)
SHAPE_RULES: dict[Op, ShapeRule] = {}
for _name in (*EW.FLOAT_UNARY, *EW.NUMERIC_UNARY, *EW.BOOL_UNARY, *EW.ARITHMETIC_BINARY,
              *EW.FLOAT_BINARY, *EW.COMPARISON_BINARY, *EW.LOGICAL_BINARY, *EW.BITWISE_BINARY,
              "bitwise_not", "where", "clamp"):
    SHAPE_RULES[getattr(EW, _name)] = _broadcast
for _op in (ops.creation.cast, RD.sum, RD.prod, RD.mean, RD.max, RD.min, RD.var, RD.any, RD.all,
            RD.argmax, RD.argmin, ops.linalg.matmul):
    SHAPE_RULES[_op] = _core(_op)


def _adopt(name: str) -> None:
    """An elementwise op defined in the kernel IR after this table was made (a new op) fuses
    like the others."""
    op = ops.registry.get(name)
    if op is not None and op.group == "elementwise" and op not in SHAPE_RULES:
        SHAPE_RULES[op] = _broadcast


for _name in ir.names():
    _adopt(_name)
ir.on_define(_adopt)

#: movement ops recorded lazily and run one by one on the inner device (numpy views on cpu)
VIEW_RULES: dict[Op, ShapeRule] = {
    op: _core(op) for op in (ops.movement.reshape, ops.movement.permute, ops.movement.expand,
                             ops.movement.slice)
}


def numel(shape: Shape) -> int:
    return math.prod(shape)


def params_key(params: dict[str, Any]) -> tuple[Any, ...]:
    """``params`` as a key for compiled kernels and plans: its items, except that a float
    ``-0.0`` is told apart from ``0.0`` (they compare and hash equal, but a kernel that bakes
    ``clamp(max=-0.0)`` in gives other bits than one for ``max=0.0``)."""
    items = tuple(params.items())
    for _, v in items:
        if type(v) is float and v == 0.0 and math.copysign(1.0, v) < 0:
            return tuple((k, ("-0.0",)) if type(v) is float and v == 0.0
                         and math.copysign(1.0, v) < 0 else (k, v) for k, v in items)
    return items

