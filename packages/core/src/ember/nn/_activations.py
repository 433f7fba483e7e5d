"""PyTorch's remaining activation functions, composed from primitives (so they run and
differentiate on every device): ``selu``, ``softsign``, ``logsigmoid``, ``hardsigmoid``,
``relu6``, ``hardswish``, ``softmin``.

Values, and gradients at the kinks, are PyTorch's: ``relu6`` and ``hardsigmoid`` pass no
gradient at their bounds (where ``clamp`` passes it), ``selu`` takes its negative branch's
slope at 0.
"""

from __future__ import annotations

from .. import functional as F
from .._elementwise import where
from .._tensor import Tensor

__all__ = ["hardsigmoid", "hardswish", "logsigmoid", "relu6", "selu", "softmin", "softsign"]

#: SELU's constants (Klambauer et al., 2017), as PyTorch writes them
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _inside(x: Tensor, value: Tensor, inside: Tensor, linear: Tensor) -> Tensor:
    """``value`` (a clamp of ``linear``), whose gradient is ``linear``'s strictly inside the
    bounds and 0 on and beyond them (PyTorch's rule for hardtanh-like functions)."""
    if not x.requires_grad:
        return value
    return where(inside, linear, value.detach())


def selu(x: Tensor) -> Tensor:
    """``scale * (x if x > 0 else alpha * (exp(x) - 1))`` with PyTorch's constants.

    Examples
    --------
    >>> import ember
    >>> import ember.nn.functional as F
    >>> round(F.selu(ember.tensor([1.0])).item(), 4)
    1.0507
    """
    # expm1 of min(x, 0): no inf in the branch `where` drops (its gradient would be nan)
    return where(x > 0, x, x.clamp(max=0).expm1() * SELU_ALPHA) * SELU_SCALE


def softsign(x: Tensor) -> Tensor:
    """``x / (1 + |x|)``."""
    return x / (x.abs() + 1.0)


def logsigmoid(x: Tensor) -> Tensor:
    """``log(sigmoid(x))``, without overflow on either side.

    Examples
    --------
    >>> import ember
    >>> import ember.nn.functional as F
    >>> round(F.logsigmoid(ember.tensor([0.0])).item(), 4)
    -0.6931
    """
    neg, pos = x.clamp(max=0), x.clamp(min=0)
    # x - log(1 + e^x) below 0, -log(1 + e^-x) above: exp never sees a large argument
    return where(x < 0, neg - neg.exp().log1p(), -(-pos).exp().log1p())


def hardsigmoid(x: Tensor) -> Tensor:
    """``clamp(x / 6 + 1/2, 0, 1)``; the gradient is 1/6 strictly inside ``(-3, 3)``."""
    linear = x * (1.0 / 6.0) + 0.5
    return _inside(x, linear.clamp(0.0, 1.0), (x > -3.0).logical_and(x < 3.0), linear)


def relu6(x: Tensor) -> Tensor:
    """``clamp(x, 0, 6)``; the gradient is 1 strictly inside ``(0, 6)``, as PyTorch's."""
    return _inside(x, x.clamp(0.0, 6.0), (x > 0.0).logical_and(x < 6.0), x)


def hardswish(x: Tensor) -> Tensor:
    """``x * clamp(x + 3, 0, 6) / 6``; the gradient is PyTorch's: 0 up to -3 (included),
    ``x / 3 + 1/2`` below 3, 1 from 3 on."""
    value = x * ((x + 3.0) * (1.0 / 6.0)).clamp(0.0, 1.0)
    if not x.requires_grad:
        return value
    middle = x * (x + 3.0) * (1.0 / 6.0)
    return where(x < 3.0, where(x <= -3.0, value.detach(), middle), x)


def softmin(x: Tensor, dim: int | None = None) -> Tensor:
    """``softmax(-x, dim)``; without ``dim``, PyTorch's legacy choice (axis 0 of a tensor of
    0, 1 or 3 dimensions, else axis 1)."""
    if dim is None:
        dim = 0 if x.ndim in (0, 1, 3) else 1
    return F.softmax(-x, dim)
