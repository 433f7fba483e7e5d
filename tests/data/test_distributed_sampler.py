"""`DistributedSampler` and the `DataLoader` that uses it: shards that tile the dataset."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.data import DataLoader, DistributedSampler, TensorDataset


def test_ranks_share_one_permutation_without_overlap() -> None:
    shards = [list(DistributedSampler(12, num_replicas=3, rank=r, seed=5)) for r in range(3)]
    assert all(len(s) == 4 for s in shards)
    assert sorted(i for s in shards for i in s) == list(range(12))
    # the interleaving of the shards is one permutation, the same on every rank
    merged = [shards[k % 3][k // 3] for k in range(12)]
    again = [list(DistributedSampler(12, num_replicas=3, rank=r, seed=5)) for r in range(3)]
    assert shards == again and merged != list(range(12))


def test_set_epoch_changes_the_order_and_seed_repeats_it() -> None:
    s = DistributedSampler(50, num_replicas=2, rank=0, seed=1)
    first = list(s)
    s.set_epoch(1)
    second = list(s)
    assert first != second
    s.set_epoch(0)
    assert list(s) == first


def test_padding_and_drop_last() -> None:
    padded = [list(DistributedSampler(5, num_replicas=2, rank=r, shuffle=False)) for r in (0, 1)]
    assert padded == [[0, 2, 4], [1, 3, 0]]
    cut = [list(DistributedSampler(5, num_replicas=2, rank=r, shuffle=False, drop_last=True))
           for r in (0, 1)]
    assert cut == [[0, 2], [1, 3]]


def test_bad_rank_is_rejected() -> None:
    with pytest.raises(ValueError, match="rank 2 is not a rank of 2"):
        DistributedSampler(4, num_replicas=2, rank=2)


def test_rank_batches_together_are_the_single_process_batches() -> None:
    n, world, per_rank = 48, 2, 4
    ds = TensorDataset(ember.arange(n))
    single = DataLoader(ds, batch_size=world * per_rank, shuffle=True, seed=3)
    loaders = [DataLoader(ds, batch_size=per_rank, sampler=DistributedSampler(
        ds, num_replicas=world, rank=r, seed=3)) for r in range(world)]
    for epoch in (0, 1):
        single.set_epoch(epoch)
        for loader in loaders:
            loader.set_epoch(epoch)
        steps = [[b[0].numpy() for b in loader] for loader in loaders]
        want = [b[0].numpy() for b in single]
        assert len(want) == len(steps[0]) == len(loaders[0])
        for i, batch in enumerate(want):
            got = np.concatenate([steps[r][i] for r in range(world)])
            assert sorted(got.tolist()) == sorted(batch.tolist())


def test_sampler_and_shuffle_together_are_refused() -> None:
    with pytest.raises(ValueError, match="let the sampler shuffle"):
        DataLoader(TensorDataset(ember.arange(4)), sampler=DistributedSampler(4, 1, 0),
                   shuffle=True)


def test_default_world_is_this_process_alone() -> None:
    assert list(DistributedSampler(3, shuffle=False)) == [0, 1, 2]
