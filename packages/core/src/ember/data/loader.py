"""`DataLoader`: batches of a dataset, shuffled by a seed, optionally loaded by worker threads."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from .._device import Device, device as _device
from .._random import Generator
from .._tensor import Tensor
from .dataset import Dataset, permutation

__all__ = ["DataLoader"]


class DataLoader:
    """Iterate over ``dataset`` in batches.

    Parameters
    ----------
    dataset
        A map-style `Dataset` (anything with ``__len__`` and ``__getitem__``).
    batch_size
        Samples per batch.
    shuffle
        Visit samples in a new random order every epoch.  The order of epoch ``e`` depends only
        on ``seed`` and ``e`` (or on the generator's state), so runs repeat exactly.
    seed, generator
        Where the shuffle comes from (default: ``ember.default_generator``).
    drop_last
        Leave out the last batch when it is smaller than ``batch_size``.
    collate_fn
        Turns a list of samples into a batch; by default the dataset's ``get_batch`` (which
        for `TensorDataset` slices all rows at once) or `default_collate`.
    num_workers
        Threads loading batches ahead of the consumer (0: load in the calling thread).
        Batches come out in the same order, with the same contents, whatever the number.
    prefetch_factor
        Batches each worker loads ahead.
    device
        Move every tensor of each batch to this device.
    sampler
        Where the sample indices come from instead (a `DistributedSampler` in a data-parallel
        job): anything iterable over indices, with ``__len__``; ``set_epoch`` is passed on.
        ``shuffle`` must then be False (the sampler shuffles).

    Examples
    --------
    >>> import ember
    >>> from ember.data import DataLoader, TensorDataset
    >>> ds = TensorDataset(ember.arange(10), ember.arange(10) * 2)
    >>> loader = DataLoader(ds, batch_size=4, shuffle=True, seed=0)
    >>> [len(x) for x, y in loader]
    [4, 4, 2]
    >>> len(loader)
    3
    """

    def __init__(self, dataset: Dataset | Any, batch_size: int = 1, shuffle: bool = False,
                 *, seed: int | None = None, generator: Generator | None = None,
                 drop_last: bool = False, collate_fn: Callable[[list[Any]], Any] | None = None,
                 num_workers: int = 0, prefetch_factor: int = 2,
                 device: str | Device | None = None, sampler: Any = None) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        if sampler is not None and shuffle:
            raise ValueError("shuffle=True with a sampler: let the sampler shuffle "
                             "(DistributedSampler(..., shuffle=True, seed=...))")
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.generator = generator
        self.drop_last = drop_last
        self.collate_fn = collate_fn
        self.num_workers = num_workers
        self.prefetch_factor = max(1, prefetch_factor)
        self.device = None if device is None else _device(device)
        self.sampler = sampler
        self.epoch = 0

    def __len__(self) -> int:
        n = len(self.dataset) if self.sampler is None else len(self.sampler)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose shuffled order the next iteration uses."""
        self.epoch = epoch

    def batch_indices(self, epoch: int | None = None) -> list[list[int]]:
        """The sample indices of every batch of an epoch (the current one by default)."""
        n = len(self.dataset)
        if self.sampler is not None:
            if hasattr(self.sampler, "set_epoch"):
                self.sampler.set_epoch(self.epoch if epoch is None else epoch)
            order = list(self.sampler)
            n = len(order)
        elif self.shuffle:
            if self.seed is not None:
                e = self.epoch if epoch is None else epoch
                order = permutation(n, seed=self.seed * 1_000_003 + e)
            else:
                order = permutation(n, generator=self.generator)
        else:
            order = list(range(n))
        batches = [order[i:i + self.batch_size] for i in range(0, n, self.batch_size)]
        if self.drop_last and batches and len(batches[-1]) < self.batch_size:
            batches.pop()
        return batches

    def load(self, indices: Sequence[int]) -> Any:
        """One batch: the samples at ``indices``, collated and moved to ``device``."""
        if self.collate_fn is not None:
            batch = self.collate_fn([self.dataset[i] for i in indices])
        elif hasattr(self.dataset, "get_batch"):
            batch = self.dataset.get_batch(indices)
        else:
            from .collate import default_collate

            batch = default_collate([self.dataset[i] for i in indices])
        return batch if self.device is None else _to_device(batch, self.device)

    def __iter__(self) -> Iterator[Any]:
        batches = self.batch_indices()
        self.epoch += 1
        if self.num_workers == 0:
            for idx in batches:
                yield self.load(idx)
            return
        yield from self._threaded(batches)

    def _threaded(self, batches: list[list[int]]) -> Iterator[Any]:
        ahead = self.num_workers * self.prefetch_factor
        pool = ThreadPoolExecutor(self.num_workers, thread_name_prefix="ember-data")
        pending: deque[Future[Any]] = deque()
        todo = iter(batches)
        try:
            for idx in todo:
                pending.append(pool.submit(self.load, idx))
                if len(pending) >= ahead:
                    break
            while pending:
                batch = pending.popleft().result()
                nxt = next(todo, None)
                if nxt is not None:
                    pending.append(pool.submit(self.load, nxt))
                yield batch
        finally:
            for f in pending:
                f.cancel()
            pool.shutdown(wait=True, cancel_futures=True)


def _to_device(batch: Any, dev: Device) -> Any:
    if isinstance(batch, Tensor):
        return batch.to(dev)
    if isinstance(batch, dict):
        return {k: _to_device(v, dev) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(_to_device(v, dev) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(v, dev) for v in batch)
    return batch
