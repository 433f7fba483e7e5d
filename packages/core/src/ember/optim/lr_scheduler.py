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
    "CosineAnnealingLR", "CosineAnnealingWarmRestarts", "CosineWarmupLR", "ExponentialLR",
    "LRScheduler", "LambdaLR", "LinearLR", "MultiStepLR", "NoamLR", "OneCycleLR",
    "ReduceLROnPlateau", "SequentialLR", "StepLR",
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

    def step(self, epoch: int | None = None) -> None:
        """Advance one step (or jump to step ``epoch``) and set every group's ``lr``."""
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
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

    def step(self, epoch: int | None = None) -> None:
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
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


class CosineAnnealingWarmRestarts(LRScheduler):
    """SGDR (Loshchilov & Hutter): half a cosine from ``base_lr`` to ``eta_min`` over ``T_i``
    steps, then a restart; ``T_i`` starts at ``T_0`` and is multiplied by ``T_mult`` at each
    restart.  ``step(epoch)`` accepts fractional epochs (a step per batch:
    ``sched.step(epoch + i / iters)``), as PyTorch's.
    """

    def __init__(self, optimizer: Optimizer, T_0: int, T_mult: int = 1,
                 eta_min: float = 0.0, last_epoch: int = -1) -> None:
        if not isinstance(T_0, int) or T_0 <= 0:
            raise ValueError(f"Expected positive integer T_0, but got {T_0}")
        if not isinstance(T_mult, int) or T_mult < 1:
            raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
        self.T_0, self.T_i, self.T_mult, self.eta_min = T_0, T_0, T_mult, eta_min
        self.T_cur: float = last_epoch
        super().__init__(optimizer, last_epoch)

    def lr_at(self, step: int, base_lr: float) -> float:
        # the position in the cycle is T_cur, which step() keeps
        return self.eta_min + (base_lr - self.eta_min) * (
            1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2

    def step(self, epoch: float | None = None) -> None:  # fractional epochs
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur = self.T_cur + 1
            if self.T_cur >= self.T_i:
                self.T_cur = self.T_cur % self.T_i
                self.T_i = self.T_i * self.T_mult
        else:
            if epoch < 0:
                raise ValueError(f"Expected non-negative epoch, but got {epoch}")
            if epoch >= self.T_0:
                if self.T_mult == 1:
                    self.T_cur = epoch % self.T_0
                else:
                    n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
                    self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
                    self.T_i = self.T_0 * self.T_mult ** n
            else:
                self.T_i = self.T_0
                self.T_cur = epoch
        self.last_epoch = math.floor(epoch)
        for g, base in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
            g["lr"] = self.lr_at(self.last_epoch, base)


class SequentialLR(LRScheduler):
    """Run ``schedulers`` one after the other, switching at each of ``milestones`` (one fewer
    than the schedulers); a scheduler starts from its step 0 at its milestone, as PyTorch's.

    Examples
    --------
    >>> import ember
    >>> from ember.optim import SGD, lr_scheduler as S
    >>> opt = SGD([ember.zeros(1)], lr=1.0)
    >>> warm = S.LinearLR(opt, start_factor=0.5, total_iters=2)
    >>> decay = S.ExponentialLR(opt, gamma=0.5)
    >>> sched = S.SequentialLR(opt, [warm, decay], milestones=[2])
    >>> lrs = []
    >>> for _ in range(5):
    ...     lrs.append(opt.param_groups[0]["lr"])
    ...     sched.step()
    >>> lrs
    [0.5, 0.75, 1.0, 0.5, 0.25]
    """

    def __init__(self, optimizer: Optimizer, schedulers: Sequence[LRScheduler],
                 milestones: Sequence[int], last_epoch: int = -1) -> None:
        if len(schedulers) < 1:
            raise ValueError("SequentialLR expects at least one scheduler")
        for i, sched in enumerate(schedulers):
            if isinstance(sched, ReduceLROnPlateau):
                raise ValueError(f"SequentialLR does not support ReduceLROnPlateau (at index "
                                 f"{i}): its step needs the metric")
            if sched.optimizer is not optimizer:
                raise ValueError(f"SequentialLR expects all schedulers to belong to the same "
                                 f"optimizer; the one at index {i} ({type(sched).__name__}) "
                                 "has another")
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(f"SequentialLR expects one milestone fewer than schedulers, got "
                             f"{len(schedulers)} scheduler(s) and {len(milestones)} "
                             "milestone(s)")
        self.optimizer = optimizer
        self._schedulers = list(schedulers)
        self._milestones = list(milestones)
        self.last_epoch = last_epoch + 1
        for g in optimizer.param_groups:
            g["lr"] = g["initial_lr"]
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        for sched in self._schedulers:  # undo the step each scheduler took when it was made
            _undo_step(sched)
        self._schedulers[bisect.bisect_right(self._milestones, 0)].step()

    def lr_at(self, step: int, base_lr: float) -> float:
        raise NotImplementedError("SequentialLR sets rates through its schedulers")

    def step(self, epoch: int | None = None) -> None:
        if epoch is not None:
            raise TypeError("SequentialLR.step() takes no epoch")
        self.last_epoch += 1
        idx = bisect.bisect_right(self._milestones, self.last_epoch)
        sched = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            sched.step(0)  # the next scheduler starts at its own step 0
        else:
            sched.step()

    def state_dict(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("optimizer", "_schedulers")}
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        inner = state["_schedulers"]
        self.__dict__.update({k: v for k, v in state.items() if k != "_schedulers"})
        for sched, saved in zip(self._schedulers, inner, strict=True):
            sched.load_state_dict(saved)


def _undo_step(sched: LRScheduler) -> None:
    inner = getattr(sched, "_schedulers", None)
    if inner is not None:
        for s in inner:
            _undo_step(s)
    else:
        sched.last_epoch -= 1


class ReduceLROnPlateau(LRScheduler):
    """Multiply the learning rate by ``factor`` when a metric has stopped improving for more
    than ``patience`` steps; call ``sched.step(metric)`` once an epoch (PyTorch's rules for
    ``mode``, ``threshold_mode``, ``cooldown``, ``min_lr`` and ``eps``).

    ``metric`` may be a 0-d tensor: reading it is one host read.

    Examples
    --------
    >>> import ember
    >>> opt = ember.optim.SGD([ember.zeros(1)], lr=1.0)
    >>> sched = ember.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=1, factor=0.5)
    >>> for loss in [3.0, 2.0, 2.0, 2.0, 2.0, 1.0]:
    ...     sched.step(loss)
    >>> sched.get_last_lr()
    [0.5]
    """

    def __init__(self, optimizer: Optimizer, mode: str = "min", factor: float = 0.1,
                 patience: int = 10, threshold: float = 1e-4, threshold_mode: str = "rel",
                 cooldown: int = 0, min_lr: float | Sequence[float] = 0.0,
                 eps: float = 1e-8) -> None:
        if factor >= 1.0:
            raise ValueError("Factor should be < 1.0.")
        self.factor = factor
        self.optimizer = optimizer
        n = len(optimizer.param_groups)
        self.default_min_lr: float | None
        if isinstance(min_lr, list | tuple):
            if len(min_lr) != n:
                raise ValueError(f"expected {n} min_lrs, got {len(min_lr)}")
            self.default_min_lr = None
            self.min_lrs = list(min_lr)
        else:
            self.default_min_lr = float(min_lr)  # type: ignore[arg-type]  # a number here
            self.min_lrs = [self.default_min_lr] * n
        self.patience, self.cooldown, self.eps = patience, cooldown, eps
        self.last_epoch = 0
        self.base_lrs = [g["lr"] for g in optimizer.param_groups]
        self._init_is_better(mode, threshold, threshold_mode)
        self._reset()

    def _init_is_better(self, mode: str, threshold: float, threshold_mode: str) -> None:
        if mode not in ("min", "max"):
            raise ValueError(f"mode {mode} is unknown!")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"threshold mode {threshold_mode} is unknown!")
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode
        self.mode_worse = math.inf if mode == "min" else -math.inf

    def _reset(self) -> None:
        self.best = self.mode_worse
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    @property
    def in_cooldown(self) -> bool:
        return self.cooldown_counter > 0

    def is_better(self, a: float, best: float) -> bool:
        if self.mode == "min":
            return a < (best * (1.0 - self.threshold) if self.threshold_mode == "rel"
                        else best - self.threshold)
        return a > (best * (1.0 + self.threshold) if self.threshold_mode == "rel"
                    else best + self.threshold)

    def lr_at(self, step: int, base_lr: float) -> float:
        raise NotImplementedError("ReduceLROnPlateau sets rates from the metric in step()")

    def step(self, metrics: Any = None, epoch: int | None = None) -> None:  # type: ignore[override]  # takes the metric
        """Record this epoch's ``metrics`` (a number or a 0-d tensor) and reduce the rate
        if it has not improved for more than ``patience`` epochs."""
        if metrics is None:
            raise TypeError("ReduceLROnPlateau.step(metrics) needs the metric to watch, e.g. "
                            "sched.step(val_loss)")
        current = float(metrics)
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        if self.is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0  # bad epochs in cooldown do not count
        if self.num_bad_epochs > self.patience:
            self._reduce_lr()
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0

    def _reduce_lr(self) -> None:
        groups = self.optimizer.param_groups
        if len(groups) != len(self.min_lrs):
            if self.default_min_lr is None:
                raise RuntimeError(f"the optimizer has {len(groups)} parameter groups, "
                                   f"min_lr was given for {len(self.min_lrs)}")
            self.min_lrs = [self.default_min_lr] * len(groups)
        for g, min_lr in zip(groups, self.min_lrs, strict=True):
            old = float(g["lr"])
            new = max(old * self.factor, min_lr)
            if old - new > self.eps:
                g["lr"] = new

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_is_better(self.mode, self.threshold, self.threshold_mode)
