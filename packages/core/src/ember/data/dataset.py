"""Map-style datasets: `Dataset`, `TensorDataset`, `Subset`, `ConcatDataset`, `random_split`."""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable, Sequence
from typing import Any

from .._creation import tensor
from .._random import Generator, default_generator
from .._tensor import Tensor

__all__ = [
    "ConcatDataset", "Dataset", "Subset", "TensorDataset", "TransformedDataset",
    "random_split",
]


class Dataset:
    """A sized collection of samples: subclasses implement ``__len__`` and ``__getitem__``.

    :meth:`get_batch` gives a whole collated batch; datasets that can slice many samples at
    once (`TensorDataset`) override it, and `DataLoader` uses it.
    """

    def __len__(self) -> int:
        raise NotImplementedError

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError

    def get_batch(self, indices: Sequence[int]) -> Any:
        """The samples at ``indices`` collated into one batch (`default_collate`)."""
        from .collate import default_collate

        return default_collate([self[i] for i in indices])

    def map(self, transform: Callable[[Any], Any]) -> TransformedDataset:
        """This dataset with ``transform`` applied to each sample."""
        return TransformedDataset(self, transform)


class TensorDataset(Dataset):
    """Samples are rows of tensors of equal length: ``ds[i] == (x[i], y[i])``.

    Examples
    --------
    >>> import ember
    >>> from ember.data import TensorDataset
    >>> ds = TensorDataset(ember.arange(6.).reshape(3, 2), ember.tensor([0, 1, 0]))
    >>> len(ds), ds[1][0].tolist(), ds.get_batch([2, 0])[1].tolist()
    (3, [2.0, 3.0], [0, 0])
    """

    def __init__(self, *tensors: Tensor | Any) -> None:
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        ts = [t if isinstance(t, Tensor) else tensor(t) for t in tensors]
        n = ts[0].shape[0] if ts[0].ndim else 0
        for i, t in enumerate(ts):
            if t.ndim == 0 or t.shape[0] != n:
                raise ValueError(f"TensorDataset: tensor {i} has shape {t.shape}; every tensor "
                                 f"needs {n} rows like tensor 0")
        self.tensors = tuple(ts)

    def __len__(self) -> int:
        return int(self.tensors[0].shape[0])

    def __getitem__(self, index: int) -> tuple[Tensor, ...]:
        return tuple(t[index] for t in self.tensors)

    def get_batch(self, indices: Sequence[int]) -> tuple[Tensor, ...]:
        idx = tensor(list(indices), dtype="int64", device=self.tensors[0].device)
        return tuple(t.index_select(0, idx.to(t.device)) for t in self.tensors)


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``."""

    def __init__(self, dataset: Dataset, indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = list(indices)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[self.indices[index]]

    def get_batch(self, indices: Sequence[int]) -> Any:
        return self.dataset.get_batch([self.indices[i] for i in indices])


class ConcatDataset(Dataset):
    """Datasets one after another."""

    def __init__(self, datasets: Sequence[Dataset]) -> None:
        self.datasets = list(datasets)
        self.cumulative: list[int] = []
        total = 0
        for d in self.datasets:
            total += len(d)
            self.cumulative.append(total)

    def __len__(self) -> int:
        return self.cumulative[-1] if self.cumulative else 0

    def __getitem__(self, index: int) -> Any:
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for a dataset of {len(self)}")
        k = bisect.bisect_right(self.cumulative, index)
        start = self.cumulative[k - 1] if k else 0
        return self.datasets[k][index - start]


class TransformedDataset(Dataset):
    """``transform(dataset[i])`` for every ``i``."""

    def __init__(self, dataset: Dataset, transform: Callable[[Any], Any]) -> None:
        self.dataset = dataset
        self.transform = transform

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        return self.transform(self.dataset[index])


def permutation(n: int, seed: int | None = None, generator: Generator | None = None) -> list[int]:
    """A permutation of ``range(n)`` that depends only on ``seed`` (or the generator's next key).

    It is computed on the host (Python's Mersenne Twister seeded from the key), so it is the
    same on every backend and machine.
    """
    if seed is None:
        s, offset = (generator or default_generator).next_key()
        key = f"ember:{s}:{offset}"
    else:
        key = f"ember:{int(seed)}"
    order = list(range(n))
    random.Random(key).shuffle(order)
    return order


def random_split(dataset: Dataset, lengths: Sequence[float], seed: int | None = None, *,
                 generator: Generator | None = None) -> list[Subset]:
    """Split into non-overlapping random subsets of the given lengths (or fractions).

    Fractions are turned into counts as PyTorch does (floor, then the remainder one by one).

    Examples
    --------
    >>> import ember
    >>> from ember.data import TensorDataset, random_split
    >>> ds = TensorDataset(ember.arange(10))
    >>> train, val = random_split(ds, [0.8, 0.2], seed=0)
    >>> len(train), len(val)
    (8, 2)
    """
    n = len(dataset)
    if all(0 <= f <= 1 for f in lengths) and math.isclose(sum(lengths), 1) and sum(lengths) != n:
        counts = [math.floor(n * f) for f in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
    else:
        counts = [int(v) for v in lengths]
    if sum(counts) != n:
        raise ValueError(f"random_split: lengths {list(lengths)} do not add up to the dataset's "
                         f"{n} samples")
    order = permutation(n, seed, generator)
    out, start = [], 0
    for c in counts:
        out.append(Subset(dataset, order[start:start + c]))
        start += c
    return out
