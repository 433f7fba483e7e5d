"""`RMSprop` (optionally centred, with momentum) and `Adagrad`."""

from __future__ import annotations

from typing import Any

from .. import _creation as cr
from .._tensor import Tensor
from .optimizer import Optimizer, ParamsArg

__all__ = ["AdaGrad", "Adagrad", "RMSProp", "RMSprop"]


class RMSprop(Optimizer):
    """Divide the gradient by a running root mean square of recent gradients (PyTorch's form:
    ``eps`` is added after the square root)."""

    def __init__(self, params: ParamsArg, lr: float = 1e-2, alpha: float = 0.99,
                 eps: float = 1e-8, weight_decay: float = 0.0, momentum: float = 0.0,
                 centered: bool = False, *, maximize: bool = False) -> None:
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                                      momentum=momentum, centered=centered, maximize=maximize))

    def update(self, p: Tensor, g: Tensor, state: dict[str, Any],
               group: dict[str, Any]) -> Tensor:
        alpha: float = group["alpha"]
        eps: float = group["eps"]
        momentum: float = group["momentum"]
        lr: float = group["lr"]
        if group["maximize"]:
            g = -g
        if group["weight_decay"]:
            g = g + p * group["weight_decay"]
        if not state:
            state["step"] = 0
            state["square_avg"] = cr.zeros_like(p)
            if momentum > 0:
                state["momentum_buffer"] = cr.zeros_like(p)
            if group["centered"]:
                state["grad_avg"] = cr.zeros_like(p)
        state["step"] += 1
        sq: Tensor = state["square_avg"] * alpha + g * g * (1 - alpha)
        state["square_avg"] = sq
        if group["centered"]:
            ga: Tensor = state["grad_avg"]
            ga = ga + (g - ga) * (1 - alpha)
            state["grad_avg"] = ga
            avg = (sq - ga * ga).sqrt() + eps
        else:
            avg = sq.sqrt() + eps
        if momentum > 0:
            buf: Tensor = state["momentum_buffer"] * momentum + g / avg
            state["momentum_buffer"] = buf
            return p - buf * lr
        return p - (g / avg) * lr


RMSProp = RMSprop


class Adagrad(Optimizer):
    """Scale each coordinate by the root of its summed squared gradients."""

    def __init__(self, params: ParamsArg, lr: float = 1e-2, lr_decay: float = 0.0,
                 weight_decay: float = 0.0, initial_accumulator_value: float = 0.0,
                 eps: float = 1e-10, *, maximize: bool = False) -> None:
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value,
                                      eps=eps, maximize=maximize))

    def update(self, p: Tensor, g: Tensor, state: dict[str, Any],
               group: dict[str, Any]) -> Tensor:
        if group["maximize"]:
            g = -g
        if not state:
            state["step"] = 0
            state["sum"] = cr.full_like(p, group["initial_accumulator_value"])
        state["step"] += 1
        if group["weight_decay"]:
            g = g + p * group["weight_decay"]
        clr: float = group["lr"] / (1 + (state["step"] - 1) * group["lr_decay"])
        s: Tensor = state["sum"] + g * g
        state["sum"] = s
        eps: float = group["eps"]
        return p - (g / (s.sqrt() + eps)) * clr
AdaGrad = Adagrad
