"""Sample transforms: callables applied to each sample (``dataset.map(transform)``).

Examples
--------
>>> import ember
>>> from ember.data import transforms as T
>>> t = T.Compose([T.ToDType(ember.float32), T.Normalize(0.5, 0.5)])
>>> t(ember.tensor([0, 1])).tolist()
[-1.0, 1.0]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .._creation import tensor
from .._dtype import DType, as_dtype
from .._tensor import Tensor

__all__ = ["Compose", "Lambda", "Normalize", "OnInput", "Reshape", "ToDType", "ToTensor"]


class Compose:
    """Apply transforms one after another."""

    def __init__(self, transforms: Sequence[Callable[[Any], Any]]) -> None:
        self.transforms = list(transforms)

    def __call__(self, x: Any) -> Any:
        for t in self.transforms:
            x = t(x)
        return x

    def __repr__(self) -> str:
        return f"Compose({self.transforms!r})"


class Lambda:
    """Wrap a function as a transform."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __call__(self, x: Any) -> Any:
        return self.fn(x)


class ToTensor:
    """Numbers, lists and numpy arrays to tensors (uint8 images are scaled to ``[0, 1]``)."""

    def __call__(self, x: Any) -> Tensor:
        t = x if isinstance(x, Tensor) else tensor(x)
        if t.dtype.name == "uint8":
            return t.to(dtype="float32") / 255.0
        return t


class ToDType:
    """Cast to ``dtype``."""

    def __init__(self, dtype: DType | str) -> None:
        self.dtype = as_dtype(dtype)

    def __call__(self, x: Tensor) -> Tensor:
        return x.to(dtype=self.dtype)


class Normalize:
    """``(x - mean) / std``, per channel (axis 0) when given sequences."""

    def __init__(self, mean: float | Sequence[float], std: float | Sequence[float]) -> None:
        self.mean, self.std = mean, std

    def __call__(self, x: Tensor) -> Tensor:
        if isinstance(self.mean, (int, float)) and isinstance(self.std, (int, float)):
            return (x - self.mean) / self.std
        shape = (-1, *([1] * (x.ndim - 1)))
        mean = tensor(list(self.mean) if not isinstance(self.mean, (int, float))
                      else [self.mean], dtype=x.dtype, device=x.device).reshape(shape)
        std = tensor(list(self.std) if not isinstance(self.std, (int, float))
                     else [self.std], dtype=x.dtype, device=x.device).reshape(shape)
        return (x - mean) / std


class Reshape:
    """Reshape each sample."""

    def __init__(self, *shape: int) -> None:
        self.shape = shape

    def __call__(self, x: Tensor) -> Tensor:
        return x.reshape(*self.shape)


class OnInput:
    """Apply a transform to the first element of ``(input, target, ...)`` samples only."""

    def __init__(self, transform: Callable[[Any], Any]) -> None:
        self.transform = transform

    def __call__(self, sample: tuple[Any, ...]) -> tuple[Any, ...]:
        return (self.transform(sample[0]), *sample[1:])
