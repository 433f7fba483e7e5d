"""The NCCL engine (CuPy's ``cupy.cuda.nccl``): collectives on GPU memory, for CUDA and ROCm.

One process per GPU.  Rank 0 makes the NCCL unique id and hands it to the others through a
rendezvous: the folder ``EMBER_RENDEZVOUS`` that ``ember-run`` creates (one machine), or an MPI
broadcast when the job was started by ``mpirun`` (several machines).  Collectives are enqueued
on CuPy's current stream, the one ember's Triton kernels run on, so they are ordered after the
kernels that produced their inputs; ``wait`` polls a CUDA event with a deadline and aborts the
NCCL communicator when it passes, so a dead rank gives `DistributedError`, not a hang.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import ember
from ember.distributed import Communicator, DistributedError, ReduceOp, Work, env_rank_world

__all__ = ["NCCLCommunicator", "exchange_unique_id", "local_rank"]

_TYPES = {"float16": "NCCL_FLOAT16", "bfloat16": "NCCL_BFLOAT16", "float32": "NCCL_FLOAT32",
          "float64": "NCCL_FLOAT64", "int8": "NCCL_INT8", "uint8": "NCCL_UINT8",
          "int32": "NCCL_INT32", "int64": "NCCL_INT64", "bool": "NCCL_UINT8"}
_OPS = {"sum": "NCCL_SUM", "max": "NCCL_MAX", "min": "NCCL_MIN", "mean": "NCCL_AVG"}


def local_rank() -> int:
    """This process's index among the ranks of its machine (the GPU it should use)."""
    for var in ("EMBER_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                "SLURM_LOCALID"):
        if var in os.environ:
            return int(os.environ[var])
    return env_rank_world()[0]


def exchange_unique_id(nccl: Any, rank: int, world: int, timeout: float) -> Any:
    """Rank 0's ``nccl.get_unique_id()`` on every rank (file or MPI rendezvous)."""
    folder = os.environ.get("EMBER_RENDEZVOUS")
    if folder is None and ("OMPI_COMM_WORLD_SIZE" in os.environ or "PMI_SIZE" in os.environ):
        from mpi4py import MPI

        uid = nccl.get_unique_id() if rank == 0 else None
        return MPI.COMM_WORLD.bcast(uid, root=0)
    if folder is None:
        raise DistributedError(f"rank {rank} of {world} (nccl): no rendezvous: start the job "
                               "with ember-run (which sets EMBER_RENDEZVOUS) or with mpirun")
    path = Path(folder) / "nccl-unique-id.json"
    if rank == 0:
        uid = nccl.get_unique_id()
        kind = "bytes" if isinstance(uid, bytes) else "tuple"
        tmp = path.with_suffix(f".tmp-{os.getpid()}")
        tmp.write_text(json.dumps({"kind": kind, "id": list(uid)}))
        os.replace(tmp, path)  # readers see the whole file or none
        return uid
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise DistributedError(f"rank {rank} of {world} (nccl): rank 0 did not publish the "
                                   f"NCCL unique id in {path} within {timeout:g} s")
        time.sleep(0.01)
    saved = json.loads(path.read_text())
    ids = saved["id"]
    return bytes(ids) if saved["kind"] == "bytes" else tuple(ids)


class _Event(Work):
    def __init__(self, comm: NCCLCommunicator, what: str, result: ember.Tensor) -> None:
        self.comm, self.what, self.result = comm, what, result
        self.event = comm.cupy.cuda.Event(block=False, disable_timing=True)
        self.event.record(comm.cupy.cuda.get_current_stream())

    def wait(self) -> ember.Tensor:
        self.comm.wait(self.event, self.what)
        return self.result


class NCCLCommunicator(Communicator):
    """One GPU per process, exchanging device memory through NCCL.

    ``device`` is the ember device of this rank's tensors (``cuda:<local rank>`` by default).
    """

    engine = "nccl"

    def __init__(self, *, timeout: float | None = None, device: Any = None) -> None:
        try:
            import cupy  # noqa: TID251  # this plugin is the NCCL engine: a GPU plugin
            from cupy.cuda import nccl  # noqa: TID251  # (as above)
        except ImportError as e:
            raise DistributedError(f"the NCCL engine needs CuPy with NCCL: {e}") from e
        if not getattr(nccl, "available", True):
            raise DistributedError("CuPy was built without NCCL")
        rank, world = env_rank_world()
        super().__init__(rank, world, timeout)
        self.cupy, self.nccl = cupy, nccl
        self.device = ember.device(device if device is not None else f"cuda:{local_rank()}")
        base = self.device
        while base.inner is not None:
            base = base.inner
        self.index = base.index or 0
        cupy.cuda.Device(self.index).use()
        uid = exchange_unique_id(nccl, rank, world, self.timeout)
        self.nccl_comm = nccl.NcclCommunicator(world, uid, rank)

    # -- memory -----------------------------------------------------------------------------

    @staticmethod
    def _backend(t: ember.Tensor) -> Any:
        dev = t.device
        if dev.inner is not None:
            raise DistributedError(f"NCCL exchanges tensors of a GPU device, not of {dev}: "
                                   "pass gradients or values (grads[p], p.detach())")
        return dev.base.backend

    def _pointer(self, payload: Any) -> int:
        return int(payload.address())

    def _source(self, t: ember.Tensor) -> tuple[Any, int]:
        be = self._backend(t)
        payload = be.contiguous(t.payload)
        return payload, self._pointer(payload)

    def _output(self, like: ember.Tensor, shape: tuple[int, ...]) -> tuple[ember.Tensor, int]:
        be = self._backend(like)
        payload = be.memory.empty(shape, like.payload.dtype)
        out = like.device.tensor_type.from_payload(payload, like.device, like.dtype)
        return out, self._pointer(payload)

    def _nccl_dtype(self, t: ember.Tensor, reduce: bool) -> int:
        name = _TYPES.get(t.dtype.name)
        if name is None or not hasattr(self.nccl, name) or (reduce and t.dtype.name == "bool"):
            raise DistributedError(self.describe(f"NCCL cannot {'reduce' if reduce else 'move'} "
                                                 f"{t.dtype} tensors"))
        return int(getattr(self.nccl, name))

    @property
    def _stream(self) -> int:
        return int(self.cupy.cuda.get_current_stream().ptr)

    # -- waiting with a deadline ------------------------------------------------------------

    def wait(self, event: Any, what: str) -> None:
        """Poll ``event`` until the GPU passed it; abort NCCL and raise after ``timeout`` s."""
        start = time.monotonic()
        pause = 2e-5
        while not event.done:
            self.nccl_comm.check_async_error()
            if time.monotonic() - start > self.timeout:
                self.nccl_comm.abort()  # unblocks the kernels waiting for the dead peer
                raise DistributedError(self.describe(
                    f"{what} timed out after {self.timeout:g} s (EMBER_DIST_TIMEOUT): another "
                    "rank did not take part in it; it has probably died or hung"))
            time.sleep(pause)
            pause = min(pause * 2, 1e-3)

    # -- collectives ------------------------------------------------------------------------

    def all_reduce_async(self, tensor: ember.Tensor, op: ReduceOp = "sum") -> Work:
        op = self.check_op(op)
        n = tensor.numel()
        src, src_ptr = self._source(tensor)
        out, out_ptr = self._output(tensor, tuple(tensor.shape))
        nccl_op: Any = getattr(self.nccl, _OPS[op], None)
        scale = op == "mean" and nccl_op is None  # NCCL < 2.10 has no average: sum, divide
        if scale:
            nccl_op = self.nccl.NCCL_SUM
        self.nccl_comm.allReduce(src_ptr, out_ptr, n, self._nccl_dtype(tensor, True), int(nccl_op),
                                 self._stream)
        del src  # kept alive until the call was enqueued; CuPy's pool orders reuse on stream
        if scale:
            out = (out / self.world_size).to(tensor.dtype) if tensor.dtype.is_floating_point \
                else (out / self.world_size).trunc().to(tensor.dtype)
        return _Event(self, f"all_reduce({op}) of {n} {tensor.dtype} values", out)

    def broadcast(self, tensor: ember.Tensor, src: int = 0) -> ember.Tensor:
        n = tensor.numel()
        _, src_ptr = self._source(tensor)
        out, out_ptr = self._output(tensor, tuple(tensor.shape))
        self.nccl_comm.broadcast(src_ptr, out_ptr, n, self._nccl_dtype(tensor, False), src,
                                 self._stream)
        return _Event(self, f"broadcast of {n} {tensor.dtype} values from rank {src}",
                      out).wait()

    def all_gather(self, tensor: ember.Tensor) -> ember.Tensor:
        n = tensor.numel()
        _, src_ptr = self._source(tensor)
        out, out_ptr = self._output(tensor, (self.world_size, *tensor.shape))
        self.nccl_comm.allGather(src_ptr, out_ptr, n, self._nccl_dtype(tensor, False), self._stream)
        return _Event(self, f"all_gather of {n} {tensor.dtype} values", out).wait()

    def reduce_scatter(self, tensor: ember.Tensor, op: ReduceOp = "sum") -> ember.Tensor:
        op = self.check_op(op)
        self.check_scatter(tensor)
        rows = tensor.shape[0] // self.world_size
        shape = (rows, *tensor.shape[1:])
        count = tensor.numel() // self.world_size
        _, src_ptr = self._source(tensor)
        out, out_ptr = self._output(tensor, shape)
        nccl_op: Any = getattr(self.nccl, _OPS[op], None)
        scale = op == "mean" and nccl_op is None
        if scale:
            nccl_op = self.nccl.NCCL_SUM
        self.nccl_comm.reduceScatter(src_ptr, out_ptr, count, self._nccl_dtype(tensor, True),
                                     int(nccl_op), self._stream)
        if scale:
            out = (out / self.world_size).to(tensor.dtype) if tensor.dtype.is_floating_point \
                else (out / self.world_size).trunc().to(tensor.dtype)
        return _Event(self, f"reduce_scatter({op}) of {count} {tensor.dtype} values",
                      out).wait()

    def barrier(self) -> None:
        # NCCL has no barrier: an all-reduce of one value, waited for, is one
        one = ember.zeros(1, device=self.device if self.device.inner is None
                          else self.device.base)
        self.all_reduce_async(one, "sum").wait()

    def abort(self, code: int = 1) -> None:
        self.nccl_comm.abort()
        os._exit(code)

    def close(self) -> None:
        self.nccl_comm.destroy()
