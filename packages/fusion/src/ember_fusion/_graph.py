"""The lazy graph: `Node` (one recorded op), `Handle` (a fusion tensor's payload), shape rules.

A fusion tensor's payload is a `Handle`; the recorded graph links `Node` objects, and each node
holds only a *weak* reference to its handle.  So "is this intermediate held by a Python object?"
is "is its handle still alive?": whatever keeps the payload (a tensor, a parameter rebound with
``param._data = new._data``, an autodiff tape) keeps the handle, and nothing inside Fusion does.
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

    __slots__ = ("_dtype", "error", "handle", "index", "op", "owner", "params", "shape",
                 "stream", "value")

    def __init__(self, shape: Shape, dtype: DType, op: Op | None, params: dict[str, Any],
                 value: Tensor | None, stream: Stream | None) -> None:
        self.shape = shape
        self._dtype = dtype
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

    @property
    def dtype(self) -> DType:
        return self._dtype

    def __repr__(self) -> str:
        what = "value" if self.value is not None else (self.op.name if self.op else "?")
        return f"Node({what}, {self.shape}, {self._dtype.name})"


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
    node._dtype = dtype
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


def _reduce(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    dims: tuple[int, ...] = params["dims"]
    s = shapes[0]
    if params.get("keepdim"):
        return tuple(1 if i in dims else n for i, n in enumerate(s))
    return tuple(n for i, n in enumerate(s) if i not in dims)


def _arg_reduce(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    s = shapes[0]
    dim = params["dim"]
    if dim is None:
        return tuple(1 for _ in s) if params.get("keepdim") else ()
    return _reduce(shapes, {"dims": (dim,), "keepdim": params.get("keepdim")})


def _matmul(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    a, b = shapes
    batch = broadcast_shapes(a[:-2], b[:-2])
    return (*batch, a[-2], b[-1])


def _reshape(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    return tuple(params["shape"])


def _permute(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    s = shapes[0]
    return tuple(s[d] for d in params["dims"])


def _slice(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    # starts/stops/steps come from slice.indices, whose results are exactly range()'s
    return tuple(len(range(a, b, c)) for a, b, c in
                 zip(params["starts"], params["stops"], params["steps"], strict=True))


def _same(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    return shapes[0]


EW = ops.elementwise
RD = ops.reduction

#: ops whose value is computed by a fused kernel (elementwise, reductions, matmul heads)
SHAPE_RULES: dict[Op, ShapeRule] = {}
for _name in (*EW.FLOAT_UNARY, *EW.NUMERIC_UNARY, *EW.BOOL_UNARY, *EW.ARITHMETIC_BINARY,
              *EW.FLOAT_BINARY, *EW.COMPARISON_BINARY, *EW.LOGICAL_BINARY, *EW.BITWISE_BINARY,
              "bitwise_not", "where", "clamp"):
    SHAPE_RULES[getattr(EW, _name)] = _broadcast
SHAPE_RULES[ops.creation.cast] = _same
for _op in (RD.sum, RD.prod, RD.mean, RD.max, RD.min, RD.var, RD.any, RD.all):
    SHAPE_RULES[_op] = _reduce
SHAPE_RULES[RD.argmax] = _arg_reduce
SHAPE_RULES[RD.argmin] = _arg_reduce
SHAPE_RULES[ops.linalg.matmul] = _matmul


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
    ops.movement.reshape: _reshape,
    ops.movement.permute: _permute,
    ops.movement.expand: _reshape,
    ops.movement.slice: _slice,
}


def numel(shape: Shape) -> int:
    return math.prod(shape)
