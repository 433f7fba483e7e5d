"""How many BLAS threads the GEMMs of convolutions and ``linear`` run on.

OpenBLAS splits every GEMM over all its threads.  A GEMM of a batch-1 convolution (ResNet-18's
largest is 0.23 GFLOP, ~2 ms of one core) gains little from that and can lose a lot: the
workers sleep between calls and must be woken, and when another process holds a core, the
thread that finished its half spins until the descheduled one gets a time slice.  On the 2-core
development VM (2026-12-06, one other job running) ResNet-18 took 56 ms at one BLAS thread and
170-360 ms at two; and workers still spinning after one multi-threaded GEMM (the classifier's
matrix-vector product) slowed the single-threaded kernels after it two-fold.  So a GEMM below
`SMALL_GEMM_FLOPS` runs on one thread; larger ones (and plain ``matmul``) keep the thread
count the process set (``threadpoolctl``, ``OPENBLAS_NUM_THREADS``), which also caps this: at
one thread nothing changes.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np

__all__ = ["SMALL_GEMM_FLOPS", "matmul"]

#: GEMMs of fewer floating-point operations (2*M*N*K) than this run on one BLAS thread
SMALL_GEMM_FLOPS = 1 << 30


@functools.cache
def _numpy_blas() -> list[Any]:
    """threadpoolctl's handles on the BLAS libraries numpy is linked with (found once)."""
    try:
        from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]  # no stubs
    except ImportError:  # pragma: no cover - threadpoolctl is a dependency
        return []
    return [c for c in ThreadpoolController().lib_controllers if c.user_api == "blas"]


_lock = threading.Lock()
_inside = 0  # calls between their set and their restore (threads may overlap)
_saved: list[int] = []


def matmul(a: np.ndarray, b: np.ndarray, flops: int, out: np.ndarray | None = None
           ) -> np.ndarray:
    """``np.matmul(a, b)`` on one BLAS thread when ``flops`` is below `SMALL_GEMM_FLOPS`."""
    global _inside, _saved
    libs = _numpy_blas() if flops < SMALL_GEMM_FLOPS else []
    if not libs:
        return np.matmul(a, b, out=out)
    with _lock:  # the first call in sets one thread, the last one out restores the count
        if _inside == 0:
            _saved = [lib.get_num_threads() for lib in libs]
            for lib, n in zip(libs, _saved, strict=True):
                if n > 1:
                    lib.set_num_threads(1)
        _inside += 1
    try:
        return np.matmul(a, b, out=out)
    finally:
        with _lock:
            _inside -= 1
            if _inside == 0:
                for lib, n in zip(libs, _saved, strict=True):
                    if n > 1:
                        lib.set_num_threads(n)
