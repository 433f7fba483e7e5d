"""cuBLASLt through ctypes: matmul's cuBLAS candidates, each of cuBLASLt's own algorithms.

cuBLAS's classic ``gemmEx`` (what CuPy calls, and PyTorch by default) asks cuBLASLt's
heuristic for one algorithm and runs it.  Here the heuristic's first ``COUNT`` algorithms for a
problem are kernel-selection candidates of their own, timed beside ember's Triton configs, so a
shape runs on whichever of them is fastest on this GPU.  The descriptors of a problem are made
once (`LtGemm`) and a recurring call is one ``cublasLtMatmul``; a bias rides in cuBLASLt's
epilogue (``CUBLASLT_EPILOGUE_BIAS``) instead of costing a kernel of its own.

CuPy has no binding for cuBLASLt, so the library CuPy's cuBLAS already loaded
(``libcublasLt.so.<major>``) is called through ctypes.  Row-major ``C[m, n] = A[m, k] @ B[k, n]``
is cuBLASLt's column-major ``C^T[n, m] = B^T[n, k] @ A^T[k, m]``: ember's B is cuBLASLt's
first operand (`lt_layouts`).

The algorithms are told the alignment of the operands' addresses (256 bytes, cuBLASLt's
default, or 16); a problem whose operands are less aligned is no candidate.  Every stream gets
one workspace of ``WORKSPACE`` bytes (the backend's per-stream scratch buffer), as PyTorch does
on Hopper.
"""

from __future__ import annotations

import ctypes
import functools
import sys
import threading
from typing import Any

from .cublas import (
    _COMPUTE_32F,
    _COMPUTE_32F_FAST_TF32,
    _COMPUTE_64F,
    _CUDA_R,
    _ONE_AT,
    _OP_N,
    _ZERO_AT,
)

__all__ = ["COUNT", "WORKSPACE", "LtGemm", "alignment", "available", "lt_layouts", "version"]

#: algorithms asked of the heuristic per problem (each a kernel-selection candidate); on the
#: H200 it offers at most eight for the acceptance problems even when asked for sixteen, and the
#: seventh was the fastest for 8192³ fp16 (``EMBER_LT_ALGOS=16 benchmarks/gpu/cublaslt_algos.py``)
COUNT = 8
#: bytes of workspace the algorithms may use (cuBLAS's recommendation for Hopper)
WORKSPACE = 32 << 20

# enum values of cublasLt.h (stable parts of the ABI; data and compute types as `cublas`)
_DESC_TRANSA, _DESC_TRANSB, _DESC_EPILOGUE, _DESC_BIAS_POINTER = 3, 4, 7, 8
_EPILOGUE_BIAS = 4
_LAYOUT_BATCH_COUNT, _LAYOUT_BATCH_OFFSET = 5, 6
_PREF_MAX_WORKSPACE = 1
_PREF_ALIGN = (5, 6, 7, 8)  # MIN_ALIGNMENT_{A,B,C,D}_BYTES
_RESULT_BYTES = 96  # cublasLtMatmulHeuristicResult_t: algo (64), workspace (8), state, waves, 4 int

_LOCK = threading.Lock()
_STATE: dict[str, Any] = {}
_HANDLES: dict[int, ctypes.c_void_p] = {}


class LtError(RuntimeError):
    """A cuBLASLt call returned an error status."""


def _library() -> Any:
    """The cuBLASLt library of CuPy's cuBLAS, with argument types declared (or ``None``)."""
    with _LOCK:
        if "lib" in _STATE:
            return _STATE["lib"]
        lib = None
        try:
            from cupy.cuda import cublas, device

            # CuPy's cuBLAS loads libcublas, and with it the libcublasLt of its major version
            major = cublas.getVersion(device.get_cublas_handle()) // 10000
            names = [f"libcublasLt.so.{major}", "libcublasLt.so"]
        except Exception:
            names = []
        for name in names:
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        if lib is not None:
            _declare(lib)
        _STATE["lib"] = lib
        return lib


def _declare(lib: Any) -> None:
    p, i, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    sigs: dict[str, list[Any]] = {
        "cublasLtCreate": [p],
        "cublasLtMatmulDescCreate": [p, i, i],
        "cublasLtMatmulDescSetAttribute": [p, i, p, sz],
        "cublasLtMatmulDescDestroy": [p],
        "cublasLtMatrixLayoutCreate": [p, i, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64],
        "cublasLtMatrixLayoutSetAttribute": [p, i, p, sz],
        "cublasLtMatrixLayoutDestroy": [p],
        "cublasLtMatmulPreferenceCreate": [p],
        "cublasLtMatmulPreferenceSetAttribute": [p, i, p, sz],
        "cublasLtMatmulPreferenceDestroy": [p],
        "cublasLtMatmulAlgoGetHeuristic": [p, p, p, p, p, p, p, i, p, p],
        "cublasLtMatmul": [p, p, p, p, p, p, p, p, p, p, p, p, p, p, sz, p],
    }
    for name, argtypes in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int
    lib.cublasLtGetVersion.argtypes = []
    lib.cublasLtGetVersion.restype = ctypes.c_size_t


