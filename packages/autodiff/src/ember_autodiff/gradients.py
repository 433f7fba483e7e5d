"""The backward pass and its result, `Gradients`."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import ember
from ember.backend import Tensor, apply, ones_like, scalar_tensor
from ember.ops import movement

from ._tape import Cell, Node, Unsaved
from .rules import RULES, sum_to

if TYPE_CHECKING:
    from .tensor import AutodiffTensor

__all__ = ["Gradients", "run_backward"]


class Gradients:
    """What ``backward`` returns: ``grads[t]`` is the gradient of ``t`` (inner-device tensor).

    Holds leaves that require grad and intermediates whose tensors were still alive when the
    pass reached them.  A tensor used several times gets the sum of its gradients.

    Examples
    --------
    >>> import ember
    >>> x = ember.tensor([1.0, 2.0], device="autodiff<cpu>", requires_grad=True)
    >>> grads = (x * 3).sum().backward()
    >>> grads[x].tolist(), x in grads
    ([3.0, 3.0], True)
    """

    __slots__ = ("_grads", "_on")

    def __init__(self, grads: dict[Cell, Tensor], device: Any) -> None:
        self._grads = grads
        self._on = device

    def _lookup(self, t: Tensor) -> Tensor | None:
        # a tensor of an outer autodiff device (autodiff<autodiff<cpu>>) is looked up through
        # its inner values, so the inner pass's gradients can be indexed with outer tensors
        while True:
            cell = t.payload
            if type(cell) is not Cell:
                return None
            g = self._grads.get(cell)
            if g is not None:
                return g
            t = cell.value

    def __getitem__(self, t: Tensor) -> Tensor:
        g = self._lookup(t) if isinstance(t, Tensor) else None
        if g is not None:
            return g
        if not isinstance(t, Tensor):
            raise TypeError(f"Gradients are indexed by tensors, got {type(t).__name__}")
        cell = t.payload
        if type(cell) is not Cell:
            raise KeyError(f"no gradient: the tensor is on device {t.device}, not an autodiff "
                           "device")
        if not cell.requires_grad:
            raise KeyError("no gradient: the tensor does not require grad (create it with "
                           "requires_grad=True or call requires_grad_())")
        if math.prod(cell.shape) == 0:  # core drops empty operands (cat): nothing flowed
            return ember.zeros(cell.shape, dtype=cell.value.dtype, device=cell.value.device)
        raise KeyError("no gradient: the tensor is not an input of the value backward() was "
                       "called on (or it was assigned in place, x[...] = v, after that value "
                       "was computed, and now holds another value)")

    def get(self, t: Tensor, default: Tensor | None = None) -> Tensor | None:
        g = self._lookup(t) if isinstance(t, Tensor) else None
        return default if g is None else g

    def __contains__(self, t: object) -> bool:
        return isinstance(t, Tensor) and self._lookup(t) is not None

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        from .tensor import AutodiffTensor

        for cell, g in self._grads.items():
            yield AutodiffTensor.from_payload(cell, self._on, cell.value.dtype), g

    def items(self) -> Iterator[tuple[Tensor, Tensor]]:
        return iter(self)

    def __len__(self) -> int:
        return len(self._grads)

    def __repr__(self) -> str:
        return f"Gradients({len(self._grads)} tensors)"


def _topological(root: Node) -> list[Node]:
    """Nodes reachable from ``root``, each before every node it depends on."""
    post: list[Node] = []
    seen: set[Node] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            post.append(node)
            continue
        if node in seen:
            continue
        seen.add(node)
        parents = node.parents
        if parents is None:
            raise RuntimeError(
                "backward through a graph that was already freed: a second backward() over "
                f"the same ops (reached {node.op.name}) needs retain_graph=True the first time")
        stack.append((node, True))
        for p in parents:
            if type(p) is Node and p not in seen:
                stack.append((p, False))
    post.reverse()
    return post


class _Recompute:
    """Values of checkpointed nodes, recomputed on demand and dropped once consumed."""

    __slots__ = ("cache", "inner")

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.cache: dict[Node, Tensor] = {}

    def value(self, p: Node | Cell) -> Tensor:
        if type(p) is Cell:
            return p.value
        assert type(p) is Node
        if p.out is not None:
            return p.out if p.op.outputs == 1 else p.out[0]  # type: ignore[no-any-return]
        v = self.cache.get(p)
        if v is None:
            v = self.inner(p.op, list(self.args(p)), p.params)
            self.cache[p] = v
        return v

    def args(self, node: Node) -> tuple[Tensor, ...]:
        assert node.args is not None and node.parents is not None
        return tuple(a if a is not None else self.value(p)  # type: ignore[arg-type]
                     for a, p in zip(node.args, node.parents, strict=True))


def _lift(value: Tensor, p: Node | Cell | None, device: Any) -> Tensor:
    """An inner value as a tensor of the autodiff device, linked to the node behind it."""
    from .tensor import AutodiffTensor

    if p is None:
        cell = Cell(value, None, False)
    elif type(p) is Cell:
        cell = p  # the leaf itself
    else:
        assert type(p) is Node
        cell = Cell(value, p, True)
    return AutodiffTensor.from_payload(cell, device, value.dtype)


def _on_graph(n: Node, args: Sequence[Tensor], out: Any, device: Any) -> tuple[Any, Any]:
    """``create_graph``: a node's inputs and output as autodiff tensors, so that the rule's
    own ops are recorded and the gradients can be differentiated again."""
    assert n.parents is not None

    def lift(value: Any, p: Node | Cell | None) -> Any:
        if isinstance(value, Unsaved):  # the rule reads no value of it
            return Unsaved(value.shape, value.dtype, device)
        return _lift(value, p, device)

    lifted = tuple(lift(a, p) for a, p in zip(args, n.parents, strict=True))
    if n.op.outputs == 1:
        return lifted, lift(out, n)
    return lifted, (lift(out[0], n), *(lift(o, None) for o in out[1:]))


def _described(n: Node, args: Sequence[Tensor | None], out: Any, device: Any
               ) -> tuple[tuple[Any, ...], Any]:
    """A node's saved inputs and outputs, with an `Unsaved` where it kept no value: the
    intermediates among its inputs (described by their nodes) and its first output."""
    assert n.parents is not None
    described = tuple(
        a if a is not None else Unsaved(p.shape, p.dtype, device)  # type: ignore[union-attr]
        for a, p in zip(args, n.parents, strict=True))
    if n.op.outputs == 1:
        return described, Unsaved(n.shape, n.dtype, device) if out is None else out
    if out[0] is None:
        out = (Unsaved(n.shape, n.dtype, device), *out[1:])
    return described, out


Window = tuple[tuple[int, ...], Tensor]
"""A contiguous slice's gradient, not yet padded: the window's start on every axis, and ``g``."""


def _join(shape: tuple[int, ...], windows: list[Window]) -> Tensor:
    """The gradient of a tensor of ``shape`` read through contiguous slices (``x[t]`` in a loop
    over time steps, ``chunk``, ``split``): one ``cat`` where the windows tile one axis without
    overlapping (the gaps filled with zeros), else each padded back to the full shape and
    summed.  Padding each of T windows and adding them would cost O(T^2) memory traffic."""
    if len(windows) > 1:
        axis = -1
        for _, g in windows:
            gshape = g.payload.shape
            cut = [i for i, (m, n) in enumerate(zip(gshape, shape, strict=True)) if m != n]
            if len(cut) > 1 or (cut and axis >= 0 and cut[0] != axis):
                axis = -2
                break
            if cut:
                axis = cut[0]
        if axis >= 0:
            parts: list[Tensor] = []
            pos = 0
            ref = windows[0][1]
            for starts, g in sorted(windows, key=lambda w: w[0][axis]):
                a = starts[axis]
                if a < pos:  # overlapping windows
                    break
                if a > pos:
                    parts.append(_gap(shape, axis, a - pos, ref))
                parts.append(g)
                pos = a + g.payload.shape[axis]
            else:
                if pos < shape[axis]:
                    parts.append(_gap(shape, axis, shape[axis] - pos, ref))
                return apply(movement.cat, *parts, dim=axis)  # type: ignore[no-any-return]
    total: Tensor | None = None
    for starts, g in windows:
        widths = tuple((a, n - a - m) for a, m, n in zip(starts, g.payload.shape, shape,
                                                         strict=True))
        if any(w for pair in widths for w in pair):
            g = apply(movement.pad, g, pad=widths, value=0.0)
        total = g if total is None else total + g
    assert total is not None
    return total


def _gap(shape: tuple[int, ...], axis: int, size: int, like: Tensor) -> Tensor:
    return ember.zeros(tuple(size if i == axis else n for i, n in enumerate(shape)),
                       dtype=like.dtype, device=like.device)


def run_backward(root: AutodiffTensor, grad_output: Tensor | None, retain_graph: bool,
                 create_graph: bool = False) -> Gradients:
    cell = root.payload
    device = root.device
    if not cell.requires_grad:
        raise RuntimeError("backward() on a tensor that does not require grad: no input of it "
                           "was created with requires_grad=True (or it was computed under "
                           "ember.no_grad())")
    if grad_output is None:
        if root.numel() != 1:
            raise RuntimeError(f"backward() without grad_output needs a tensor of one element, "
                               f"got shape {root.shape}")
        value = cell.value
        # a loss is 0-d: its seed is core's cached constant (tensors are immutable)
        grad = scalar_tensor(1.0, value.dtype, value.device) if not value.shape \
            else ones_like(value)
    else:
        grad = grad_output
        while grad.device is not cell.value.device and type(grad.payload) is Cell:
            grad = grad.payload.value
        if tuple(grad.shape) != tuple(root.shape):
            raise RuntimeError(f"grad_output has shape {grad.shape}, the tensor {root.shape}")
    if create_graph:
        retain_graph = True  # the new graph runs through the old one
        if grad_output is not None and grad_output.device is device:
            grad = grad_output
        else:
            grad = _lift(grad, None, device)
    node = cell.node
    if node is None:  # a leaf: its gradient is grad_output
        return Gradients({cell: grad}, device)
    order = _topological(node)
    acc: dict[Node | Cell, Tensor] = {node: grad}
    # gradients of contiguous slices, joined once their source is reached (`_join`)
    windows: dict[Node | Cell, list[Window]] = {}
    result: dict[Cell, Tensor] = {}
    assert device.inner is not None  # an autodiff device always wraps one
    recompute = _Recompute(device.inner.dispatch)
    for n in order:
        g = acc.pop(n, None)
        parts = windows.pop(n, None)
        if parts is not None:
            joined = _join(tuple(n.shape), parts)
            g = joined if g is None else g + joined
        if g is None:
            continue
        out_cell = n.ref()
        if out_cell is not None:
            result[out_cell] = g
        parents = n.parents
        assert parents is not None and n.args is not None
        if n.op is movement.slice and all(s == 1 for s in n.params["steps"]):
            src = parents[0]
            if src is not None:
                windows.setdefault(src, []).append((tuple(n.params["starts"]), g))
            recompute.cache.pop(n, None)
            if not retain_graph:
                n.free()
            continue
        if n.depth >= 0:  # checkpointed: bring the values back
            args = recompute.args(n)
            out = recompute.value(n)
        else:
            args, out = n.args, n.out  # type: ignore[assignment]
            if n.depth == -2:  # kept what its rule reads: describe the rest
                args, out = _described(n, args, out, g.device)
        if create_graph:
            args, out = _on_graph(n, args, out, device)
        rule = RULES[n.op]
        grads: Sequence[Tensor | None]
        if isinstance(rule, tuple):  # one function per input: run only those that are needed
            grads = [None if p is None else r(g, out, *args, **n.params)
                     for r, p in zip(rule, parents, strict=True)]
        else:
            grads = rule(g, out, *args, **n.params)
        recompute.cache.pop(n, None)
        for p, gi in zip(parents, grads, strict=False):
            if p is None or gi is None:
                continue
            if gi.payload.shape != p.shape:
                gi = sum_to(gi, tuple(p.shape))
            prev = acc.get(p)
            acc[p] = gi if prev is None else prev + gi
        if not retain_graph:
            n.free()
    for p, parts in windows.items():  # leaves read through slices
        if type(p) is Cell:
            joined = _join(tuple(p.shape), parts)
            prev = acc.get(p)
            acc[p] = joined if prev is None else prev + joined
    for p, g in acc.items():
        if type(p) is Cell:
            result[p] = g
    return Gradients(result, device)
