"""ember.distributed's interface in one process: environment, the local group, buckets."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.distributed as dist
from ember.distributed import (
    Communicator,
    DistributedError,
    GradientBuckets,
    LocalCommunicator,
    ReducedGradients,
    Work,
)


def test_rank_and_world_come_from_the_launchers_variables(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("EMBER_RANK", "EMBER_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(var, raising=False)
    assert dist.env_rank_world() == (0, 1)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "3")
    assert dist.env_rank_world() == (2, 3)
    monkeypatch.setenv("EMBER_RANK", "0")
    monkeypatch.setenv("EMBER_WORLD_SIZE", "2")
    assert dist.env_rank_world() == (0, 2)  # ember-run's own variables win
    monkeypatch.setenv("EMBER_RANK", "5")
    with pytest.raises(DistributedError, match="EMBER_RANK=5"):
        dist.env_rank_world()


def test_timeout_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_DIST_TIMEOUT", "2.5")
    assert LocalCommunicator().timeout == 2.5
    monkeypatch.setenv("EMBER_DIST_TIMEOUT", "0")
    with pytest.raises(ValueError, match="EMBER_DIST_TIMEOUT"):
        LocalCommunicator()


def test_local_group_returns_the_values() -> None:
    comm = LocalCommunicator()
    x = ember.tensor([[1, 2], [3, 4]])
    assert comm.all_reduce(x, "mean").tolist() == [[1, 2], [3, 4]]
    assert comm.all_gather(x).numpy().tolist() == [[[1, 2], [3, 4]]]
    assert comm.reduce_scatter(x).tolist() == [[1, 2], [3, 4]]
    with pytest.raises(ValueError, match="unknown reduce op 'prod'"):
        comm.all_reduce(x, "prod")  # type: ignore[arg-type]  # the error under test
    with pytest.raises(DistributedError, match=r"rank 0 of 1 \(local\): broadcast from rank 1"):
        comm.broadcast(x, src=1)


def test_init_without_the_engine_says_what_to_install() -> None:
    with pytest.raises(DistributedError, match="no distributed engine 'carrier-pigeon'"):
        dist.init("carrier-pigeon")
    assert not dist.is_initialized()


class _TwoRanks(Communicator):
    """A pretend rank of two whose partner always sends ``partner`` (the mean's other half)."""

    engine = "fake"

    def __init__(self, partner: float) -> None:
        super().__init__(0, 2, timeout=1.0)
        self.partner = partner
        self.sizes: list[int] = []

    def all_reduce_async(self, tensor: ember.Tensor, op: str = "sum") -> Work:  # type: ignore[override]
        assert op == "mean"
        self.sizes.append(tensor.numel())
        out = (tensor + self.partner) / 2

        class Done(Work):
            def wait(self) -> ember.Tensor:
                return out

        return Done()

    def broadcast(self, tensor: ember.Tensor, src: int = 0) -> ember.Tensor:
        raise NotImplementedError

    def all_gather(self, tensor: ember.Tensor) -> ember.Tensor:
        raise NotImplementedError

    def reduce_scatter(self, tensor: ember.Tensor, op: str = "sum") -> ember.Tensor:  # type: ignore[override]
        raise NotImplementedError

    def barrier(self) -> None:
        raise NotImplementedError


def test_buckets_split_by_size_in_reverse_order_and_average() -> None:
    params = [ember.zeros(64), ember.zeros(8, 8), ember.zeros(16), ember.zeros(100)]
    comm = _TwoRanks(partner=1.0)
    # 256 bytes a bucket: 400 B alone, then 16+64 floats (320 B) do not fit together
    buckets = GradientBuckets(params, comm, bucket_mb=256 / 2**20)
    assert [[p.numel() for p in b] for b in buckets.buckets] == [[100], [16], [64], [64]]
    grads = ReducedGradients((p, ember.full(p.shape, 3.0)) for p in params[:3])
    reduced = buckets.reduce(grads)
    assert comm.sizes == [100, 16, 64, 64]
    for p in params[:3]:
        np.testing.assert_array_equal(reduced[p].numpy(), np.full(p.shape, 2.0, np.float32))
    # a parameter without a gradient here still takes part (as zeros): the partner's half
    np.testing.assert_array_equal(reduced[params[3]].numpy(), np.full(100, 0.5, np.float32))


def test_small_parameters_share_a_bucket() -> None:
    params = [ember.zeros(3), ember.zeros(2, 2), ember.zeros(5, dtype=ember.float64)]
    comm = _TwoRanks(partner=0.0)
    buckets = GradientBuckets(params, comm)
    assert [len(b) for b in buckets.buckets] == [1, 2]  # one per dtype
    grads = ReducedGradients((p, ember.ones(p.shape, dtype=p.dtype)) for p in params)
    reduced = buckets.reduce(grads)
    assert comm.sizes == [5, 7]
    assert reduced[params[1]].tolist() == [[0.5, 0.5], [0.5, 0.5]]
    assert reduced[params[2]].dtype == ember.float64