def available() -> bool:
    """Whether cuBLASLt can be called in this process."""
    return _library() is not None


def version() -> int:
    """cuBLASLt's version number (``130100`` for 13.1.0); 0 where it is not available."""
    lib = _library()
    return int(lib.cublasLtGetVersion()) if lib is not None else 0


def _check(status: int, what: str) -> None:
    if status:
        raise LtError(f"cuBLASLt {what} failed with status {status}")


def _handle(lib: Any, device: int) -> ctypes.c_void_p:
    h = _HANDLES.get(device)
    if h is None:
        h = ctypes.c_void_p()
        _check(lib.cublasLtCreate(ctypes.byref(h)), "cublasLtCreate")
        _HANDLES[device] = h
    return h


def alignment(*addresses: int) -> int:
    """The alignment cuBLASLt's algorithms may assume of all ``addresses``: 256 or 16 bytes,
    or 0 where one is not 16-byte aligned."""
    bits = 0
    for a in addresses:
        bits |= a
    return 256 if not bits & 255 else (16 if not bits & 15 else 0)


def lt_layouts(m: int, n: int, k: int, a_layout: tuple[int, int], b_layout: tuple[int, int],
               ) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int],
                          tuple[int, int, int]]:
    """cuBLASLt's view of row-major ``C[m, n] = A @ B`` with ember's operand layouts
    (``(op, leading dimension)`` from `ember_cuda.cublas.gemm_layout`):
    ``((transa, rows, cols, ld) of its A = our B, the same of its B = our A, (rows, cols, ld)
    of C)``, all column-major."""
    op_a, lda = a_layout
    op_b, ldb = b_layout
    first = (op_b, *((n, k) if op_b == _OP_N else (k, n)), ldb)
    second = (op_a, *((k, m) if op_a == _OP_N else (m, k)), lda)
    return first, second, (n, m, n)


