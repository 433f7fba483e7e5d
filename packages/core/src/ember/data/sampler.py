"""`DistributedSampler`: each rank of a data-parallel job its own share of a dataset."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sized

from .dataset import permutation

__all__ = ["DistributedSampler"]


class DistributedSampler:
    """The indices of rank ``rank``'s share of a dataset, in an order all ranks agree on.

    Every rank draws the same permutation (from ``seed`` and the epoch, so no communication is
    needed) and takes every ``num_replicas``-th index starting at its rank.  A `DataLoader`
    with ``batch_size=B`` on each of N ranks then sees, at step ``i``, exactly the samples one
    process would see at step ``i`` with ``batch_size=N*B`` and the same ``seed``.  The dataset
    is padded with its first indices to a multiple of ``num_replicas`` (every rank gets as many
    samples), or cut with ``drop_last``.

    Parameters
    ----------
    dataset
        A dataset (anything with ``__len__``) or its length.
    num_replicas, rank
        The world size and this process's rank (default: ``ember.distributed``'s).
    shuffle, seed
        A new order every epoch, from ``seed`` and the epoch (`set_epoch`).
    drop_last
        Leave out the tail that does not divide evenly instead of padding.

    Examples
    --------
    >>> from ember.data import DistributedSampler
    >>> [list(DistributedSampler(10, num_replicas=2, rank=r, shuffle=False)) for r in (0, 1)]
    [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
    >>> len(DistributedSampler(5, num_replicas=2, rank=1, shuffle=False))
    3
    """

    def __init__(self, dataset: Sized | int, num_replicas: int | None = None,
                 rank: int | None = None, *, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False) -> None:
        if num_replicas is None or rank is None:
            from .. import distributed

            num_replicas = distributed.world_size() if num_replicas is None else num_replicas
            rank = distributed.rank() if rank is None else rank
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not a rank of {num_replicas} replicas")
        self.size = dataset if isinstance(dataset, int) else len(dataset)
        self.num_replicas, self.rank = num_replicas, rank
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose order the next iteration uses (call it on every rank)."""
        self.epoch = epoch

    def __len__(self) -> int:
        if self.drop_last:
            return self.size // self.num_replicas
        return math.ceil(self.size / self.num_replicas)

    def indices(self) -> list[int]:
        """This rank's indices for the current epoch."""
        n = self.size
        order = (permutation(n, seed=self.seed * 1_000_003 + self.epoch) if self.shuffle
                 else list(range(n)))
        total = len(self) * self.num_replicas
        if total > n:  # pad with the first indices (again) so that every rank has as many
            order += (order * math.ceil(total / max(n, 1)))[:total - n]
        return order[:total][self.rank::self.num_replicas]

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices())
