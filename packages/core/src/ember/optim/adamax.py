"""`Adamax`: Adam with the infinity norm in place of the second moment (PyTorch's update)."""

from __future__ import annotations

import math
from typing import Any

from .. import _creation as cr, _dtype as dt
from .._tensor import Tensor
from .optimizer import Optimizer, ParamsArg

__all__ = ["Adamax", "check_betas", "device_count", "linked_float"]


def check_betas(name: str, lr: float, betas: tuple[float, float], eps: float,
                weight_decay: float, differentiable: bool) -> None:
    """PyTorch's argument checks for the Adam family."""
    if not 0.0 <= lr:
        raise ValueError(f"{name}: invalid learning rate {lr}")
    if not 0.0 <= eps:
        raise ValueError(f"{name}: invalid epsilon {eps}")
    if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
        raise ValueError(f"{name}: invalid betas {betas}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"{name}: invalid weight_decay {weight_decay}")
    if differentiable:
        # Note: ember differentiates through an update by running it on autodiff<autodiff<..>>
        raise NotImplementedError(f"{name}: differentiable=True is not supported")


def device_count(state: dict[str, Any], key: str, p: Tensor) -> Tensor:
    """``state[key]`` as a 0-d tensor on ``p``'s device (a count taken eagerly, or loaded as a
    number, moves there on a capturable group's first step): float32 as PyTorch's, float64
    for float64 parameters (NAdam's ``mu_product`` loses digits in float32)."""
    v = state[key]
    if not isinstance(v, Tensor):
        dtype = dt.float64 if p.dtype is dt.float64 else dt.float32
        v = cr.full((), float(v), dtype=dtype, device=p.device)
        state[key] = v
    return v


def linked_float(count: Any) -> Any:
    """A step count as a float that keeps its link to the state under `ember.compile`.

    ``beta ** count`` with an int count is computed by ``float.__pow__``, which drops the
    link of a `ember._trace.HostInt` (a replay would use the traced count); ``count * 1.0`` is
    a ``HostFloat``, whose ``__rpow__`` Python calls first.
    """
    return count * 1.0


class Adamax(Optimizer):
    """Adamax (Kingma & Ba, section 7): ``u = max(beta2 * u, |g| + eps)`` and
    ``p -= lr / (1 - beta1**t) * m / u``.

    ``foreach`` is accepted for PyTorch's signature; ``capturable`` keeps the step count on
    the device (a 0-d tensor), for a step captured as a CUDA graph.  Under `ember.compile`
    the host step count is re-read on every replay, so ``capturable`` is not needed there.

    Examples
    --------
    >>> import ember
    >>> w = ember.tensor([1.0])
    >>> opt = ember.optim.Adamax([w], lr=0.1)
    >>> opt.step({w: ember.tensor([3.0])})
    >>> round(w.item(), 4)  # the first step moves by lr whatever the gradient's size
    0.9
    """

    _scalar_state = ("step",)

    def __init__(self, params: ParamsArg, lr: float = 2e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, foreach: bool | None = None, *,
                 maximize: bool = False, differentiable: bool = False,
                 capturable: bool = False) -> None:
        check_betas("Adamax", lr, betas, eps, weight_decay, differentiable)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable,
                                      capturable=capturable))

    def update(self, p: Tensor, g: Tensor, state: dict[str, Any],
               group: dict[str, Any]) -> Tensor:
        lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        capturable = bool(group["capturable"])
        if not state:
            state["step"] = 0
            state["exp_avg"] = cr.zeros_like(p)
            state["exp_inf"] = cr.zeros_like(p)
        if group["maximize"]:
            g = -g
        if wd:
            g = g + p * wd
        m: Tensor = state["exp_avg"]
        m = m + (g - m) * (1 - b1)  # lerp, as PyTorch
        u: Tensor = (state["exp_inf"] * b2).maximum(g.abs() + eps)
        state["exp_avg"], state["exp_inf"] = m, u
        if capturable or isinstance(state["step"], Tensor):
            t = device_count(state, "step", p) + 1
            state["step"] = t
            # 1 - b1**t as -expm1(t * log(b1)): no cancellation when b1**t is near 1
            log_b1 = math.log(b1) if b1 > 0 else -math.inf
            step_size = (-(t * log_b1).expm1()).reciprocal() * lr
            new: Tensor = p - (m / u) * step_size.to(dtype=p.dtype)
            return new
        state["step"] += 1
        clr = lr / (1 - b1 ** linked_float(state["step"]))
        new = p - (m / u) * clr
        return new
