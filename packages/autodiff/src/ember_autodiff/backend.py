"""`AutodiffBackend`: the ``autodiff<inner>`` device.

Every op runs on the inner device; when grad mode is on, the op is differentiable and one of
its inputs requires grad, a `Node` is recorded so that `backward` can run the op's rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.backend import GRAD_MODE as STATE
from ember.backend import Decorator, Device, Tensor
from ember.ops import Op

from ._tape import Cell, Node, Unsaved
from .rules import READS, RULES, Reads
from .tensor import AutodiffTensor

__all__ = ["AutodiffBackend"]

_new = object.__new__

#: ops whose outputs are recomputed in backward under ``checkpointing=true`` (memory-bound)
RECOMPUTED_GROUPS = frozenset({"elementwise"})


class AutodiffBackend(Decorator):
    """Reverse-mode automatic differentiation over ``inner``.

    Parameters
    ----------
    inner : the device that computes (``cpu``, ``fusion<cpu>``, another ``autodiff<...>``).
    checkpointing : keep no activations for memory-bound (elementwise) ops; recompute them in
        the backward pass from the nearest kept value.
    checkpoint_segment : with checkpointing, keep one value every this many recomputable ops
        in a row, which bounds recomputation (each op is recomputed at most once per pass).

    Examples
    --------
    >>> import ember
    >>> d = ember.device("autodiff<cpu>")
    >>> w = ember.tensor([1.0, 2.0], device=d, requires_grad=True)
    >>> grads = (w * w).sum().backward()
    >>> grads[w].tolist()
    [2.0, 4.0]
    """

    tensor_type = AutodiffTensor

    def __init__(self, inner: Device, *, checkpointing: bool = False,
                 checkpoint_segment: int = 8) -> None:
        super().__init__(inner)
        self.name = "autodiff"
        self.checkpointing = bool(checkpointing)
        if int(checkpoint_segment) < 1:
            raise ValueError(f"checkpoint_segment must be at least 1, got {checkpoint_segment}")
        self.segment = int(checkpoint_segment)
        # the backend's own method, not the device's attribute: that one is
        # Decorator.dispatch_noting while a trace is open (this device's is then, too)
        self._inner = inner.backend.dispatch
        self._make = AutodiffTensor.from_payload

    # -- host transfer ----------------------------------------------------------------------

    def wrap(self, inner: Tensor) -> Tensor:
        return AutodiffTensor.from_payload(Cell(inner, None, False), self.device, inner.dtype)

    def unwrap(self, tensor: Tensor) -> Tensor:
        value: Tensor = tensor.payload.value
        return value

    # -- dispatch ---------------------------------------------------------------------------

    def implements(self, op: Op) -> bool:
        """A composite runs as one op here when the inner device implements it and a rule
        differentiates it; otherwise it decomposes and its primitives are recorded."""
        return op in RULES and self.inner.implements(op)

    def dispatch(self, op: Op, args: Sequence[Tensor], params: dict[str, Any]) -> Any:
        # one and two inputs spelled out: a comprehension is a call of its own on Python 3.11
        n = len(args)
        cells: tuple[Cell, ...]
        if n == 2:
            c0, c1 = cells = (args[0].payload, args[1].payload)
            values: tuple[Tensor, ...] = (c0.value, c1.value)
            grad = c0.requires_grad or c1.requires_grad
        elif n == 1:
            c0 = args[0].payload
            cells, values, grad = (c0,), (c0.value,), c0.requires_grad
        else:
            cells = tuple([a.payload for a in args])
            values = tuple([c.value for c in cells])
            grad = any([c.requires_grad for c in cells])
        out = self._inner(op, values, params)
        if grad and op.differentiable and STATE.enabled:
            return self._record(op, cells, values, params, out)
        if op.outputs == 1:
            cell = _new(Cell)  # Cell(out, None, False) spelled out: no call of __init__
            cell.value, cell.shape, cell.node, cell.requires_grad = out, out.payload.shape, \
                None, False
            return self._make(cell, self.device, out.dtype)
        return self._plain(out, op.outputs)

    def _plain(self, out: Any, outputs: int) -> Any:
        make, dev = AutodiffTensor.from_payload, self.device
        if outputs == 1:
            return make(Cell(out, None, False), dev, out.dtype)
        return tuple(make(Cell(o, None, False), dev, o.dtype) for o in out)

    def _record(self, op: Op, cells: tuple[Cell, ...], values: tuple[Tensor, ...],
                params: dict[str, Any], out: Any) -> Any:
        single = op.outputs == 1
        first = out if single else out[0]
        dtype = first.dtype
        if dtype.kind != "f":  # integer and bool results carry no gradient
            return self._plain(out, op.outputs)
        if len(cells) == 2:
            c0, c1 = cells
            parents: tuple[Node | Cell | None, ...] = (
                (c0.node or c0) if c0.requires_grad else None,
                (c1.node or c1) if c1.requires_grad else None)
        else:
            parents = tuple([(c.node or c) if c.requires_grad else None for c in cells])
        cell = _new(Cell)  # Cell(first, None, True) spelled out: no call of __init__
        cell.value, cell.shape, cell.requires_grad = first, first.payload.shape, True
        if self.checkpointing and op.group in RECOMPUTED_GROUPS:
            # keep constants only; inputs that require grad come back from their producers
            args = tuple([None if c.requires_grad else c.value for c in cells])
            depth = 1 + max((p.depth for p in parents if type(p) is Node), default=0)
            keep = depth >= self.segment
            node = Node(op, params, parents, args, first if keep else None, cell,
                        0 if keep else depth)
        else:
            # keep only the values the rule reads (under checkpointing every kept output may be
            # what a recomputation starts from)
            reads = None if self.checkpointing else READS.get(op)
            if reads is None:
                node = Node(op, params, parents, values, out, cell, -1)
            else:
                args, kept = _saved(op, reads, parents, values, out, single)
                node = Node(op, params, parents, args, kept, cell, -2)
        cell.node = node
        dev = self.device
        t = self._make(cell, dev, dtype)
        if single:
            return t
        make = AutodiffTensor.from_payload
        return (t, *(make(Cell(o, None, False), dev, o.dtype) for o in out[1:]))


#: ``{op: [what its per-input rules read, for each mask of inputs needing a gradient]}``
_BY_MASK: dict[Op, list[Reads]] = {}


def _by_mask(op: Op, reads: tuple[Reads, ...]) -> list[Reads]:
    table = []
    for mask in range(1 << len(reads)):
        need = [r for i, r in enumerate(reads) if mask >> i & 1]
        table.append(Reads(frozenset().union(*(r.inputs for r in need)),
                           frozenset().union(*(r.outputs for r in need))))
    _BY_MASK[op] = table
    return table


def _saved(op: Op, reads: Reads | tuple[Reads, ...], parents: tuple[Node | Cell | None, ...],
           values: tuple[Tensor, ...], out: Any, single: bool
           ) -> tuple[tuple[Tensor | None, ...], Any]:
    """``values`` and ``out`` with None for the intermediates the rule does not read (the
    inputs that come from a node, and the first output); leaves and constants are kept (a
    leaf's cell holds its value anyway)."""
    n = len(values)
    args: tuple[Tensor | None, ...]
    if n == 1:  # one to three inputs spelled out: a comprehension costs a call of its own
        p0 = parents[0]
        ins = reads.inputs if isinstance(reads, Reads) else reads[0].inputs
        args = (None if type(p0) is Node and 0 not in ins else values[0],)
    elif n == 2:
        p0, p1 = parents
        if not isinstance(reads, Reads):  # a rule per input: those that need a gradient
            reads = (_BY_MASK.get(op) or _by_mask(op, reads))[
                (p0 is not None) + 2 * (p1 is not None)]
        ins = reads.inputs
        args = (None if type(p0) is Node and 0 not in ins else values[0],
                None if type(p1) is Node and 1 not in ins else values[1])
    elif n == 3:
        p0, p1, p2 = parents
        if not isinstance(reads, Reads):
            reads = (_BY_MASK.get(op) or _by_mask(op, reads))[
                (p0 is not None) + 2 * (p1 is not None) + 4 * (p2 is not None)]
        ins = reads.inputs
        args = (None if type(p0) is Node and 0 not in ins else values[0],
                None if type(p1) is Node and 1 not in ins else values[1],
                None if type(p2) is Node and 2 not in ins else values[2])
    else:
        if not isinstance(reads, Reads):
            mask = sum(1 << i for i, p in enumerate(parents) if p is not None)
            reads = (_BY_MASK.get(op) or _by_mask(op, reads))[mask]
        ins = reads.inputs
        args = tuple([None if type(p) is Node and i not in ins else v
                      for i, (v, p) in enumerate(zip(values, parents, strict=True))])
    outs = reads.outputs if isinstance(reads, Reads) else reads[0].outputs
    if single:
        return args, out if 0 in outs else None
    return args, (out[0] if 0 in outs else None,
                  *(o if i in outs else Unsaved(o.payload.shape, o.dtype, o.device)
                    for i, o in enumerate(out[1:], 1)))
