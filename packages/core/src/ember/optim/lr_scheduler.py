"""Learning-rate schedulers: each sets ``group["lr"]`` from a closed form of the step count.

Call ``scheduler.step()`` after ``optimizer.step(grads)``; the first learning rate is set when
the scheduler is made.  ``state_dict`` / ``load_state_dict`` save and restore the position.

Examples
--------
>>> import ember
>>> from ember import optim
>>> opt = optim.SGD([ember.zeros(1)], lr=1.0)
>>> sched = optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
>>> lrs = []
>>> for _ in range(5):
...     lrs.append(opt.param_groups[0]["lr"])
...     sched.step()
>>> lrs
[1.0, 1.0, 0.5, 0.5, 0.25]
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from typing import Any

from .optimizer import Optimizer

__all__ = [
    "CosineAnnealingLR", "CosineWarmupLR", "ExponentialLR", "LRScheduler", "LambdaLR",
    "LinearLR", "MultiStepLR", "NoamLR", "OneCycleLR", "StepLR",
]


class LRScheduler:
    """Base class: subclasses implement :meth:`lr_at` (the rate of each group at a step)."""

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        self.optimizer = optimizer
        for g in optimizer.param_groups:
            if last_epoch == -1:
                g.setdefault("initial_lr", g["lr"])
            elif "initial_lr" not in g:
                raise KeyError("resuming a scheduler (last_epoch != -1) needs 'initial_lr' in "
                               "every parameter group")
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def lr_at(self, step: int, base_lr: float) -> float:
        raise NotImplementedError

    def step(self) -> None:
        """Advance one step and set every group's ``lr``."""
        self.last_epoch += 1
        for g, base in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
            g["lr"] = self.lr_at(self.last_epoch, base)

    def get_last_lr(self) -> list[float]:
        return [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        """Everything but the optimizer: numbers and lists (JSON-serialisable)."""
        return {k: v for k, v in self.__dict__.items() if k != "optimizer" and not callable(v)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        for g, base in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
            g["lr"] = self.lr_at(self.last_epoch, base)


class LambdaLR(LRScheduler):
    """``base_lr * lr_lambda(step)``."""

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float],
                 last_epoch: int = -1) -> None:
        self.lr_lambda = lr_lambda
        super().__init__(optimizer, last_epoch)

    def lr_at(self, step: int, base_lr: float) -> float:
        return base_lr * self.lr_lambda(step)


class StepLR(LRScheduler):
    """Multiply by ``gamma`` every ``step_size`` steps."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, step: int, base_lr: float) -> float:
        return base_lr * self.gamma ** (step // self.step_size)


class MultiStepLR(LRScheduler):
    """Multiply by ``gamma`` at each milestone."""

    def __init__(self, optimizer: Optimizer, milestones: Sequence[int], gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, step: int, base_lr: float) -> float:
        return base_lr * self.gamma ** bisect.bisect_right(self.milestones, step)


class ExponentialLR(LRScheduler):
    """Multiply by ``gamma`` every step."""

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, step: int, base_lr: float) -> float:
        return base_lr * self.gamma ** step


class CosineAnnealingLR(LRScheduler):
    """Half a cosine from ``base_lr`` down to ``eta_min`` over ``T_max`` steps."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0,
                 last_epoch: int = -1) -> None:
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def lr_at(self, step: int, base_lr: float) -> float:
        return self.eta_min + (base_lr - self.eta_min) * (
            1 + math.cos(math.pi * step / self.T_max)) / 2


class CosineWarmupLR(LRScheduler):
    """Linear warm-up from 0 over ``warmup_steps``, then a cosine down to ``min_lr`` at
    ``total_steps`` (the schedule of Hugging Face's ``get_cosine_schedule_with_warmup``)."""

    def __init__(self, optimizer: Optimizer, warmup_steps: int, total_steps: int,
                 min_lr: float = 0.0, last_epoch: int = -1) -> None:
        if total_steps <= warmup_steps:
            raise ValueError(f"total_steps ({total_steps}) must exceed warmup_steps "
                             f"({warmup_steps})")
        self.warmup_steps, self.total_steps, self.min_lr = warmup_steps, total_steps, min_lr
        super().__init__(optimizer, last_epoch)

    def lr_at(self, step: int, base_lr: float) -> float:
        if step < self.warmup_steps:
            return base_lr * step / max(1, self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / (self.total_steps - self.warmup_steps))
        return self.min_lr + (base_lr - self.min_lr) * 0.5 * (1 + math.cos(math.pi * progress))


