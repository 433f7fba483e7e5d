"""How layers and optimizers change a parameter's value without changing the parameter.

Tensors are immutable values; a parameter is a tensor whose *payload* gets rebound (as
``Tensor.__setitem__`` does), so the object stays the same and ``grads[param]`` keeps working.
New values are computed on the innermost (hardware) device, outside any decorator's tape, and
lifted back through the decorator stack with ``Decorator.wrap`` (`ember.backend.lift`; the
stack helpers live beside `Decorator`, in ``ember._backend``).
"""

from __future__ import annotations

from typing import Any

from .. import _capture
from .._backend import lift, lower, lower_to
from .._tensor import Tensor

__all__ = ["can_require_grad", "lift", "lower", "lower_to", "rebind"]


def rebind(param: Tensor, value: Tensor) -> None:
    """Give ``param`` the value of ``value`` (same shape and dtype), keeping its identity.

    The parameter gets a new payload; `Gradients` computed before the call are looked up
    through the payload, so read them before updating the parameters they belong to.
    """
    new = lift(value, param.device)
    if new.shape != param.shape or new.dtype is not param.dtype:
        raise ValueError(f"cannot rebind a {param.dtype.name} {list(param.shape)} parameter to a "
                         f"{new.dtype.name} {list(new.shape)} value")
    if can_require_grad(param) and param.requires_grad:
        # a fresh leaf payload that records gradients like the old one did
        new = new.detach().requires_grad_(True)
    _capture.replace(param, new._data)


def can_require_grad(t: Tensor) -> bool:
    """Whether ``t``'s device records gradients (its tensor type overrides ``requires_grad_``)."""
    return type(t).requires_grad_ is not Tensor.requires_grad_


def as_leaf(t: Tensor, requires_grad: bool) -> Tensor:
    """``t`` as a parameter value: a leaf that requires grad where the device can and should."""
    if not can_require_grad(t):
        return t
    if requires_grad:
        return t if t.requires_grad else t.detach().requires_grad_(True)
    return t.detach() if t.requires_grad else t


def describe(t: Any) -> str:
    """``float32 [3, 4]``: a value's dtype and shape for error messages."""
    if isinstance(t, Tensor):
        return f"{t.dtype.name} {list(t.shape)}"
    return type(t).__name__
