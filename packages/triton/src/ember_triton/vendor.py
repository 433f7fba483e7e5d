"""The hooks through which a GPU plugin adds vendor machinery to `TritonBackend`.

``ember_triton`` runs on any Triton target with nothing but Triton: matmuls on its own tile
kernels, launches through Triton's launcher.  A device plugin may give the backend it builds
two things more, by setting attributes after making it:

- ``backend.vendor_gemm``: a `VendorGemm`, a vendor's GEMM library as candidates of matmul's
  kernel selection (``ember_cuda.gemm.CublasGemm``: cuBLASLt's algorithms, and cuBLAS).
  ``backend.use_vendor_gemm = False`` leaves matmuls to Triton's kernels while keeping the
  provider (``ember_cuda.graph`` does that while it records).
- ``backend.make_launch``: a `Launcher`, how a kernel Triton compiled is launched again on
  the recurring-launch path (``ember_cuda.launcher.make_entry``: one ``cuLaunchKernel`` from a
  compiled C call).  The default, `triton_launch`, calls Triton's own launcher.

Neither is needed: the ``triton-interpret`` device and ``rocm:N`` have none.  Both are set
once, when a device is made; the per-call paths read the attribute, never a plugin hook.

A matmul problem is described as `ember_triton.linalg` holds it: ``args = (m, n, k, b2, sa1,
sa2, sam, sak, sb1, sb2, sbk, sbn)`` (sizes, the two merged batch axes' strides of A and B,
then A's and B's row and column strides, all in elements) over ``batch`` matrices, ``out``
contiguous, an optional ``bias`` added to each row (``linear``'s epilogue).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ._array import DeviceArray, dtype_name

if TYPE_CHECKING:
    from .backend import TritonBackend

__all__ = ["DeviceArray", "GemmOffer", "LaunchEntry", "Launcher", "MatmulPlan", "TritonLaunch",
           "VendorGemm", "dtype_name", "triton_launch"]


class LaunchEntry(Protocol):
    """A recorded launch: ``entry(grid, stream, raw)`` runs it again with ``raw`` arguments
    (arrays as addresses, then numbers) on ``stream`` (a driver stream handle)."""

    def __call__(self, grid: Any, stream: int, raw: Sequence[Any], /) -> None: ...


#: ``launcher(compiled, raw, tail) -> entry``: how to launch Triton's ``CompiledKernel``
#: ``compiled`` again with arguments like ``raw``; ``tail`` holds the values of the kernel's
#: trailing parameters the launch passed as keywords (constexprs Triton's launcher expects)
Launcher = Callable[[Any, Sequence[Any], tuple[Any, ...]], LaunchEntry]

#: what a matmul candidate returns to be replayed without choosing again: ``(entry, grid,
#: scalars, mask)``; the next problem with the same arguments calls ``entry(grid, stream,
#: [out, a, b, bias or out, *scalars])`` when no operand address has a bit of ``mask`` set
MatmulPlan = tuple[LaunchEntry, Any, tuple[Any, ...], int]


class TritonLaunch:
    """Triton's launcher, called with the arguments it expects (the default `Launcher`)."""

    __slots__ = ("compiled", "tail")

    def __init__(self, compiled: Any, tail: tuple[Any, ...]) -> None:
        self.compiled = compiled
        self.tail = tail

    def __call__(self, grid: tuple[int, ...], stream: int, raw: Sequence[Any]) -> None:
        c = self.compiled
        n = len(grid)
        c.run(grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1, stream, c.function,
              c.packed_metadata, None, None, None, *raw, *self.tail)


def triton_launch(compiled: Any, raw: Sequence[Any], tail: tuple[Any, ...]) -> LaunchEntry:
    """The default `Launcher`: Triton's own (works on every Triton target)."""
    return TritonLaunch(compiled, tail)


class GemmOffer(Protocol):
    """A provider's candidates for one matmul problem (see `VendorGemm.offer`).

    ``variant`` joins the kernel-selection key of the problem's shape bucket: problems the
    provider runs differently (cuBLASLt: the operands' address alignment) are chosen apart.
    ``names`` are the candidates kernel selection times beside Triton's (favoured by
    ``_autotune.MARGIN``), unique to this provider and stable across processes (they are
    cached on disk).  ``run(name)`` computes ``out = a @ b (+ bias)`` with one of them and
    returns a `MatmulPlan` when the run can be replayed as it is, else ``None``.
    """

    @property
    def variant(self) -> Any: ...

    @property
    def names(self) -> Sequence[str]: ...

    def run(self, name: str) -> MatmulPlan | None: ...


class VendorGemm(Protocol):
    """A vendor's GEMM library as matmul candidates (``backend.vendor_gemm``).

    `offer` is asked for float16/bfloat16/float32 problems big enough to be timed
    (``linalg.TUNE_MIN_MACS``), on the backend's current stream, and returns ``None`` for a
    problem the library cannot take (dtypes, layout, batch broadcasting, epilogue, precision).
    A plan's entry is replayed by `ember.compile`'s programs, and on ``cuda:N`` inside the
    CUDA graph that records them: what it launches must be capturable, with any workspace
    fixed per stream (``Memory.workspace``: cuBLASLt's).
    """

    def offer(self, backend: TritonBackend, out: DeviceArray, a: DeviceArray, b: DeviceArray,
              args: tuple[int, ...], batch: int, precision: str,
              bias: DeviceArray | None) -> GemmOffer | None: ...
