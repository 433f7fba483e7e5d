"""Splitting one kernel's work over threads: the caller and helpers take numbered chunks.

A convolution of a batch-1 model is a few milliseconds of GEMMs and compiled loops, all of
which release the GIL (cblas through ctypes, numba ``nogil``).  Split into more chunks than
threads and handed out one at a time, the work goes to whichever thread is running: when
another process holds a core, the caller takes nearly every chunk itself and waits at most for
the one chunk a descheduled helper holds, where a static split (OpenBLAS's own threads) waits
for half the work.  Between jobs a helper waits awake for up to `SPIN_US` (`_spin`: a
compiled loop without the GIL, on a counter `run` bumps), then sleeps on a queue; the caller,
once its own chunks are done, waits for the helpers' last one the same way.  A sleeping
helper started 25 us late in half the layers of a ResNet-18 on the development VM and over
100 us late in one in ten, and the caller waited that long.

The thread count follows the BLAS's (``threadpoolctl``, ``OPENBLAS_NUM_THREADS``): one thread
there means no helpers here, and the chunks run in order on the caller's thread.  A chunk run
by a helper must not itself call `run` (helpers do not nest).
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
import time
from collections.abc import Callable

import numpy as np

from . import _blas, _spin

__all__ = ["gemm", "idle_cores", "run", "split", "threads"]


class _Job:
    __slots__ = ("chunks", "done", "error", "finished", "fn", "lock", "next", "over")

    def __init__(self, fn: Callable[[int], object], chunks: int) -> None:
        self.fn, self.chunks = fn, chunks
        self.next = itertools.count()  # next() is atomic under the GIL
        self.done = 0
        self.lock = threading.Lock()
        self.finished = threading.Event()
        self.over = np.zeros(1, np.int64)  # 1 once every chunk is done (read without the GIL)
        self.error: BaseException | None = None

    def work(self) -> None:
        while True:
            i = next(self.next)
            if i >= self.chunks:
                return
            try:
                if self.error is None:
                    self.fn(i)
            except BaseException as e:  # re-raised by the caller
                self.error = e
            with self.lock:
                self.done += 1
                if self.done == self.chunks:
                    self.over[0] = 1
                    self.finished.set()


_jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
_helpers: list[threading.Thread] = []
_start = threading.Lock()
_local = threading.local()


def _forget_helpers() -> None:
    """In a forked child: the parent's helpers did not come along; start new ones if needed."""
    global _jobs, _start
    _jobs, _start = queue.SimpleQueue(), threading.Lock()
    _helpers.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_helpers)


def _helper(jobs: queue.SimpleQueue[_Job]) -> None:
    _local.helper = True
    try:
        _spin.spin(0, 0)  # compiled here, not when the first job waits
        spinning = True
    except Exception:  # no compiler for the wait (numba, llvmlite): sleep at once
        spinning = False
    while True:
        seen = int(_spin.posted[0])
        try:
            job = jobs.get_nowait()
        except queue.Empty:
            # the next layer's job comes within tens of microseconds: wait for it awake
            if spinning and SPIN_US > 0 and _spin.spin(seen, SPIN_US):
                continue
            job = jobs.get()
        job.work()


