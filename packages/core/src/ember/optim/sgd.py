"""`SGD` with momentum, dampening, Nesterov momentum and weight decay (PyTorch's update)."""

from __future__ import annotations

from typing import Any

from .._tensor import Tensor
from .optimizer import Optimizer, ParamsArg

__all__ = ["SGD"]


class SGD(Optimizer):
    """Stochastic gradient descent.

    ``g += weight_decay * p``; with momentum, ``buf = momentum * buf + (1 - dampening) * g``
    (``buf = g`` at the first step) and ``g = g + momentum * buf`` (Nesterov) or ``g = buf``;
    then ``p -= lr * g``.

    Examples
    --------
    >>> import ember
    >>> w = ember.tensor([1.0])
    >>> opt = ember.optim.SGD([w], lr=0.1, momentum=0.9)
    >>> for _ in range(2):
    ...     opt.step({w: ember.tensor([1.0])})
    >>> round(w.item(), 4)
    0.71
    """

    def __init__(self, params: ParamsArg, lr: float = 1e-3, momentum: float = 0.0,
                 dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
                 *, maximize: bool = False) -> None:
        if lr < 0:
            raise ValueError(f"invalid learning rate {lr}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum needs momentum > 0 and dampening 0")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize))

    def update(self, p: Tensor, g: Tensor, state: dict[str, Any],
               group: dict[str, Any]) -> Tensor:
        if group["maximize"]:
            g = -g
        if group["weight_decay"]:
            g = g + p * group["weight_decay"]
        momentum = group["momentum"]
        if momentum:
            buf: Tensor | None = state.get("momentum_buffer")
            buf = g if buf is None else buf * momentum + g * (1 - group["dampening"])
            state["momentum_buffer"] = buf
            g = g + buf * momentum if group["nesterov"] else buf
        lr: float = group["lr"]
        return p - g * lr
