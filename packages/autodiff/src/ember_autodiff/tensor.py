"""`AutodiffTensor`: the tensor type of ``autodiff<...>`` devices; it alone has `backward`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.backend import GRAD_MODE, Tensor

if TYPE_CHECKING:
    from ._tape import Cell
    from .gradients import Gradients

__all__ = ["AutodiffTensor"]


class AutodiffTensor(Tensor):
    """A tensor of an autodiff device; its payload is a `Cell` (inner value + tape node).

    Examples
    --------
    >>> import ember
    >>> x = ember.tensor([3.0], device="autodiff<cpu>", requires_grad=True)
    >>> (x * x).backward(ember.ones(1, device="autodiff<cpu>"))[x].tolist()
    [6.0]
    """

    __slots__ = ()

    if TYPE_CHECKING:
        @property
        def payload(self) -> Cell: ...

    @property
    def requires_grad(self) -> bool:
        return self.payload.requires_grad

    def requires_grad_(self, requires_grad: bool = True) -> AutodiffTensor:
        """Mark a leaf as needing its gradient (floating dtypes only).

        On a nested device (``autodiff<autodiff<cpu>>``) the inner value is marked too, so the
        gradient itself can be differentiated (second derivatives).
        """
        cell = self.payload
        if cell.node is not None:
            if not requires_grad:
                raise RuntimeError("requires_grad_(False) on a non-leaf tensor: use detach()")
            return self
        if requires_grad and self.dtype.kind != "f":
            raise RuntimeError(f"only floating point tensors can require gradients, "
                               f"got {self.dtype.name}")
        cell.requires_grad = bool(requires_grad)
        inner = cell.value
        if isinstance(inner, AutodiffTensor) and inner.payload.node is None:
            inner.requires_grad_(requires_grad)
        return self

    def __setitem__(self, key: Any, value: Any) -> None:
        """``x[key] = value``: ``x`` takes the updated value (a new graph node).

        As in PyTorch, a leaf that requires grad (a parameter) is refused while grad mode is
        on, since a graph may hold its old value; under ``ember.no_grad()`` the update is
        allowed and the tensor stays a leaf that requires grad.
        """
        cell = self.payload
        if cell.node is None and cell.requires_grad:
            if GRAD_MODE.enabled:
                raise RuntimeError(
                    f"x[...] = value on a leaf tensor that requires grad (shape "
                    f"{tuple(self.shape)}, a parameter or an input created with "
                    "requires_grad=True) while grad mode is on: a graph may hold its old value. "
                    "Update it under `with ember.no_grad():`, or assign to `x.clone()`")
            super().__setitem__(key, value)
            self.payload.requires_grad = True
            return
        super().__setitem__(key, value)

    @property
    def inner(self) -> Tensor:
        """The value as a tensor of the inner device (no copy): what `Gradients` hold.

        ``device.backend.wrap(t)`` goes the other way, giving a leaf of this device.
        """
        return self.payload.value

    @property
    def is_leaf(self) -> bool:
        """True for tensors no recorded op produced (inputs, parameters, detached values)."""
        return self.payload.node is None

    @property
    def grad_fn(self) -> Any:
        """The tape node that produced this tensor, or None for a leaf."""
        return self.payload.node

    def detach(self) -> AutodiffTensor:
        """The same value, cut from the graph (a leaf that does not require grad)."""
        from ._tape import Cell

        return AutodiffTensor.from_payload(Cell(self.payload.value, None, False), self.device,
                                           self.dtype)

    def backward(self, grad_output: Tensor | None = None, retain_graph: bool = False,
                 create_graph: bool = False) -> Gradients:
        """Gradients of this tensor with respect to every tensor that requires grad.

        Parameters
        ----------
        grad_output : the gradient flowing into this tensor (same shape); needed unless this
            tensor has one element.  A tensor of this device or of its inner device.
        retain_graph : keep the graph so that ``backward`` can run through it again.
        create_graph : record the backward pass itself, so that gradients can be
            differentiated again (Hessian-vector products); the gradients are then tensors of
            this device, and the graph is kept.  Nesting the decorator,
            ``autodiff<autodiff<cpu>>``, is the other way to higher derivatives.

        Returns
        -------
        Gradients : ``grads[t]`` is the gradient of ``t``, a tensor of the inner device (of this
            device with ``create_graph``).
        """
        from .gradients import run_backward

        return run_backward(self, grad_output, retain_graph, create_graph)
