"""`Adam` and `AdamW` (decoupled weight decay), with PyTorch's update order and AMSGrad."""

from __future__ import annotations

import math
from typing import Any

from .. import _capture, _creation as cr, _dtype as dt, _trace
from .._apply import apply
from .._tensor import Tensor
from ..nn._values import rebind
from ..ops import composite
from .optimizer import Optimizer, ParamsArg, StepItem

__all__ = ["Adam", "AdamW"]

#: parameter dtypes the fused update (`ember.ops.composite.adam_step`) is used for; its
#: scalars travel as float32, so float64 parameters keep the op-by-op update
_FUSED_DTYPES = frozenset({dt.float32, dt.float16, dt.bfloat16})


def _init_state(state: dict[str, Any], p: Tensor, amsgrad: bool, device_step: bool) -> None:
    """Adam's state at its first step: the step count (a float32 0-d tensor on ``p``'s device
    when ``device_step``, else 0) and zero moments."""
    if state:
        return
    state["step"] = cr.zeros((), dtype=dt.float32, device=p.device) if device_step else 0
    state["exp_avg"] = cr.zeros_like(p)
    state["exp_avg_sq"] = cr.zeros_like(p)
    if amsgrad:
        state["max_exp_avg_sq"] = cr.zeros_like(p)


def _log(beta: float) -> float:
    return math.log(beta) if beta > 0 else -math.inf


