"""One step of training or validation: the model's step, batches on the device, gradients."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["AccumulatedGradients", "StepOutput", "default_step", "to_device"]


@dataclass
class StepOutput:
    """What a train or valid step returns.

    ``loss`` is a one-element tensor; ``output`` (the logits) and ``target`` feed the
    classification metrics and may be left out; ``num_items`` defaults to the target's (or the
    output's) first dimension.
    """

    loss: Any
    output: Any = None
    target: Any = None
    num_items: int | None = None

    def items(self) -> int:
        if self.num_items is not None:
            return self.num_items
        for t in (self.target, self.output):
            if t is not None and getattr(t, "shape", None):
                return int(t.shape[0])
        return 1


def as_step_output(result: Any) -> StepOutput:
    """Accept a `StepOutput`, a ``(loss, output, target)`` tuple, a dict or a bare loss."""
    if isinstance(result, StepOutput):
        return result
    if isinstance(result, Mapping):
        return StepOutput(**result)
    if isinstance(result, tuple):
        return StepOutput(*result)
    return StepOutput(result)


def default_step(model: Any, loss_fn: Callable[[Any, Any], Any] | None) -> Callable[[Any],
                                                                                   StepOutput]:
    """A step for ``(inputs, targets)`` batches: ``loss_fn(model(inputs), targets)``."""
    if loss_fn is None:
        raise TypeError(f"{type(model).__name__} has no train_step/valid_step: give the Learner "
                        "a loss_fn (e.g. ember.nn.functional.cross_entropy)")

    def step(batch: Any) -> StepOutput:
        if isinstance(batch, Mapping):
            inputs, target = batch["inputs"], batch["targets"]
        else:
            inputs, target = batch
        output = model(inputs)
        return StepOutput(loss_fn(output, target), output, target)

    return step


def to_device(batch: Any, device: Any) -> Any:
    """Move every tensor of a (nested) batch to ``device``; other values stay as they are."""
    from ember import Tensor

    if device is None:
        return batch
    if isinstance(batch, Tensor):
        return batch if batch.device is device else batch.to(device)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a NamedTuple batch
        return type(batch)(*(to_device(b, device) for b in batch))
    if isinstance(batch, list | tuple):
        return type(batch)(to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch


def _key(t: Any) -> int:
    # Gradients are keyed by a parameter's payload (its tape cell), which several Tensor
    # objects may share; fall back to the object itself.
    return id(getattr(t, "_data", t))


class AccumulatedGradients:
    """The mean of the `Gradients` of several backward passes, used like one `Gradients`.

    ``optimizer.step`` reads it exactly as it reads ``loss.backward()``'s result: ``grads[p]``,
    ``grads.get(p)``, ``p in grads``, iteration over ``(tensor, gradient)`` pairs.
    """

    def __init__(self) -> None:
        self._sum: dict[int, tuple[Any, Any]] = {}
        self.count = 0

    def add(self, grads: Any, params: Iterable[Any]) -> None:
        for p in params:
            g = grads.get(p)
            if g is None:
                continue
            k = _key(p)
            prev = self._sum.get(k)
            self._sum[k] = (p, g if prev is None else prev[1] + g)
        self.count += 1

    def mean(self) -> AccumulatedGradients:
        out = AccumulatedGradients()
        scale = 1.0 / max(self.count, 1)
        out._sum = {k: (p, g if self.count == 1 else g * scale) for k, (p, g) in self._sum.items()}
        out.count = 1
        return out

    def params_and_grads(self) -> list[tuple[Any, Any]]:
        return list(self._sum.values())

    def load(self, pairs: Iterable[tuple[Any, Any]], count: int) -> None:
        self._sum = {_key(p): (p, g) for p, g in pairs}
        self.count = count

    def __getitem__(self, t: Any) -> Any:
        found = self._sum.get(_key(t))
        if found is None:
            raise KeyError("no accumulated gradient for this tensor")
        return found[1]

    def get(self, t: Any, default: Any = None) -> Any:
        found = self._sum.get(_key(t))
        return default if found is None else found[1]

    def __contains__(self, t: object) -> bool:
        return _key(t) in self._sum

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return iter(self._sum.values())

    def items(self) -> Iterator[tuple[Any, Any]]:
        return iter(self._sum.values())

    def __len__(self) -> int:
        return len(self._sum)

    def __repr__(self) -> str:
        return f"AccumulatedGradients({len(self._sum)} tensors over {self.count} steps)"
