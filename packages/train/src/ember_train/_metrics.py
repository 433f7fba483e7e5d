"""Metrics: values accumulated over the steps of an epoch and computed at its end.

Each metric sees a `StepView` per step: the loss, the model's output and the targets, plus the
learning rate and timing.  Device results are moved to the host once per step and shared
(argmax, top-k indices), so five classification metrics cost one transfer, not five.
Every metric's accumulator is a small JSON-able state, so a checkpoint taken in the middle of an
epoch resumes the epoch's metrics too.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

__all__ = [
    "F1", "Accuracy", "EpochTime", "LearningRate", "Loss", "Metric", "Precision",
    "ProcessMemory", "Recall", "StepView", "Throughput", "TopKAccuracy", "default_metrics",
    "reduce_metrics",
]


class StepView:
    """What metrics see of one step: loss, output, target, batch size, learning rate."""

    def __init__(self, loss: Any, output: Any, target: Any, num_items: int, lr: float | None,
                 step_time: float) -> None:
        self.loss_tensor = loss
        self.output = output
        self.target = target
        self.num_items = num_items
        self.lr = lr
        self.step_time = step_time

    @cached_property
    def loss(self) -> float:
        return float(self.loss_tensor.item())

    @cached_property
    def targets(self) -> np.ndarray:
        return _host(self.target).reshape(-1).astype(np.int64)

    @cached_property
    def predictions(self) -> np.ndarray:
        return _host(self.output.detach().argmax(dim=-1)).reshape(-1)

    def topk(self, k: int) -> np.ndarray:
        """Indices of the ``k`` largest outputs per item, ``[items, k]`` on the host."""
        cache: dict[int, np.ndarray] = self.__dict__.setdefault("_topk", {})
        if k not in cache:
            out = self.output.detach()
            cache[k] = _host(out.topk(min(k, out.shape[-1]), dim=-1)[1]).reshape(-1, min(
                k, out.shape[-1]))
        return cache[k]


def _host(x: Any) -> np.ndarray:
    return x.numpy() if hasattr(x, "numpy") else np.asarray(x)


class Metric:
    """Base class: ``reset`` at epoch start, ``update`` per step, ``compute`` at the end.

    ``name`` is the key in logs (``train/accuracy``); ``higher_is_better`` guides "best" marks;
    ``needs_output`` metrics are skipped when a step returns no output/target (a pure loss).
    """

    name: str = "metric"
    higher_is_better: bool = True
    needs_output: bool = False
    fmt: str = "{:.4f}"
    # How each accumulator combines over the ranks of a data-parallel run ("sum" or "max");
    # None: every numeric ``_acc_`` accumulator is summed.  ``{}``: the metric stays per rank.
    across_ranks: ClassVar[dict[str, str] | None] = None

    def reset(self) -> None:
        raise NotImplementedError

    def update(self, step: StepView) -> None:
        raise NotImplementedError

    def compute(self) -> float | None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {k: (v.tolist() if isinstance(v, np.ndarray) else v)
                for k, v in vars(self).items() if k.startswith("_acc_")}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            cur = getattr(self, k)
            setattr(self, k, np.asarray(v, dtype=cur.dtype) if isinstance(cur, np.ndarray)
                    else v)

    def format(self, value: float | None) -> str:
        return "-" if value is None else self.fmt.format(value)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class Loss(Metric):
    """Mean loss over the epoch, weighted by the number of items in each step."""

    name = "loss"
    higher_is_better = False

    def reset(self) -> None:
        self._acc_sum, self._acc_n = 0.0, 0

    def update(self, step: StepView) -> None:
        self._acc_sum += step.loss * step.num_items
        self._acc_n += step.num_items

    def compute(self) -> float | None:
        return self._acc_sum / self._acc_n if self._acc_n else None


class Accuracy(Metric):
    """Fraction of items whose argmax output equals the target."""

    name = "accuracy"
    needs_output = True

    def reset(self) -> None:
        self._acc_hits, self._acc_n = 0, 0

    def update(self, step: StepView) -> None:
        self._acc_hits += int((step.predictions == step.targets).sum())
        self._acc_n += int(step.targets.size)

    def compute(self) -> float | None:
        return self._acc_hits / self._acc_n if self._acc_n else None


class TopKAccuracy(Accuracy):
    """Fraction of items whose target is among the ``k`` largest outputs."""

    def __init__(self, k: int = 5) -> None:
        self.k = k
        self.name = f"top{k}_accuracy"

    def update(self, step: StepView) -> None:
        top = step.topk(self.k)
        self._acc_hits += int((top == step.targets[:, None]).any(axis=1).sum())
        self._acc_n += int(step.targets.size)


class _Confusion(Metric):
    needs_output = True
    kind = ""

    def __init__(self, num_classes: int) -> None:
        self.num_classes = num_classes
        self.name = self.kind

    def reset(self) -> None:
        self._acc_matrix = np.zeros((self.num_classes, self.num_classes), dtype=np.int64)

    def update(self, step: StepView) -> None:
        k = self.num_classes
        idx = step.targets * k + step.predictions
        self._acc_matrix += np.bincount(idx, minlength=k * k).reshape(k, k)

    def _per_class(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        m = self._acc_matrix
        tp = np.diag(m).astype(np.float64)
        return tp, m.sum(axis=0).astype(np.float64), m.sum(axis=1).astype(np.float64)

    def _macro(self, num: np.ndarray, den: np.ndarray) -> float | None:
        # Note: as scikit-learn's zero_division=0, a class never predicted scores 0; classes
        # absent from both targets and predictions are left out of the mean.
        seen = (self._acc_matrix.sum(axis=0) + self._acc_matrix.sum(axis=1)) > 0
        if not seen.any():
            return None
        with np.errstate(divide="ignore", invalid="ignore"):
            per = np.where(den > 0, num / np.where(den > 0, den, 1), 0.0)
        return float(per[seen].mean())


class Precision(_Confusion):
    """Macro-averaged precision over ``num_classes`` classes."""

    kind = "precision"

    def compute(self) -> float | None:
        tp, predicted, _ = self._per_class()
        return self._macro(tp, predicted)


class Recall(_Confusion):
    """Macro-averaged recall over ``num_classes`` classes."""

    kind = "recall"

    def compute(self) -> float | None:
        tp, _, actual = self._per_class()
        return self._macro(tp, actual)


class F1(_Confusion):
    """Macro-averaged F1 score over ``num_classes`` classes."""

    kind = "f1"

    def compute(self) -> float | None:
        tp, predicted, actual = self._per_class()
        return self._macro(2 * tp, predicted + actual)


class LearningRate(Metric):
    """The learning rate of the last step of the epoch."""

    name = "lr"
    fmt = "{:.2e}"
    across_ranks: ClassVar[dict[str, str] | None] = {}  # the same on every rank

    def reset(self) -> None:
        self._acc_lr: float | None = None

    def update(self, step: StepView) -> None:
        if step.lr is not None:
            self._acc_lr = step.lr

    def compute(self) -> float | None:
        return self._acc_lr


class Throughput(Metric):
    """Items per second over the time spent in steps (data loading included)."""

    name = "items_per_s"
    fmt = "{:.0f}"
    # every rank's items in the time of the slowest: the whole job's throughput
    across_ranks: ClassVar[dict[str, str] | None] = {"_acc_items": "sum", "_acc_time": "max"}

    def reset(self) -> None:
        self._acc_items, self._acc_time = 0, 0.0

    def update(self, step: StepView) -> None:
        self._acc_items += step.num_items
        self._acc_time += step.step_time

    def compute(self) -> float | None:
        return self._acc_items / self._acc_time if self._acc_time > 0 else None


class EpochTime(Metric):
    """Wall-clock seconds from the epoch's start to its last step."""

    name = "epoch_time_s"
    higher_is_better = False
    fmt = "{:.2f}s"
    across_ranks: ClassVar[dict[str, str] | None] = {}

    def reset(self) -> None:
        self._start = time.perf_counter()
        self._acc_elapsed = 0.0  # time of the steps before a resume
        self._end: float | None = None

    def update(self, step: StepView) -> None:
        self._end = time.perf_counter()

    def compute(self) -> float | None:
        return None if self._end is None else self._acc_elapsed + self._end - self._start

    def state_dict(self) -> dict[str, Any]:
        return {"_acc_elapsed": self.compute() or 0.0}