class Adam(Optimizer):
    """Adam (Kingma & Ba), computed as PyTorch's single-tensor implementation.

    Examples
    --------
    >>> import ember
    >>> w = ember.tensor([1.0])
    >>> opt = ember.optim.Adam([w], lr=0.1)
    >>> opt.step({w: ember.tensor([3.0])})
    >>> round(w.item(), 4)  # the first step moves by lr whatever the gradient's size
    0.9
    """

    _decoupled = False
    _scalar_state = ("step",)

    def __init__(self, params: ParamsArg, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, *,
                 maximize: bool = False, capturable: bool = False) -> None:
        if lr < 0 or eps < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"invalid Adam options lr={lr}, betas={betas}, eps={eps}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize, capturable=capturable))

    def update(self, p: Tensor, g: Tensor, state: dict[str, Any],
               group: dict[str, Any]) -> Tensor:
        lr, (b1, b2), eps = group["lr"], group["betas"], group["eps"]
        if group.get("capturable") or _trace.TRACE or isinstance(state.get("step"), Tensor):
            # a step count on the device (capturable, or left by a compiled step) stays there
            return self._capturable(p, g, state, group)
        if (not group["amsgrad"] and p._dtype in _FUSED_DTYPES
                and p._device.implements(composite.adam_step)):
            return self._fused(p, g, state, group)
        p, g = self._decay(p, g, group)
        _init_state(state, p, group["amsgrad"], device_step=False)
        state["step"] += 1
        t = state["step"]
        m: Tensor = state["exp_avg"]
        m = m + (g - m) * (1 - b1)  # lerp, as PyTorch
        v: Tensor = state["exp_avg_sq"] * b2 + g * g * (1 - b2)
        state["exp_avg"], state["exp_avg_sq"] = m, v
        step_size: float = lr / (1 - b1 ** t)
        bc2_sqrt = math.sqrt(1 - b2 ** t)
        if group["amsgrad"]:
            v = state["max_exp_avg_sq"].maximum(v)
            state["max_exp_avg_sq"] = v
        denom = v.sqrt() / bc2_sqrt + float(eps)
        return p - (m / denom) * step_size

    def update_group(self, items: list[StepItem], group: dict[str, Any]) -> None:
        """Parameters that share a device implementing `adam_steps` and a step count are
        updated by one op (one launch on the Triton backends, as PyTorch's multi-tensor Adam);
        the others, and AMSGrad, capturable and captured steps, one at a time."""
        if len(items) < 2 or group["amsgrad"]:
            super().update_group(items, group)
            return
        if (group.get("capturable") or _trace.TRACE
                or any(isinstance(it[3].get("step"), Tensor) for it in items)):
            self._capturable_group(items, group)
            return
        if _capture.active():
            super().update_group(items, group)
            return
        batches: dict[tuple[Any, Any], list[StepItem]] = {}
        single: list[StepItem] = []
        for item in items:
            value, state = item[1], item[3]
            t = state.get("step", 0)
            if (value._dtype in _FUSED_DTYPES and type(t) in (int, float)
                    and value._device.implements(composite.adam_steps)):
                batches.setdefault((value._device, t + 1), []).append(item)
            else:
                single.append(item)
        for (_, t), batch in batches.items():
            if len(batch) == 1:
                single.append(batch[0])
            else:
                self._fused_many(batch, group, t)
        super().update_group(single, group)

    def _fused_many(self, batch: list[StepItem], group: dict[str, Any], t: Any) -> None:
        for _, value, _, state in batch:
            _init_state(state, value, False, device_step=False)
            state["step"] = t
        n = len(batch)
        outs = apply(composite.adam_steps, *[it[1] for it in batch], *[it[2] for it in batch],
                     *[it[3]["exp_avg"] for it in batch], *[it[3]["exp_avg_sq"] for it in batch],
                     **self._fused_params(group, t))
        for i, (param, _, _, state) in enumerate(batch):
            state["exp_avg"], state["exp_avg_sq"] = outs[n + i], outs[2 * n + i]
            rebind(param, outs[i])

    def _capturable_group(self, items: list[StepItem], group: dict[str, Any]) -> None:
        """Capturable steps, batched: the parameters of a device implementing
        `adam_steps_capturable` share one step count on the device (one tensor, incremented
        once) and are updated by one op; the others one at a time (`_capturable`)."""
        shared: dict[Any, Tensor] = {}  # (device, eager count or None) -> the shared count
        batches: dict[tuple[Any, int], list[StepItem]] = {}
        single: list[StepItem] = []
        for item in items:
            value, state = item[1], item[3]
            if not (value._dtype in _FUSED_DTYPES
                    and value._device.implements(composite.adam_steps_capturable)):
                single.append(item)
                continue
            step = state.get("step")
            if not isinstance(step, Tensor):  # a new state, or steps taken eagerly until now
                key = (value._device, None if step is None else float(step))
                step = shared.get(key)
                if step is None:
                    start = 0.0 if key[1] is None else key[1]
                    step = shared[key] = cr.full((), start, dtype=dt.float32,
                                                 device=value.device)
            batches.setdefault((value._device, id(step)), []).append(item)
            item[3]["_step"] = step  # the count this batch shares (removed below)
        for batch in batches.values():
            if len(batch) == 1:
                batch[0][3].pop("_step")
                single.append(batch[0])
            else:
                self._fused_capturable(batch, group)
        super().update_group(single, group)

    def _fused_capturable(self, batch: list[StepItem], group: dict[str, Any]) -> None:
        capture = _capture.active()
        befores = []
        for _, value, _, state in batch:
            step = state.pop("_step")
            befores.append(dict(state))
            if "exp_avg" not in state:
                state["exp_avg"] = cr.zeros_like(value)
                state["exp_avg_sq"] = cr.zeros_like(value)
            state["step"] = step
        lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        lr = lr if isinstance(lr, _trace.HostFloat) else float(lr)  # replays re-read a HostFloat
        t = batch[0][3]["step"] + 1
        n = len(batch)
        outs = apply(composite.adam_steps_capturable, *[it[1] for it in batch],
                     *[it[2] for it in batch], *[it[3]["exp_avg"] for it in batch],
                     *[it[3]["exp_avg_sq"] for it in batch], t, lr=lr, beta1=float(b1),
                     beta2=float(b2), eps=float(eps), weight_decay=float(wd),
                     decoupled=self._decoupled, maximize=bool(group["maximize"]))
        for i, ((param, _, _, state), before) in enumerate(zip(batch, befores, strict=True)):
            state["step"], state["exp_avg"], state["exp_avg_sq"] = t, outs[n + i], outs[2 * n + i]
            rebind(param, outs[i])
            if capture:
                self._keep_state_in_place(state, before)

    def _decay(self, p: Tensor, g: Tensor, group: dict[str, Any]) -> tuple[Tensor, Tensor]:
        """``maximize`` and weight decay, before the moments: decoupled (AdamW) shrinks the
        parameter, coupled (Adam) adds ``weight_decay * p`` to the gradient."""
        lr, wd = group["lr"], group["weight_decay"]
        if group["maximize"]:
            g = -g
        if wd:
            if self._decoupled:
                p = p * (1 - lr * wd)
            else:
                g = g + p * wd
        return p, g

    def _capturable(self, p: Tensor, g: Tensor, state: dict[str, Any],
                    group: dict[str, Any]) -> Tensor:
        """The same update with the step count on the device (PyTorch's ``capturable``).

        The bias corrections are computed from that count by tensor ops, so the update has no
        host number that changes between steps: a captured step (``ember_cuda.graph``)
        replays correctly.
        """
        lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        lr = lr if isinstance(lr, _trace.HostFloat) else float(lr)  # replays re-read a HostFloat
        if isinstance(state.get("step"), int | float):  # steps taken eagerly: count on the device
            state["step"] = cr.full((), float(state["step"]), dtype=dt.float32, device=p.device)
        if (not group["amsgrad"] and p._dtype in _FUSED_DTYPES
                and p._device.implements(composite.adam_step_capturable)):
            _init_state(state, p, False, device_step=True)
            state["step"] = state["step"] + 1
            out, state["exp_avg"], state["exp_avg_sq"] = apply(
                composite.adam_step_capturable, p, g, state["exp_avg"], state["exp_avg_sq"],
                state["step"], lr=lr, beta1=float(b1), beta2=float(b2), eps=float(eps),
                weight_decay=float(wd), decoupled=self._decoupled,
                maximize=bool(group["maximize"]))
            return out  # type: ignore[no-any-return]
        p, g = self._decay(p, g, group)
        _init_state(state, p, group["amsgrad"], device_step=True)
        t: Tensor = state["step"] + 1
        state["step"] = t
        m: Tensor = state["exp_avg"]
        m = m + (g - m) * (1 - b1)
        v: Tensor = state["exp_avg_sq"] * b2 + g * g * (1 - b2)
        state["exp_avg"], state["exp_avg_sq"] = m, v
        if group["amsgrad"]:
            v = state["max_exp_avg_sq"].maximum(v)
            state["max_exp_avg_sq"] = v
        # 1 - b**t as -expm1(t*log(b)): no cancellation in float32 when b**t is near 1
        step_size = (-(t * _log(b1)).expm1()).reciprocal() * lr
        bc2_sqrt = (-(t * _log(b2)).expm1()).sqrt()
        denom = v.sqrt() / bc2_sqrt.to(dtype=v.dtype) + float(eps)
        return p - (m / denom) * step_size.to(dtype=p.dtype)

    def _fused(self, p: Tensor, g: Tensor, state: dict[str, Any],
               group: dict[str, Any]) -> Tensor:
        """The same update as one op (one kernel) on devices that implement `adam_step`."""
        _init_state(state, p, False, device_step=False)
        state["step"] += 1
        t = state["step"]
        out, state["exp_avg"], state["exp_avg_sq"] = apply(
            composite.adam_step, p, g, state["exp_avg"], state["exp_avg_sq"],
            **self._fused_params(group, t))
        return out  # type: ignore[no-any-return]

    def _fused_params(self, group: dict[str, Any], t: Any) -> dict[str, Any]:
        """The params of `adam_step` / `adam_steps` at step ``t``."""
        lr, (b1, b2) = float(group["lr"]), group["betas"]
        return dict(lr=lr, beta1=float(b1), beta2=float(b2), eps=float(group["eps"]),
                    weight_decay=float(group["weight_decay"]), decoupled=self._decoupled,
                    maximize=bool(group["maximize"]), step_size=lr / (1 - b1 ** t),
                    bias_correction2_sqrt=math.sqrt(1 - b2 ** t))


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): ``p *= 1 - lr * weight_decay``
    before the Adam step; the default ``weight_decay`` is 0.01 as in PyTorch."""

    _decoupled = True

    def __init__(self, params: ParamsArg, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *,
                 maximize: bool = False, capturable: bool = False) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize,
                         capturable=capturable)
