"""The communicator interface every engine implements, and the one-process communicator."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Literal

from .._tensor import Tensor

__all__ = [
    "Communicator",
    "DistributedError",
    "LocalCommunicator",
    "ReduceOp",
    "Work",
    "env_rank_world",
    "env_timeout",
]

ReduceOp = Literal["sum", "mean", "max", "min"]
REDUCE_OPS: tuple[ReduceOp, ...] = ("sum", "mean", "max", "min")

# (rank, world size) variables, in the order they are trusted: ember's own launcher, Open MPI,
# MPICH / Intel MPI (PMI), Slurm.
_ENV_PAIRS = (
    ("EMBER_RANK", "EMBER_WORLD_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
)
DEFAULT_TIMEOUT_S = 60.0


class DistributedError(RuntimeError):
    """A collective that failed or timed out; the message names the rank and the operation."""


DistributedError.__module__ = "ember.distributed"  # as tracebacks should name it


def env_rank_world() -> tuple[int, int]:
    """This process's ``(rank, world_size)`` as its launcher set them; ``(0, 1)`` if none did.

    Examples
    --------
    >>> import os
    >>> from ember.distributed import env_rank_world
    >>> env = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("EMBER_RANK")}
    >>> os.environ["EMBER_RANK"], os.environ["EMBER_WORLD_SIZE"] = "1", "4"
    >>> env_rank_world()
    (1, 4)
    >>> del os.environ["EMBER_RANK"], os.environ["EMBER_WORLD_SIZE"]; os.environ.update(env)
    """
    for rank_var, size_var in _ENV_PAIRS:
        rank, size = os.environ.get(rank_var), os.environ.get(size_var)
        if rank is not None and size is not None:
            r, n = int(rank), int(size)
            if not 0 <= r < n:
                raise DistributedError(f"{rank_var}={r} is not a rank of {size_var}={n}")
            return r, n
    return 0, 1


def env_timeout() -> float:
    """Seconds a collective may wait for the other ranks: ``EMBER_DIST_TIMEOUT`` (default 60)."""
    value = os.environ.get("EMBER_DIST_TIMEOUT")
    if not value:
        return DEFAULT_TIMEOUT_S
    t = float(value)
    if t <= 0:
        raise ValueError(f"EMBER_DIST_TIMEOUT must be a positive number of seconds, got {value}")
    return t


class Work(ABC):
    """A collective in flight (``all_reduce_async``): ``wait()`` gives its result."""

    @abstractmethod
    def wait(self) -> Tensor:
        """Block until the collective is complete (or fail after the timeout); its result."""


class _Done(Work):
    def __init__(self, result: Tensor) -> None:
        self.result = result

    def wait(self) -> Tensor:
        return self.result


class Communicator(ABC):
    """A group of processes that exchange tensors: one engine (MPI, NCCL) behind one API.

    Collectives are called by every rank in the same order with tensors of the same shape and
    dtype.  Tensors are values: each collective returns a new tensor on the input's device and
    never changes its input.  A collective that does not complete within ``timeout`` seconds
    (``EMBER_DIST_TIMEOUT``) raises `DistributedError` naming the rank and the operation.

    Attributes
    ----------
    engine : the engine's name (``"mpi"``, ``"nccl"``, ``"local"``).
    rank, world_size : this process's place in the group, and the group's size.
    timeout : seconds a collective may wait for the other ranks.
    """

    engine: str = ""

    def __init__(self, rank: int, world_size: int, timeout: float | None = None) -> None:
        self.rank = rank
        self.world_size = world_size
        self.timeout = env_timeout() if timeout is None else timeout

    # -- the collectives --------------------------------------------------------------------

    @abstractmethod
    def all_reduce_async(self, tensor: Tensor, op: ReduceOp = "sum") -> Work:
        """Start ``all_reduce``; the returned `Work`'s ``wait()`` gives the result."""

    def all_reduce(self, tensor: Tensor, op: ReduceOp = "sum") -> Tensor:
        """The elementwise ``op`` (sum, mean, max, min) of ``tensor`` over all ranks.

        ``mean`` of an integer tensor is the sum divided by the world size, rounded toward
        zero (as NCCL's average on integers), in the tensor's dtype.
        """
        return self.all_reduce_async(tensor, op).wait()

    @abstractmethod
    def broadcast(self, tensor: Tensor, src: int = 0) -> Tensor:
        """Rank ``src``'s ``tensor`` on every rank (the others pass a tensor of its shape)."""

    @abstractmethod
    def all_gather(self, tensor: Tensor) -> Tensor:
        """Every rank's ``tensor``, stacked: shape ``(world_size, *tensor.shape)``."""

    @abstractmethod
    def reduce_scatter(self, tensor: Tensor, op: ReduceOp = "sum") -> Tensor:
        """Reduce ``tensor`` over ranks and give rank ``r`` the ``r``-th block of the result.

        ``tensor.shape[0]`` must be a multiple of the world size; the result has
        ``shape[0] // world_size`` rows.
        """

    @abstractmethod
    def barrier(self) -> None:
        """Return once every rank has called ``barrier``."""

    # -- life cycle -------------------------------------------------------------------------

    def abort(self, code: int = 1) -> None:
        """Stop every rank of the job at once (after an error that the others cannot see)."""
        raise SystemExit(code)

    def close(self) -> None:  # noqa: B027  # optional: most engines hold nothing to free
        """Release the engine's resources; the communicator cannot be used afterwards."""

    # -- helpers for engines ----------------------------------------------------------------

    def check_op(self, op: str) -> ReduceOp:
        if op not in REDUCE_OPS:
            raise ValueError(f"unknown reduce op {op!r}; expected one of {REDUCE_OPS}")
        return op  # checked just above

    def check_scatter(self, tensor: Tensor) -> None:
        rows = tensor.shape[0] if tensor.shape else 0
        if not tensor.shape or rows % self.world_size:
            raise DistributedError(
                f"rank {self.rank}: reduce_scatter needs a first dimension divisible by the "
                f"world size {self.world_size}, got shape {tuple(tensor.shape)}")

    def describe(self, what: str) -> str:
        return f"rank {self.rank} of {self.world_size} ({self.engine}): {what}"

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(engine={self.engine!r}, rank={self.rank}, "
                f"world_size={self.world_size})")


class LocalCommunicator(Communicator):
    """The group of one process: every collective returns its input's values.

    Examples
    --------
    >>> import ember
    >>> from ember.distributed import LocalCommunicator
    >>> comm = LocalCommunicator()
    >>> comm.all_reduce(ember.tensor([1.0, 2.0]), "mean").tolist()
    [1.0, 2.0]
    >>> comm.all_gather(ember.tensor([3, 4])).shape
    (1, 2)
    """

    engine = "local"

    def __init__(self, timeout: float | None = None) -> None:
        super().__init__(0, 1, timeout)

    def all_reduce_async(self, tensor: Tensor, op: ReduceOp = "sum") -> Work:
        self.check_op(op)
        return _Done(tensor)

    def broadcast(self, tensor: Tensor, src: int = 0) -> Tensor:
        if src != 0:
            raise DistributedError(self.describe(f"broadcast from rank {src}, which is not a "
                                                 "rank of a group of one"))
        return tensor

    def all_gather(self, tensor: Tensor) -> Tensor:
        return tensor.reshape(1, *tensor.shape)

    def reduce_scatter(self, tensor: Tensor, op: ReduceOp = "sum") -> Tensor:
        self.check_op(op)
        self.check_scatter(tensor)
        return tensor

    def barrier(self) -> None:
        return None
