"""Finding an engine (entry points) and the process's default communicator."""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from typing import Any

from .._device import Device, device as _device
from ._communicator import Communicator, DistributedError, LocalCommunicator, env_rank_world

__all__ = ["engines", "get", "init", "is_initialized", "rank", "shutdown", "world_size"]

# Engines are classes (or factories) published by plugins under this group:
# ``mpi = "ember_distributed.mpi:MPICommunicator"``.  Each is called with ``timeout=`` and
# ``device=`` keywords and returns a `Communicator`.
ENTRY_POINT_GROUP = "ember.distributed"
_GPU_DEVICES = ("cuda", "rocm")

_default: Communicator | None = None


def engines() -> dict[str, Any]:
    """The installed engines by name (their entry points, not yet loaded)."""
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _base(dev: Device) -> Device:
    while dev.inner is not None:
        dev = dev.inner
    return dev


def _choose(device: Device | None) -> str:
    if device is not None and _base(device).name in _GPU_DEVICES:
        return "nccl"
    return "mpi"


def init(engine: str | None = None, *, device: str | Device | None = None,
         timeout: float | None = None) -> Communicator:
    """Join the job this process was launched into and make its communicator the default.

    Parameters
    ----------
    engine
        ``"mpi"``, ``"nccl"`` or ``"local"``; by default ``"local"`` when the launcher says the
        world has one process, else ``"nccl"`` for CUDA/ROCm devices and ``"mpi"`` for the rest.
    device
        The device the tensors exchanged live on (NCCL binds the process's GPU from it).
    timeout
        Seconds a collective may wait for the other ranks (default ``EMBER_DIST_TIMEOUT``, 60).

    Examples
    --------
    >>> import ember.distributed as dist
    >>> comm = dist.init("local")
    >>> (comm.rank, comm.world_size, dist.is_initialized())
    (0, 1, True)
    >>> dist.shutdown()
    """
    global _default
    dev = None if device is None else _device(device)
    if _default is not None:
        raise DistributedError(f"ember.distributed is already initialised ({_default!r}); call "
                               "ember.distributed.shutdown() first")
    if engine is None:
        engine = "local" if env_rank_world()[1] == 1 else _choose(dev)
    comm: Communicator
    if engine == "local":
        comm = LocalCommunicator(timeout)
    else:
        found = engines().get(engine)
        if found is None:
            raise DistributedError(
                f"no distributed engine {engine!r} is installed (installed: "
                f"{sorted(engines()) or 'none'}); install the ember-distributed package")
        factory: Callable[..., Communicator] = found.load()
        comm = factory(timeout=timeout, device=dev)
    _default = comm
    return comm


def get() -> Communicator:
    """The default communicator: the one `init` made, else a `LocalCommunicator`."""
    return _default if _default is not None else LocalCommunicator()


def is_initialized() -> bool:
    return _default is not None


def rank() -> int:
    """This process's rank in the default communicator (0 before `init`)."""
    return get().rank


def world_size() -> int:
    """The default communicator's world size (1 before `init`)."""
    return get().world_size


def shutdown() -> None:
    """Close the default communicator (a later `init` may make a new one)."""
    global _default
    if _default is not None:
        comm, _default = _default, None
        comm.close()