class LtGemm:
    """One matmul problem's cuBLASLt descriptors and the algorithms its heuristic offers.

    ``algos`` lists them best-first as the heuristic ranks them; `run` launches one of them on
    the given addresses (``bias`` only where the problem was made with one).
    """

    def __init__(self, device: int, m: int, n: int, k: int, batch: int,
                 a_layout: tuple[int, int], b_layout: tuple[int, int], sa_batch: int,
                 sb_batch: int, dtype: str, precision: str, bias: bool, align: int) -> None:
        lib = _library()
        if lib is None:
            raise LtError("cuBLASLt is not available in this process")
        self._lib = lib
        self._handle = _handle(lib, device)
        cuda_type = _CUDA_R[dtype]
        if dtype == "float64":
            compute, scale, self._scal = _COMPUTE_64F, _CUDA_R["float64"], "f8"
        else:
            compute = _COMPUTE_32F_FAST_TF32 if dtype == "float32" and precision == "tf32" \
                else _COMPUTE_32F
            scale, self._scal = _CUDA_R["float32"], "f4"
        self._objects: list[tuple[Any, ctypes.c_void_p]] = []
        self._desc = self._make("cublasLtMatmulDescCreate", lib.cublasLtMatmulDescDestroy,
                                compute, scale)
        first, second, c = lt_layouts(m, n, k, a_layout, b_layout)
        self._set_desc(_DESC_TRANSA, ctypes.c_int32(first[0]))
        self._set_desc(_DESC_TRANSB, ctypes.c_int32(second[0]))
        self.bias = bias
        self._bias_at = ctypes.c_uint64(0)
        if bias:
            self._set_desc(_DESC_EPILOGUE, ctypes.c_uint32(_EPILOGUE_BIAS))
        layouts = []
        for (rows, cols, ld), stride in ((first[1:], sb_batch), (second[1:], sa_batch),
                                         (c, m * n)):
            layout = self._make("cublasLtMatrixLayoutCreate", lib.cublasLtMatrixLayoutDestroy,
                                cuda_type, rows, cols, ld)
            if batch > 1:
                for attr, value in ((_LAYOUT_BATCH_COUNT, ctypes.c_int32(batch)),
                                    (_LAYOUT_BATCH_OFFSET, ctypes.c_int64(stride))):
                    _check(lib.cublasLtMatrixLayoutSetAttribute(
                        layout, attr, ctypes.byref(value), ctypes.sizeof(value)),
                        "cublasLtMatrixLayoutSetAttribute")
            layouts.append(layout)
        self._a, self._b, self._c = layouts
        #: the operands' alignment the algorithms assume, and the library's version
        self.align, self.version = align, version()
        self.algos = self._heuristic(align)
        self._compiled: dict[int, Any] = {}  # `compiled_run`'s calls by algorithm

    def _make(self, create: str, destroy: Any, *args: Any) -> ctypes.c_void_p:
        obj = ctypes.c_void_p()
        _check(getattr(self._lib, create)(ctypes.byref(obj), *args), create)
        self._objects.append((destroy, obj))
        return obj

    def _set_desc(self, attr: int, value: Any) -> None:
        _check(self._lib.cublasLtMatmulDescSetAttribute(self._desc, attr, ctypes.byref(value),
                                                        ctypes.sizeof(value)),
               "cublasLtMatmulDescSetAttribute")

    def _heuristic(self, align: int) -> list[Any]:
        lib = self._lib
        pref = self._make("cublasLtMatmulPreferenceCreate", lib.cublasLtMatmulPreferenceDestroy)
        values: list[tuple[int, ctypes.c_uint64 | ctypes.c_uint32]] = [
            (_PREF_MAX_WORKSPACE, ctypes.c_uint64(WORKSPACE))]
        values += [(attr, ctypes.c_uint32(align)) for attr in _PREF_ALIGN]
        for attr, value in values:
            _check(lib.cublasLtMatmulPreferenceSetAttribute(pref, attr, ctypes.byref(value),
                                                            ctypes.sizeof(value)),
                   "cublasLtMatmulPreferenceSetAttribute")
        results = (ctypes.c_ubyte * (_RESULT_BYTES * COUNT))()
        found = ctypes.c_int(0)
        status = lib.cublasLtMatmulAlgoGetHeuristic(
            self._handle, self._desc, self._a, self._b, self._c, self._c, pref, COUNT,
            results, ctypes.byref(found))
        if status:  # CUBLAS_STATUS_NOT_SUPPORTED: no algorithm for this problem
            return []
        algos = []
        raw = bytes(results)
        for i in range(found.value):
            entry = raw[i * _RESULT_BYTES:(i + 1) * _RESULT_BYTES]
            state = int.from_bytes(entry[72:76], "little", signed=True)
            if state == 0:
                algos.append((ctypes.c_uint64 * 8).from_buffer_copy(entry[:64]))
        return algos

    def compiled_run(self, index: int) -> Any:
        """``run(index, ...)`` for a problem without bias as one call of the compiled
        launcher's extension (`ember_cuda.claunch`): ``call(c, a, b, stream, workspace)``
        returning cuBLASLt's status, about 15 `ctypes` conversions fewer a matmul; ``None``
        where the extension cannot be built or ``EMBER_C_LAUNCH=0`` (the caller keeps
        `run`).  Made once per algorithm: selection builds a launch for every timed call."""
        if index in self._compiled:
            return self._compiled[index]
        from .claunch import build
        from .launcher import _COMPILED

        mod = build() if _COMPILED and not self.bias else None
        call = None
        if mod is not None and hasattr(mod, "lt_matmul"):
            scal = self._scal
            # handles are c_void_p (typed int | None): cuBLASLt made each, none is NULL
            state = (ctypes.c_uint64 * 10)(  # type: ignore[misc]
                ctypes.cast(self._lib.cublasLtMatmul, ctypes.c_void_p).value,
                self._handle.value, self._desc.value, _ONE_AT[scal], self._a.value,
                self._b.value, _ZERO_AT[scal], self._c.value,
                ctypes.addressof(self.algos[index]), WORKSPACE)
            call = functools.partial(mod.lt_matmul, ctypes.addressof(state))
            call.keep = state  # type: ignore[attr-defined]  # alive as long as the call
        self._compiled[index] = call
        return call

    def run(self, index: int, c: int, a: int, b: int, bias: int, stream: int,
            workspace: int) -> None:
        """``C = A @ B (+ bias)`` with algorithm ``index`` on ``stream`` (addresses; the
        workspace holds ``WORKSPACE`` bytes)."""
        if self.bias and self._bias_at.value != bias:
            self._bias_at.value = bias
            self._set_desc(_DESC_BIAS_POINTER, self._bias_at)
        scal = self._scal
        _check(self._lib.cublasLtMatmul(
            self._handle, self._desc, _ONE_AT[scal], b, self._a, a, self._b, _ZERO_AT[scal],
            c, self._c, c, self._c, ctypes.byref(self.algos[index]), workspace, WORKSPACE,
            stream), "cublasLtMatmul")

    def __del__(self) -> None:
        if sys.is_finalizing():  # the library may already have torn itself down
            return
        for destroy, obj in reversed(getattr(self, "_objects", ())):
            try:
                destroy(obj)
            except Exception:  # interpreter shutdown: the library may be gone
                pass