class ProcessMemory(Metric):
    """Resident memory of the process at the end of the epoch, in MiB."""

    name = "memory_mib"
    higher_is_better = False
    fmt = "{:.0f}MiB"
    across_ranks: ClassVar[dict[str, str] | None] = {}  # this rank's process

    def reset(self) -> None:
        pass

    def update(self, step: StepView) -> None:
        pass

    def compute(self) -> float | None:
        return rss_bytes() / 2**20


def rss_bytes() -> int:
    """Current resident set size (Linux: /proc; elsewhere the peak from getrusage)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


def reduce_metrics(metrics: list[Metric], comm: Any) -> list[Metric]:
    """Copies of ``metrics`` whose accumulators hold the whole job's (all ranks') values.

    Two collectives in all, whatever the number of metrics: one sum and one max of every
    accumulator packed into a float64 vector (counts stay exact below 2**53).
    """
    import copy

    import ember

    out = [copy.deepcopy(m) for m in metrics]
    slots: dict[str, list[tuple[Metric, str, Any]]] = {"sum": [], "max": []}
    for m in out:
        how = m.across_ranks
        if how is None:
            how = {k: "sum" for k, v in vars(m).items() if k.startswith("_acc_")
                   and isinstance(v, int | float | np.ndarray) and not isinstance(v, bool)}
        for k, op in how.items():
            slots[op].append((m, k, getattr(m, k)))
    for op, entries in slots.items():
        if not entries:
            continue
        flat = np.concatenate([np.asarray(v, dtype=np.float64).reshape(-1)
                               for _, _, v in entries])
        total = comm.all_reduce(ember.tensor(flat), op).numpy()
        at = 0
        for m, k, v in entries:
            size = np.asarray(v).size
            part = total[at:at + size]
            at += size
            if isinstance(v, np.ndarray):
                setattr(m, k, part.reshape(v.shape).astype(v.dtype))
            else:
                setattr(m, k, type(v)(part[0]))
    return out


def default_metrics(num_classes: int | None = None) -> list[Metric]:
    """Loss, accuracy, lr, throughput, epoch time and memory; with ``num_classes``, also
    macro precision, recall and F1."""
    metrics: list[Metric] = [Loss(), Accuracy()]
    if num_classes is not None:
        metrics += [Precision(num_classes), Recall(num_classes), F1(num_classes)]
    return [*metrics, LearningRate(), Throughput(), EpochTime(), ProcessMemory()]
