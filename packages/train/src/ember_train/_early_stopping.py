"""Early stopping and "best so far" tracking by one metric."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["EarlyStopping", "MetricTracker"]


class MetricTracker:
    """The best value of ``metric`` (``"valid/loss"``) so far, and how long ago it was.

    ``mode`` is ``"min"``, ``"max"`` or ``"auto"`` (``max`` for accuracy-like names, else
    ``min``).  A value counts as better when it beats the best by more than ``min_delta``.
    """

    def __init__(self, metric: str, mode: str = "auto", min_delta: float = 0.0) -> None:
        if "/" not in metric:
            raise ValueError(f"metric must be 'split/name' (e.g. 'valid/loss'), got {metric!r}")
        if mode == "auto":
            name = metric.split("/", 1)[1]
            mode = "max" if any(s in name for s in ("accuracy", "f1", "precision", "recall")) \
                else "min"
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min', 'max' or 'auto', got {mode!r}")
        self.metric, self.mode, self.min_delta = metric, mode, float(min_delta)
        self.best: float | None = None
        self.best_epoch: int | None = None
        self.since_best = 0

    def value_in(self, results: dict[str, dict[str, float | None]]) -> float | None:
        split, name = self.metric.split("/", 1)
        v = results.get(split, {}).get(name)
        return None if v is None or (isinstance(v, float) and math.isnan(v)) else v

    def update(self, epoch: int, results: dict[str, dict[str, float | None]]) -> bool:
        """Record an epoch's results; True when they are the new best."""
        v = self.value_in(results)
        if v is None:
            return False
        better = self.best is None or (v < self.best - self.min_delta if self.mode == "min"
                                       else v > self.best + self.min_delta)
        if better:
            self.best, self.best_epoch, self.since_best = v, epoch, 0
        else:
            self.since_best += 1
        return better

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "best_epoch": self.best_epoch, "since_best": self.since_best}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.best_epoch = state["best"], state["best_epoch"]
        self.since_best = state["since_best"]


class EarlyStopping(MetricTracker):
    """Stop when ``metric`` has not improved by more than ``min_delta`` for ``patience`` epochs.

    Examples
    --------
    >>> stop = EarlyStopping("valid/loss", patience=2)
    >>> [stop.update(e, {"valid": {"loss": v}}) or stop.should_stop() for e, v in
    ...  enumerate([1.0, 0.5, 0.6, 0.55], 1)]
    [True, True, False, True]
    """

    def __init__(self, metric: str = "valid/loss", patience: int = 3, min_delta: float = 0.0,
                 mode: str = "auto") -> None:
        super().__init__(metric, mode, min_delta)
        if patience < 1:
            raise ValueError(f"patience must be at least 1, got {patience}")
        self.patience = patience

    def should_stop(self) -> bool:
        return self.since_best >= self.patience

    def reason(self, best: bool = True) -> str:
        """Why the run stopped; ``best=False`` leaves out the best value and its epoch."""
        said = (f"early stopping: {self.metric} did not improve by more than {self.min_delta} "
                f"for {self.patience} epochs")
        return said + (f" (best {self.best:.6g} at epoch {self.best_epoch})" if best else "")
