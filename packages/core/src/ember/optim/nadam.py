"""`NAdam`: Adam with Nesterov momentum and PyTorch's momentum-decay schedule."""

from __future__ import annotations

from typing import Any

from .. import _creation as cr
from .._tensor import Tensor
from .adamax import check_betas, device_count, linked_float
from .optimizer import Optimizer, ParamsArg

__all__ = ["NAdam"]


class NAdam(Optimizer):
    """NAdam (Dozat), computed as PyTorch's single-tensor implementation.

    The momentum coefficient of step ``t`` is ``mu_t = beta1 * (1 - 0.5 * 0.96**(t *
    momentum_decay))``; the state keeps ``mu_product``, the product of all ``mu_t`` so far.
    ``decoupled_weight_decay=True`` shrinks the parameter by ``1 - lr * weight_decay`` (NAdamW)
    instead of adding ``weight_decay * p`` to the gradient.

    ``capturable`` keeps ``step`` and ``mu_product`` on the device as 0-d float32 tensors (a step
    captured as a CUDA graph); under `ember.compile` the host numbers are re-read on every
    replay, so it is not needed there.

    Examples
    --------
    >>> import ember
    >>> w = ember.tensor([1.0])
    >>> opt = ember.optim.NAdam([w], lr=0.1)
    >>> opt.step({w: ember.tensor([3.0])})
    >>> round(w.item(), 4)
    0.8944
    """

    _scalar_state = ("step", "mu_product")

    def __init__(self, params: ParamsArg, lr: float = 2e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum_decay: float = 4e-3,
                 decoupled_weight_decay: bool = False, *, foreach: bool | None = None,
                 maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False) -> None:
        check_betas("NAdam", lr, betas, eps, weight_decay, differentiable)
        if not 0.0 <= momentum_decay:
            raise ValueError(f"NAdam: invalid momentum_decay {momentum_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, momentum_decay=momentum_decay,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize, foreach=foreach,
                                      capturable=capturable, differentiable=differentiable))

    def update(self, p: Tensor, g: Tensor, state: dict[str, Any],
               group: dict[str, Any]) -> Tensor:
        lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        md = group["momentum_decay"]
        if not state:
            state["step"] = 0
            state["mu_product"] = 1.0
            state["exp_avg"] = cr.zeros_like(p)
            state["exp_avg_sq"] = cr.zeros_like(p)
        if group["maximize"]:
            g = -g
        if wd:
            if group["decoupled_weight_decay"]:
                p = p * (1 - lr * wd)
            else:
                g = g + p * wd
        m: Tensor = state["exp_avg"]
        m = m + (g - m) * (1 - b1)  # lerp, as PyTorch
        v: Tensor = state["exp_avg_sq"] * b2 + g * g * (1 - b2)
        state["exp_avg"], state["exp_avg_sq"] = m, v
        if group["capturable"] or isinstance(state["step"], Tensor):
            return self._capturable(p, g, m, v, state, group)
        state["step"] += 1
        t = linked_float(state["step"])
        bias_correction2 = 1 - b2 ** t
        mu = b1 * (1.0 - 0.5 * 0.96 ** (t * md))
        mu_next = b1 * (1.0 - 0.5 * 0.96 ** ((t + 1) * md))
        mu_product = state["mu_product"] * mu
        state["mu_product"] = mu_product
        denom = (v / bias_correction2).sqrt() + eps
        p = p + (g / denom) * (-lr * (1.0 - mu) / (1.0 - mu_product))
        new: Tensor = p + (m / denom) * ((-lr * mu_next) / (1.0 - mu_product * mu_next))
        return new

    def _capturable(self, p: Tensor, g: Tensor, m: Tensor, v: Tensor, state: dict[str, Any],
                    group: dict[str, Any]) -> Tensor:
        """The same update with ``step`` and ``mu_product`` as device tensors."""
        lr, (b1, b2), eps = group["lr"], group["betas"], group["eps"]
        md = group["momentum_decay"]
        t = device_count(state, "step", p) + 1
        state["step"] = t
        bias_correction2 = 1 - b2 ** t
        mu = (1.0 - 0.5 * 0.96 ** (t * md)) * b1
        mu_next = (1.0 - 0.5 * 0.96 ** ((t + 1) * md)) * b1
        mu_product = device_count(state, "mu_product", p) * mu
        state["mu_product"] = mu_product
        denom = (v / bias_correction2.to(dtype=v.dtype)).sqrt() + eps
        c1 = (1.0 - mu) * (-lr) / (1.0 - mu_product)
        c2 = mu_next * (-lr) / (1.0 - mu_product * mu_next)
        p = p + (g / denom) * c1.to(dtype=p.dtype)
        new: Tensor = p + (m / denom) * c2.to(dtype=p.dtype)
        return new
