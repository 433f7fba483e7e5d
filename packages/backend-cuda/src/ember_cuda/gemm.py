"""cuBLAS as matmul candidates on ``cuda:N``: the `ember_triton.vendor.VendorGemm` the plugin
registers (``backend.vendor_gemm``).

A problem cuBLAS can read (`cublas.gemm_layout`: each operand with a unit stride, at most one
batch axis) is offered as the algorithms cuBLASLt's heuristic proposes (`cublaslt.LtGemm`,
named ``cublaslt:<version>:<i>``, a bias in cuBLASLt's epilogue), or, where cuBLASLt cannot run
it (no algorithm, operands less than 16-byte aligned, a bias over a batch), as cuBLAS's
classic ``gemmStridedBatchedEx`` through CuPy (``cublas``, a bias as one more kernel).  The
selection key's variant is the operands' alignment cuBLASLt's algorithms assume (or
``False``).  A cuBLASLt run is replayed as a plan (`LtLaunch`, on the stream's fixed
workspace, so CUDA graphs record it); a classic cuBLAS run is not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ember_triton.linalg import add_rows
from ember_triton.vendor import DeviceArray, GemmOffer, MatmulPlan, dtype_name

from . import cublaslt
from .cublas import gemm_layout, strided_batched_gemm

if TYPE_CHECKING:
    from ember_triton import TritonBackend

__all__ = ["CublasGemm", "LtLaunch", "cublas_layouts"]


def cublas_layouts(args: tuple[int, ...],
                   batch: int) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """cuBLAS's operand layouts for ``args``, or ``None`` where cuBLAS cannot run it."""
    m, n, k, b2, _, _, sam, sak, _, _, sbk, sbn = args
    if batch > 1 and batch != b2:  # two batch axes that do not merge: Triton only
        return None
    a_layout = gemm_layout(m, k, sam, sak)
    b_layout = gemm_layout(k, n, sbk, sbn)
    if a_layout is None or b_layout is None:
        return None
    return a_layout, b_layout


class LtLaunch:
    """A cuBLASLt algorithm as matmul's plans call a recorded launch:
    ``(grid, stream, [c, a, b, bias])``; through the compiled launcher's extension where
    it can (`cublaslt.LtGemm.compiled_run`)."""

    __slots__ = ("compiled", "index", "lt", "memory")

    def __init__(self, lt: Any, index: int, memory: Any) -> None:
        self.lt, self.index, self.memory = lt, index, memory
        self.compiled = lt.compiled_run(index)

    def __call__(self, grid: Any, stream: int, raw: Sequence[Any]) -> None:
        workspace = self.memory.workspace(cublaslt.WORKSPACE)
        if self.compiled is None:
            self.lt.run(self.index, raw[0], raw[1], raw[2], raw[3], stream, workspace)
            return
        cublaslt._check(self.compiled(raw[0], raw[1], raw[2], stream, workspace),
                        "cublasLtMatmul")


class _Offer:
    """One problem's cuBLAS candidates (`ember_triton.vendor.GemmOffer`)."""

    __slots__ = ("args", "backend", "batch", "layouts", "lt", "names", "operands", "precision",
                 "variant")

    def __init__(self, backend: TritonBackend, operands: tuple[Any, ...], args: tuple[int, ...],
                 batch: int, precision: str, layouts: Any, lt: Any) -> None:
        self.backend, self.operands, self.args, self.batch = backend, operands, args, batch
        self.precision, self.layouts, self.lt = precision, layouts, lt
        self.variant = False if lt is None else lt.align
        self.names: tuple[str, ...] = ("cublas",) if lt is None else tuple(
            f"cublaslt:{lt.version}:{i}" for i in range(len(lt.algos)))

    def run(self, name: str) -> MatmulPlan | None:
        be = self.backend
        out, a, b, bias = self.operands
        if name == "cublas":
            m, n, k, _, _, sa2, _, _, _, sb2, _, _ = self.args
            strided_batched_gemm(out.ptr, a.ptr, b.ptr, m, n, k, self.batch, sa2, sb2,
                                 self.layouts[0], self.layouts[1], a.dtype, self.precision)
            if bias is not None:  # cuBLAS's plain GEMM has no epilogue: one more kernel
                add_rows(be, out, bias)
            return None
        lt = self.lt
        entry = LtLaunch(lt, self.names.index(name), be.memory)
        entry(None, be.memory.stream(), [out.ptr, a.ptr, b.ptr, 0 if bias is None else bias.ptr])
        return entry, None, (), lt.align - 1


class CublasGemm:
    """cuBLASLt's algorithms and cuBLAS for one ``cuda:N`` backend's matmuls.

    Keeps cuBLASLt's descriptors per problem and alignment (`cublaslt.LtGemm`, made once).
    """

    def __init__(self, index: int) -> None:
        self.index = index
        #: cuBLASLt's descriptors and algorithms per matmul problem (or ``None``: none)
        self.lt_gemms: dict[Any, Any] = {}

    def offer(self, backend: TritonBackend, out: DeviceArray, a: DeviceArray, b: DeviceArray,
              args: tuple[int, ...], batch: int, precision: str,
              bias: DeviceArray | None) -> GemmOffer | None:
        layouts = cublas_layouts(args, batch)
        if layouts is None:
            return None
        lt = self._lt_gemm(out, a, b, args, batch, precision, layouts, bias)
        return _Offer(backend, (out, a, b, bias), args, batch, precision, layouts, lt)

    def _lt_gemm(self, out: DeviceArray, a: DeviceArray, b: DeviceArray,
                 args: tuple[int, ...], batch: int, precision: str, layouts: Any,
                 bias: DeviceArray | None) -> Any:
        """cuBLASLt's descriptors for this problem (`cublaslt.LtGemm`, made once per problem
        and alignment), or ``None`` where cuBLASLt cannot run it."""
        if bias is not None and batch > 1:  # the epilogue's bias would need a batch stride
            return None
        align = cublaslt.alignment(out.ptr, a.ptr, b.ptr, out.ptr if bias is None else bias.ptr)
        key = (args, batch, a.dtype, precision, bias is not None, align)
        lt = self.lt_gemms.get(key, False)
        if lt is False:
            if len(self.lt_gemms) >= 4096:  # as the matmul plans: problems that never recur
                self.lt_gemms.clear()
            lt = None
            if align and cublaslt.available():
                m, n, k, _, _, sa2, _, _, _, sb2, _, _ = args
                lt = cublaslt.LtGemm(self.index, m, n, k, batch, layouts[0], layouts[1],
                                     sa2, sb2, dtype_name(a.dtype), precision, bias is not None,
                                     align)
                if not lt.algos:
                    lt = None
            self.lt_gemms[key] = lt
        return lt
