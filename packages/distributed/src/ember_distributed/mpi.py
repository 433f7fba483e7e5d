"""The MPI engine (mpi4py): collectives on host buffers, for CPU and OpenCL devices.

Every collective is non-blocking underneath (``Iallreduce``, ``Ibcast``, ...) and waited for
by polling with a deadline, so a rank that dies or hangs makes the others raise
`DistributedError` after ``timeout`` seconds instead of blocking forever.  An uncaught error
on any rank calls ``MPI_Abort``, which makes ``mpirun`` stop the whole job.
"""

from __future__ import annotations

import signal
import sys
import time
from types import FrameType, TracebackType
from typing import Any

import numpy as np

import ember
from ember.distributed import Communicator, DistributedError, ReduceOp, Work

from ._host import from_host, mean_in_place, reduce_dtype, to_host

__all__ = ["MPICommunicator"]

_EXCEPTHOOK_INSTALLED = False


def _mpi() -> Any:
    try:
        from mpi4py import MPI
    except ImportError as e:  # mpi4py installed, but no MPI library it can load
        raise DistributedError(f"the MPI engine needs mpi4py and an MPI library (Debian: "
                               f"apt-get install openmpi-bin libopenmpi-dev): {e}") from e
    return MPI


class _Request(Work):
    def __init__(self, comm: MPICommunicator, what: str, request: Any,
                 finish: Any) -> None:
        self.comm, self.what, self.request, self.finish = comm, what, request, finish
        self.result: ember.Tensor | None = None

    def wait(self) -> ember.Tensor:
        if self.result is None:
            self.comm.wait(self.request, self.what)
            self.result = self.finish()
        return self.result


