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

import contextlib
import ctypes
import functools
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["SMALL_GEMM_FLOPS", "blas_threads", "gemm", "has_gemm", "matmul", "one_thread"]

#: GEMMs of fewer floating-point operations (2*M*N*K) than this run on one BLAS thread
SMALL_GEMM_FLOPS = 1 << 30
#: GEMMs OpenBLAS runs on one thread by itself (M*N*K below 65,536 x its default
#: GEMM_MULTITHREAD_THRESHOLD of 4): `matmul` calls numpy directly for these, as setting
#: and restoring the thread count costs more than an 8x8 product (~4 us against ~1)
BLAS_ONE_THREAD_FLOPS = 2 * 65536 * 4


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


@contextlib.contextmanager
def one_thread(flops: int) -> Iterator[None]:
    """BLAS calls inside run on one thread when ``flops`` is below `SMALL_GEMM_FLOPS`."""
    global _inside, _saved
    libs = _numpy_blas() if flops < SMALL_GEMM_FLOPS else []
    if not libs:
        yield
        return
    with _lock:  # the first call in sets one thread, the last one out restores the count
        if _inside == 0:
            _saved = [lib.get_num_threads() for lib in libs]
            for lib, n in zip(libs, _saved, strict=True):
                if n > 1:
                    lib.set_num_threads(1)
        _inside += 1
    try:
        yield
    finally:
        with _lock:
            _inside -= 1
            if _inside == 0:
                for lib, n in zip(libs, _saved, strict=True):
                    if n > 1:
                        lib.set_num_threads(n)


@functools.cache
def _thread_counts() -> list[Any]:
    """Per BLAS library, a call that returns its thread count: OpenBLAS's own
    ``openblas_get_num_threads`` through ctypes (~0.3 us) where it is found, else
    threadpoolctl's (~4 us)."""
    getters: list[Any] = []
    for lib in _numpy_blas():
        fn = None
        if getattr(lib, "internal_api", "") == "openblas":
            try:
                dll = ctypes.CDLL(lib.filepath)
            except OSError:
                dll = None
            for prefix in ("scipy_", ""):
                for suffix in ("64_", "", "_64"):
                    fn = fn or getattr(dll, f"{prefix}openblas_get_num_threads{suffix}", None)
        if fn is not None:
            fn.argtypes, fn.restype = [], ctypes.c_int
        getters.append(fn if fn is not None else lib.get_num_threads)
    return getters


def blas_threads() -> int:
    """The BLAS thread count the process set (not the one `one_thread` sets meanwhile)."""
    getters = _thread_counts()
    if not getters:
        return 1
    if _inside:
        with _lock:
            if _inside:
                return max(_saved, default=1)
    return max((int(g() or 1) for g in getters), default=1)


def matmul(a: np.ndarray, b: np.ndarray, flops: int, out: np.ndarray | None = None
           ) -> np.ndarray:
    """``np.matmul(a, b)`` on one BLAS thread when ``flops`` is below `SMALL_GEMM_FLOPS`."""
    if flops < BLAS_ONE_THREAD_FLOPS:  # one thread already: no thread count to set
        return np.matmul(a, b, out=out)
    with one_thread(flops):
        return np.matmul(a, b, out=out)


# -- cblas_?gemm itself: strided operands and accumulation, which np.matmul does not offer --

_ROW_MAJOR, _NO_TRANS = 101, 111
#: the names OpenBLAS builds export cblas_?gemm under, with their integer type (numpy's wheels
#: bundle scipy-openblas: ``scipy_`` prefix, ``64_`` suffix for 64-bit integers)
_NAMES = (("scipy_", "64_", ctypes.c_int64), ("", "64_", ctypes.c_int64),
          ("scipy_", "", ctypes.c_int))


@functools.cache
def _cblas() -> dict[np.dtype[Any], Any]:
    """``cblas_sgemm`` / ``cblas_dgemm`` of the BLAS numpy is linked with, by dtype, where it
    exports them under a name whose integer width is known; empty otherwise."""
    found: dict[np.dtype[Any], Any] = {}
    for lib in _numpy_blas():
        if getattr(lib, "internal_api", "") != "openblas":
            continue
        try:
            dll = ctypes.CDLL(lib.filepath)
        except OSError:
            continue
        for prefix, suffix, integer in _NAMES:
            for char, real, dt in (("s", ctypes.c_float, np.float32),
                                   ("d", ctypes.c_double, np.float64)):
                fn = getattr(dll, f"{prefix}cblas_{char}gemm{suffix}", None)
                if fn is None or np.dtype(dt) in found:
                    continue
                fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, integer, integer,
                               integer, real, ctypes.c_void_p, integer, ctypes.c_void_p,
                               integer, real, ctypes.c_void_p, integer]
                fn.restype = None
                found[np.dtype(dt)] = fn
        if found:
            break
    return found


def has_gemm(dtype: np.dtype[Any]) -> bool:
    """Whether `gemm` can run on ``dtype`` (float32 / float64 with OpenBLAS's cblas found)."""
    return dtype in _cblas()


def _ld(a: np.ndarray) -> int:
    """The leading dimension of a 2-D view whose rows are strided and elements adjacent."""
    item = a.itemsize
    if a.ndim != 2 or a.strides[1] != item or a.strides[0] % item or \
            a.strides[0] < a.shape[1] * item:
        raise ValueError(f"gemm: an operand of shape {a.shape} and strides {a.strides} is not "
                         f"a row-major matrix view")
    return a.strides[0] // item


def gemm(a: np.ndarray, b: np.ndarray, out: np.ndarray, accumulate: bool) -> None:
    """``out = a @ b`` (``out += a @ b`` when ``accumulate``) by cblas, on 2-D views whose
    rows may lie anywhere apart (``b`` may be a window of a larger buffer: no copy); call it
    inside `one_thread`.  All three share a dtype `has_gemm` accepts; ``out`` is written."""
    (m, k), (k2, n) = a.shape, b.shape
    if k2 != k or out.shape != (m, n) or not (a.dtype == b.dtype == out.dtype):
        raise ValueError(f"gemm: {a.shape} @ {b.shape} into {out.shape}")
    if not out.flags.writeable:
        raise ValueError("gemm: out is read-only")
    _cblas()[out.dtype](_ROW_MAJOR, _NO_TRANS, _NO_TRANS, m, n, k, 1.0, a.ctypes.data, _ld(a),
                        b.ctypes.data, _ld(b), 1.0 if accumulate else 0.0, out.ctypes.data,
                        _ld(out))
