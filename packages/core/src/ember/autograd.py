"""``ember.autograd.grad``: PyTorch's functional form of the backward pass.

ember's backward pass is ``grads = loss.backward()`` (a `Gradients` mapping, see
docs/autodiff.md); `grad` is that pass with ``torch.autograd.grad``'s signature and results,
for code that asks for the gradients of some outputs with respect to chosen inputs.

Differences from PyTorch (the tape's, not this function's): the outputs must be tensors of an
``autodiff<...>`` device; with several outputs, the pass runs once from
``sum((output * grad_output).sum())``, which gives the same gradients; and there is no
``is_grads_batched``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._creation import zeros_like
from ._tensor import Tensor

__all__ = ["grad"]


def _tensors(value: Tensor | Sequence[Tensor | None] | None, what: str) -> list[Tensor | None]:
    if value is None:
        return []
    if isinstance(value, Tensor):
        return [value]
    items = list(value)
    for item in items:
        if item is not None and not isinstance(item, Tensor):
            raise TypeError(f"grad: {what} must be tensors, got {type(item).__name__}")
    return items


def grad(outputs: Tensor | Sequence[Tensor], inputs: Tensor | Sequence[Tensor],
         grad_outputs: Tensor | Sequence[Tensor | None] | None = None,
         retain_graph: bool | None = None, create_graph: bool = False,
         allow_unused: bool | None = None, *,
         materialize_grads: bool = False) -> tuple[Tensor | None, ...]:
    """The gradients of ``outputs`` with respect to each of ``inputs``, as a tuple.

    Parameters
    ----------
    outputs : tensors of an autodiff device; one without ``grad_outputs`` must have one
        element.
    inputs : the tensors to differentiate with respect to (each requires grad).
    grad_outputs : the gradient flowing into each output (None: 1 for a one-element output).
    retain_graph : keep the graph for another pass (defaults to ``create_graph``).
    create_graph : record the pass itself, so that the gradients can be differentiated again.
    allow_unused : give None for an input the outputs do not depend on (by default that is a
        RuntimeError, as in PyTorch); ``materialize_grads`` gives zeros instead.

    Returns
    -------
    tuple : one gradient per input, a tensor of the input's device (None for an unused input
        with ``allow_unused``).

    Examples
    --------
    >>> import ember
    >>> x = ember.tensor([1.0, 2.0], device="autodiff<cpu>", requires_grad=True)
    >>> (g,) = ember.autograd.grad((x ** 3).sum(), x, create_graph=True)
    >>> g.tolist()
    [3.0, 12.0]
    >>> ember.autograd.grad(g.sum(), x)[0].tolist()    # the second derivative, 6 x
    [6.0, 12.0]
    """
    outs = _tensors(outputs, "outputs")
    ins = _tensors(inputs, "inputs")
    if not outs or not ins:
        raise RuntimeError("grad requires at least one output and one input")
    gos = _tensors(grad_outputs, "grad_outputs") if grad_outputs is not None else [None] * len(
        outs)
    if len(gos) != len(outs):
        raise RuntimeError(f"grad requires one grad_output per output: got {len(gos)} "
                           f"grad_outputs for {len(outs)} outputs")
    if materialize_grads:
        if allow_unused is False:
            raise ValueError("grad: materialize_grads=True needs allow_unused to be True or "
                             "None")
        allow_unused = True
    for i, t in enumerate(ins):
        if t is None or not t.requires_grad:
            raise RuntimeError(f"grad: input {i} does not require grad (create it with "
                               "requires_grad=True on an autodiff device)")
    roots: list[Tensor] = []
    for i, (o, go) in enumerate(zip(outs, gos, strict=True)):
        if o is None or not o.requires_grad or not hasattr(o, "backward"):
            raise RuntimeError(f"grad: element {i} of the outputs does not require grad and "
                               "does not have a grad_fn (it is not a result of tensors that "
                               "require grad on an autodiff device)")
        if go is None:
            if o.numel() != 1:
                raise RuntimeError(f"grad: grad can be implicitly created only for scalar "
                                   f"outputs (output {i} has shape {o.shape}): pass "
                                   "grad_outputs")
            roots.append(o.sum() if len(outs) > 1 else o)
        else:
            if tuple(go.shape) != tuple(o.shape):
                raise RuntimeError(f"grad: grad_outputs[{i}] has shape {go.shape}, output {i} "
                                   f"has shape {o.shape}")
            roots.append((o * go).sum())
    root = roots[0]
    for r in roots[1:]:
        root = root + r
    keep = create_graph if retain_graph is None else retain_graph
    # an autodiff tensor (checked above): plain tensors have no backward
    grads = root.backward(retain_graph=keep,  # type: ignore[attr-defined]
                          create_graph=create_graph)
    result: list[Tensor | None] = []
    for t in ins:
        assert t is not None
        g = grads.get(t)
        if g is None:
            if not allow_unused:
                raise RuntimeError("One of the differentiated Tensors appears to not have "
                                   "been used in the graph. Set allow_unused=True if this is "
                                   "the desired behavior.")
            if materialize_grads:
                g = zeros_like(t).detach()
            result.append(g)
            continue
        if g.device is not t.device:  # the inner device's value, as a leaf of t's device
            g = t.device.backend.wrap(g)  # type: ignore[attr-defined]  # a Decorator
        result.append(g)
    return tuple(result)
