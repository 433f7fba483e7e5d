"""`AutodiffBackend`: the ``autodiff<inner>`` device.

Every op runs on the inner device; when grad mode is on, the op is differentiable and one of
its inputs requires grad, a `Node` is recorded so that `backward` can run the op's rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember._backend import Decorator
from ember._device import Device
from ember._grad_mode import STATE
from ember._tensor import Tensor
from ember._trace import TRACE
from ember.ops import Op

from ._tape import Cell, Node
from .rules import RULES
from .tensor import AutodiffTensor

__all__ = ["AutodiffBackend"]

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
        self._inner = inner.dispatch

    # -- host transfer ----------------------------------------------------------------------

    def wrap(self, inner: Tensor) -> Tensor:
        return AutodiffTensor._make(Cell(inner, None, False), self.device, inner._dtype)

    def unwrap(self, tensor: Tensor) -> Tensor:
        value: Tensor = tensor._data.value
        return value

    # -- dispatch ---------------------------------------------------------------------------

    def implements(self, op: Op) -> bool:
        """A composite runs as one op here when the inner device implements it and a rule
        differentiates it; otherwise it decomposes and its primitives are recorded."""
        return op in RULES and self.inner.implements(op)

    def dispatch(self, op: Op, args: Sequence[Tensor], params: dict[str, Any]) -> Any:
        if TRACE:  # ember.compile is recording: these may be parameters it reads
            TRACE[0].note_args(args)
        cells = [a._data for a in args]
        values = [c.value for c in cells]
        out = self._inner(op, values, params)
        if op.differentiable and STATE.enabled:
            for c in cells:
                if c.requires_grad:
                    return self._record(op, cells, values, params, out)
        if op.outputs == 1:
            return AutodiffTensor._make(Cell(out, None, False), self.device, out._dtype)
        return self._plain(out, op.outputs)

    def _plain(self, out: Any, outputs: int) -> Any:
        make, dev = AutodiffTensor._make, self.device
        if outputs == 1:
            return make(Cell(out, None, False), dev, out._dtype)
        return tuple(make(Cell(o, None, False), dev, o._dtype) for o in out)

    def _record(self, op: Op, cells: list[Cell], values: list[Tensor], params: dict[str, Any],
                out: Any) -> Any:
        first = out if op.outputs == 1 else out[0]
        if first._dtype.kind != "f":  # integer and bool results carry no gradient
            return self._plain(out, op.outputs)
        parents = tuple([(c.node or c) if c.requires_grad else None for c in cells])
        cell = Cell(first, None, True)
        if self.checkpointing and op.group in RECOMPUTED_GROUPS:
            # keep constants only; inputs that require grad come back from their producers
            args = tuple([None if c.requires_grad else c.value for c in cells])
            depth = 1 + max((p.depth for p in parents if type(p) is Node), default=0)
            keep = depth >= self.segment
            node = Node(op, params, parents, args, first if keep else None, cell,
                        0 if keep else depth)
        else:
            node = Node(op, params, parents, tuple(values), out, cell, -1)
        cell.node = node
        make, dev = AutodiffTensor._make, self.device
        if op.outputs == 1:
            return make(cell, dev, first._dtype)
        rest = tuple(make(Cell(o, None, False), dev, o._dtype) for o in out[1:])
        return (make(cell, dev, first._dtype), *rest)