class MPICommunicator(Communicator):
    """All ranks of ``MPI_COMM_WORLD`` (or of ``comm``), exchanging host copies of tensors.

    Tensors of any device work: they are copied to the host, exchanged, and copied back to
    their device (OpenCL tensors stage through host memory this way).
    """

    engine = "mpi"

    def __init__(self, comm: Any = None, *, timeout: float | None = None,
                 device: Any = None) -> None:
        MPI = _mpi()
        self.MPI = MPI
        self.mpi_comm = MPI.COMM_WORLD if comm is None else comm
        super().__init__(self.mpi_comm.Get_rank(), self.mpi_comm.Get_size(), timeout)
        self._waiting: str | None = None
        self._ops = {"sum": MPI.SUM, "mean": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}
        if self.world_size > 1:
            _install_abort_on_error(self)
            _install_teardown_handler(self)

    # -- waiting with a deadline ------------------------------------------------------------

    def wait(self, request: Any, what: str) -> None:
        """Poll ``request`` until it completes; `DistributedError` after ``timeout`` s."""
        self._waiting = what
        try:
            if request.Test():
                return
            start = time.monotonic()
            deadline = start + self.timeout
            pause = 2e-5
            while not request.Test():
                now = time.monotonic()
                if now > deadline:
                    raise DistributedError(self.describe(
                        f"{what} timed out after {now - start:.1f} s (EMBER_DIST_TIMEOUT="
                        f"{self.timeout:g}): another rank did not take part in it; it has "
                        "probably died or hung"))
                # Poll often at first (small messages finish in microseconds), then back off
                # to 1 ms so a long wait does not take a core from the rank it waits for.
                time.sleep(pause)
                pause = min(pause * 2, 1e-3)
        finally:
            self._waiting = None

    # -- collectives ------------------------------------------------------------------------

    def all_reduce_async(self, tensor: ember.Tensor, op: ReduceOp = "sum") -> Work:
        op = self.check_op(op)
        buf = reduce_dtype(to_host(tensor))
        what = f"all_reduce({op}) of {buf.size} {buf.dtype} values"
        request = self.mpi_comm.Iallreduce(self.MPI.IN_PLACE, buf, self._ops[op])

        def finish() -> ember.Tensor:
            out = mean_in_place(buf, self.world_size) if op == "mean" else buf
            return from_host(out, tensor)

        return _Request(self, what, request, finish)

    def broadcast(self, tensor: ember.Tensor, src: int = 0) -> ember.Tensor:
        self._check_rank(src, "broadcast")
        buf = to_host(tensor)
        raw = buf.view(np.uint8) if buf.dtype not in _MPI_SAFE else buf
        self.wait(self.mpi_comm.Ibcast(raw, root=src),
                  f"broadcast of {buf.size} {buf.dtype} values from rank {src}")
        return from_host(buf, tensor)

    def all_gather(self, tensor: ember.Tensor) -> ember.Tensor:
        buf = to_host(tensor)
        out = np.empty((self.world_size, *buf.shape), dtype=buf.dtype)
        send, recv = ((buf.view(np.uint8), out.view(np.uint8)) if buf.dtype not in _MPI_SAFE
                      else (buf, out))
        self.wait(self.mpi_comm.Iallgather(send, recv),
                  f"all_gather of {buf.size} {buf.dtype} values")
        return from_host(out, tensor)

    def reduce_scatter(self, tensor: ember.Tensor, op: ReduceOp = "sum") -> ember.Tensor:
        op = self.check_op(op)
        self.check_scatter(tensor)
        buf = reduce_dtype(to_host(tensor))
        out = np.empty((buf.shape[0] // self.world_size, *buf.shape[1:]), dtype=buf.dtype)
        self.wait(self.mpi_comm.Ireduce_scatter_block(buf, out, self._ops[op]),
                  f"reduce_scatter({op}) of {buf.size} {buf.dtype} values")
        if op == "mean":
            out = mean_in_place(out, self.world_size)
        return from_host(out, tensor)

    def barrier(self) -> None:
        self.wait(self.mpi_comm.Ibarrier(), "barrier")

    def abort(self, code: int = 1) -> None:
        self.mpi_comm.Abort(code)

    def _check_rank(self, r: int, what: str) -> None:
        if not 0 <= r < self.world_size:
            raise DistributedError(self.describe(f"{what} from rank {r}, which is not a rank "
                                                 f"of {self.world_size}"))


# dtypes whose buffers mpi4py maps to MPI datatypes; others travel as bytes
_MPI_SAFE = {np.dtype(t) for t in (np.float32, np.float64, np.int8, np.int16, np.int32,
                                    np.int64, np.uint8, np.bool_)}


def _install_abort_on_error(comm: MPICommunicator) -> None:
    """An uncaught exception on one rank prints its traceback, then aborts the whole job
    (otherwise the other ranks would wait for this one until their timeout)."""
    global _EXCEPTHOOK_INSTALLED
    if _EXCEPTHOOK_INSTALLED:
        return
    _EXCEPTHOOK_INSTALLED = True
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException,
             tb: TracebackType | None) -> None:
        previous(kind, value, tb)
        if not issubclass(kind, (KeyboardInterrupt, SystemExit)):
            sys.stderr.flush()
            comm.abort(1)

    sys.excepthook = hook


def _install_teardown_handler(comm: MPICommunicator) -> None:
    """When the launcher stops the job (``mpirun`` sends SIGTERM to the survivors once one
    rank died) while this rank waits in a collective, say so before being killed."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return  # the program handles SIGTERM itself

    def during_collective(signum: int) -> None:
        what = comm._waiting
        if what is not None:
            raise DistributedError(comm.describe(
                f"stopped by the launcher ({signal.Signals(signum).name}) while waiting in "
                f"{what}: another rank has failed; see the launcher's report"))

    def handler(signum: int, frame: FrameType | None) -> None:
        during_collective(signum)
        raise SystemExit(128 + signum)

    # ember_train's StopRequest replaces this handler during fit and calls ``ember_chain``
    # first, so a SIGTERM inside a collective still ends in this error
    handler.ember_chain = during_collective  # type: ignore[attr-defined]  # a marker
    signal.signal(signal.SIGTERM, handler)