class LinearLR(LRScheduler):
    """Scale ``base_lr`` by a factor going linearly from ``start_factor`` to ``end_factor``
    over ``total_iters`` steps."""

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3,
                 end_factor: float = 1.0, total_iters: int = 5, last_epoch: int = -1) -> None:
        self.start_factor, self.end_factor, self.total_iters = (start_factor, end_factor,
                                                                total_iters)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, step: int, base_lr: float) -> float:
        frac = min(step, self.total_iters) / self.total_iters
        return base_lr * (self.start_factor + (self.end_factor - self.start_factor) * frac)


class NoamLR(LRScheduler):
    """The Transformer schedule: ``base_lr * d_model^-0.5 * min(s^-0.5, s * warmup^-1.5)`` with
    ``s = step + 1`` (base_lr plays the role of the paper's factor)."""

    def __init__(self, optimizer: Optimizer, d_model: int, warmup_steps: int = 4000,
                 last_epoch: int = -1) -> None:
        self.d_model, self.warmup_steps = d_model, warmup_steps
        super().__init__(optimizer, last_epoch)

    def lr_at(self, step: int, base_lr: float) -> float:
        s = float(step + 1)
        scale = min(s ** -0.5, s * self.warmup_steps ** -1.5) / math.sqrt(self.d_model)
        return float(base_lr * scale)


class OneCycleLR(LRScheduler):
    """Smith's one-cycle policy, as PyTorch's ``OneCycleLR``: rise from ``max_lr / div_factor``
    to ``max_lr`` over ``pct_start`` of the steps, then anneal to
    ``max_lr / (div_factor * final_div_factor)``; momentum (or Adam's beta1) cycles inversely
    between ``max_momentum`` and ``base_momentum`` when ``cycle_momentum``."""

    def __init__(self, optimizer: Optimizer, max_lr: float | Sequence[float],
                 total_steps: int, pct_start: float = 0.3, anneal_strategy: str = "cos",
                 cycle_momentum: bool = True, base_momentum: float = 0.85,
                 max_momentum: float = 0.95, div_factor: float = 25.0,
                 final_div_factor: float = 1e4, three_phase: bool = False,
                 last_epoch: int = -1) -> None:
        groups = optimizer.param_groups
        maxes = list(max_lr) if isinstance(max_lr, Sequence) else [max_lr] * len(groups)
        self.total_steps = total_steps
        self.anneal_strategy = anneal_strategy
        self.max_lrs = maxes
        self.initial_lrs = [m / div_factor for m in maxes]
        self.min_lrs = [i / final_div_factor for i in self.initial_lrs]
        if three_phase:
            ends = [pct_start * total_steps - 1, 2 * pct_start * total_steps - 2,
                    total_steps - 1]
            lrs = [("initial", "max"), ("max", "initial"), ("initial", "min")]
            moms = [("max", "base"), ("base", "max"), ("max", "max")]
        else:
            ends = [pct_start * total_steps - 1, total_steps - 1]
            lrs = [("initial", "max"), ("max", "min")]
            moms = [("max", "base"), ("base", "max")]
        self.phase_ends = [float(e) for e in ends]
        self.phase_lrs = lrs
        self.phase_moms = moms
        self.cycle_momentum = cycle_momentum
        self.use_beta1 = "betas" in optimizer.defaults
        if cycle_momentum and not self.use_beta1 and "momentum" not in optimizer.defaults:
            raise ValueError("cycle_momentum needs an optimizer with momentum or betas")
        self.base_momentum, self.max_momentum = base_momentum, max_momentum
        for g, init in zip(groups, self.initial_lrs, strict=True):
            if last_epoch == -1:
                g["initial_lr"] = init
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def _phase(self, step: int) -> tuple[int, float]:
        start = 0.0
        for i, end in enumerate(self.phase_ends):
            if step <= end or i == len(self.phase_ends) - 1:
                return i, (step - start) / (end - start)
            start = end
        raise AssertionError("unreachable")

    def step(self) -> None:
        self.last_epoch += 1
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"OneCycleLR stepped {step} times; total_steps is "
                             f"{self.total_steps}")
        i, pct = self._phase(step)
        for k, g in enumerate(self.optimizer.param_groups):
            vals = {"initial": self.initial_lrs[k], "max": self.max_lrs[k],
                    "min": self.min_lrs[k]}
            a, b = self.phase_lrs[i]
            g["lr"] = self._anneal(vals[a], vals[b], pct)
            if self.cycle_momentum:
                mvals = {"base": self.base_momentum, "max": self.max_momentum}
                ma, mb = self.phase_moms[i]
                mom = self._anneal(mvals[ma], mvals[mb], pct)
                if self.use_beta1:
                    g["betas"] = (mom, *g["betas"][1:])
                else:
                    g["momentum"] = mom

    def lr_at(self, step: int, base_lr: float) -> float:
        raise NotImplementedError("OneCycleLR sets rates in step()")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.last_epoch -= 1
        self.step()