class _Idle:
    """How many cores other processes left idle lately, from ``/proc/stat`` and this process's
    own CPU time, sampled at most every `_SAMPLE` seconds (reading costs ~30 us)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.at = -1.0
        self.busy = self.total = self.own = 0.0
        self.free = float(_CPUS)
        self.tick = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0

    def cores(self) -> float:
        now = time.monotonic()
        if now - self.at < _SAMPLE:
            return self.free
        with self.lock:
            try:
                with open("/proc/stat", "rb") as f:
                    fields = [float(v) for v in f.readline().split()[1:]]
            except (OSError, ValueError):  # not Linux: take every core as free
                self.at = now + 1e9
                return self.free
            t = os.times()
            own = (t.user + t.system) * self.tick
            total = sum(fields[:8])  # user nice system idle iowait irq softirq steal
            busy = total - fields[3] - fields[4]
            if self.at >= 0 and total > self.total:
                ncpu = _CPUS
                others = max(busy - self.busy - (own - self.own), 0.0) / (total - self.total)
                self.free = ncpu * (1.0 - others)
            self.at, self.busy, self.total, self.own = now, busy, total, own
            return self.free


_CPUS = os.cpu_count() or 1  # os.cpu_count() costs ~1.6 us a call

#: how long a helper waits awake for the next job before it sleeps (microseconds): longer
#: than the gaps between a network's layers (Python, serial parts: tens of microseconds, at
#: most ~0.3 ms on the development VM), short enough that a helper left spinning after the
#: last layer costs other processes little
SPIN_US = 1000.0

#: seconds between two samples of the idle cores
_SAMPLE = 0.1
_idle = _Idle()


def threads() -> int:
    """How many threads `run` uses now: the BLAS's thread count (the process's setting), at
    most the cores other processes left idle over the last ~0.1 s (rounded): with the cores
    taken, a helper only takes turns with the caller."""
    limit = min(_blas.blas_threads(), _CPUS)
    if limit <= 1:
        return 1
    return max(1, min(limit, round(_idle.cores())))


def idle_cores() -> float:
    """How many cores other processes left idle over the last ~0.1 s (see `threads`)."""
    return _idle.cores()


def run(fn: Callable[[int], object], chunks: int, workers: int | None = None) -> None:
    """``fn(i)`` for ``i`` in ``range(chunks)``, on this thread and up to ``workers - 1``
    helpers (default `threads`), each taking the next chunk when it is free; returns when all
    are done, raising the first error one raised."""
    workers = threads() if workers is None else workers
    workers = min(workers, chunks)
    if workers <= 1 or getattr(_local, "helper", False):
        for i in range(chunks):
            fn(i)
        return
    with _start:
        while len(_helpers) < workers - 1:
            t = threading.Thread(target=_helper, args=(_jobs,), name="ember-cpu-worker",
                                 daemon=True)
            t.start()
            _helpers.append(t)
    job = _Job(fn, chunks)
    for _ in range(workers - 1):
        _jobs.put(job)
    _spin.posted[0] += 1  # after the put: a helper that sees it finds the job queued
    job.work()
    if not job.finished.is_set() and SPIN_US > 0:
        _spin.spin_on(job.over, 0, SPIN_US)  # awake, without the GIL, for the last chunk
    job.finished.wait()
    if job.error is not None:
        raise job.error


def split(total: int, workers: int, per_worker: int = 2) -> int:
    """A chunk length that cuts ``total`` into about ``per_worker`` chunks per worker."""
    return max(1, -(-total // (per_worker * workers))) if workers > 1 else max(total, 1)


def gemm(a: np.ndarray, b: np.ndarray, out: np.ndarray, workers: int,
         accumulate: bool = False) -> None:
    """``out = a @ b`` (``+=`` when ``accumulate``) for 2-D row-major views, cut along the
    longer of ``out``'s sides into chunks for ``workers`` threads, each GEMM on one BLAS
    thread (call it inside ``_blas.one_thread(0)``)."""
    m, n = out.shape
    cblas = _blas.has_gemm(out.dtype)

    def one(aa: np.ndarray, bb: np.ndarray, oo: np.ndarray) -> None:
        if cblas:
            _blas.gemm(aa, bb, oo, accumulate)
        elif accumulate:
            oo += aa @ bb
        else:
            np.matmul(aa, bb, out=oo)

    if workers <= 1:
        one(a, b, out)
        return
    # one chunk a thread: every chunk packs the whole of the other operand again, and two
    # chunks a thread made ResNet's GEMMs 10-20% slower on two idle cores than one did
    if m >= n:
        step = split(m, workers, 1)
        run(lambda i: one(a[i * step:(i + 1) * step], b, out[i * step:(i + 1) * step]),
            -(-m // step), workers)
    else:
        step = split(n, workers, 1)
        run(lambda i: one(a, b[:, i * step:(i + 1) * step], out[:, i * step:(i + 1) * step]),
            -(-n // step), workers)
