"""Data-parallel training across processes: one communicator API, engines as plugins.

Core holds the interface only; the engines (MPI through mpi4py, NCCL through CuPy) live in the
``ember-distributed`` plugin and are found by entry point.  See ``docs/distributed.md``.

Examples
--------
>>> import ember
>>> import ember.distributed as dist
>>> comm = dist.get()  # before init: the group of this process alone
>>> comm.all_reduce(ember.tensor([1.0, 2.0])).tolist(), comm.world_size
([1.0, 2.0], 1)
"""

from __future__ import annotations

from ._buckets import (
    GradientBuckets as GradientBuckets,
    ReducedGradients as ReducedGradients,
)
from ._communicator import (
    Communicator as Communicator,
    DistributedError as DistributedError,
    LocalCommunicator as LocalCommunicator,
    ReduceOp as ReduceOp,
    Work as Work,
    env_rank_world as env_rank_world,
    env_timeout as env_timeout,
)
from ._engines import (
    engines as engines,
    get as get,
    init as init,
    is_initialized as is_initialized,
    rank as rank,
    shutdown as shutdown,
    world_size as world_size,
)

__all__ = [
    "Communicator",
    "DistributedError",
    "GradientBuckets",
    "LocalCommunicator",
    "ReduceOp",
    "ReducedGradients",
    "Work",
    "engines",
    "env_rank_world",
    "env_timeout",
    "get",
    "init",
    "is_initialized",
    "rank",
    "shutdown",
    "world_size",
]
