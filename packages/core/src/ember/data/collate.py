"""`default_collate`: a list of samples into one batch (tensors stacked along a new axis 0)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._creation import tensor
from .._manipulation import stack
from .._tensor import Tensor

__all__ = ["default_collate"]


def default_collate(samples: Sequence[Any]) -> Any:
    """Stack tensors, turn numbers and numpy arrays into tensors, recurse into tuples and dicts.

    Examples
    --------
    >>> import ember
    >>> from ember.data import default_collate
    >>> x, y = default_collate([(ember.tensor([1., 2.]), 0), (ember.tensor([3., 4.]), 1)])
    >>> x.shape, y.tolist()
    ((2, 2), [0, 1])
    """
    if not samples:
        raise ValueError("default_collate: no samples")
    first = samples[0]
    if isinstance(first, Tensor):
        return stack(list(samples), 0)
    if isinstance(first, (bool, int, float)):
        return tensor(list(samples))
    if hasattr(first, "__array__") and hasattr(first, "shape"):
        import numpy as np

        return tensor(np.stack([np.asarray(s) for s in samples]))
    if isinstance(first, (str, bytes)):
        return list(samples)
    if isinstance(first, Mapping):
        return {k: default_collate([s[k] for s in samples]) for k in first}
    if isinstance(first, tuple) and hasattr(first, "_fields"):  # a named tuple
        return type(first)(*(default_collate(list(f)) for f in zip(*samples, strict=True)))
    if isinstance(first, Sequence):
        lengths = {len(s) for s in samples}
        if len(lengths) != 1:
            raise ValueError(f"default_collate: samples have different lengths {sorted(lengths)}")
        cols = [default_collate(list(f)) for f in zip(*samples, strict=True)]
        return tuple(cols) if isinstance(first, tuple) else cols
    raise TypeError(f"default_collate cannot batch samples of type {type(first).__name__}")
