"""GELU and its gradient as one kernel each (`ember.ops.composite.gelu`, ``gelu_backward``).

core's decomposition is six elementwise launches forward and about ten backward, each reading
and writing the whole tensor; here each is one pass over contiguous data (a strided input is
copied first).  The backward recomputes ``Phi(x)`` from ``x`` rather than read the forward's
output: two loads and a store, what PyTorch's kernel moves.  float16 / bfloat16 compute in
float32, float32 in float32, float64 in float64.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from ember.ops import composite as cops

from ._array import DeviceArray
from ._codegen import contiguous

if TYPE_CHECKING:
    from .backend import TritonBackend

__all__ = ["BLOCK", "KERNELS", "gelu", "gelu_backward"]

#: elements per program and warps, by execution mode and item size: big blocks of 16-byte
#: vector accesses on a GPU; on the interpreter (which pays per program) as big as it gets
BLOCK: dict[str, Any] = {"interpret": 1 << 16, "compiled": {2: (4096, 8), 4: (2048, 8),
                                                              8: (1024, 4)}}


def _approximate(name: str, approximate: str) -> bool:
    """Whether ``approximate`` names the tanh form (a `ValueError` for unknown names)."""
    if approximate == "tanh":
        return True
    if approximate == "none":
        return False
    raise ValueError(f"{name}: approximate must be 'none' or 'tanh', got {approximate!r}")


def _launch(be: TritonBackend, name: str, out: DeviceArray, arrays: tuple[DeviceArray, ...],
            tanh: bool) -> None:
    n = out.size
    if n == 0:
        return
    dtype = out.dtype
    if be.memory.interpret:
        block = min(BLOCK["interpret"], max(16, 1 << (n - 1).bit_length()))
        meta: dict[str, Any] = {"BLOCK": block}
    else:
        block, warps = BLOCK["compiled"][dtype.itemsize]
        meta = {"BLOCK": block, "num_warps": warps}
    be.launch_planned((name, n, dtype, tanh, block), getattr(be.module("activation"), name),
                      (-(-n // block),), (out, *arrays), (n,), TANH=tanh,
                      WIDE=dtype.itemsize == 8, **meta)


def gelu(be: TritonBackend, x: DeviceArray, approximate: str = "none") -> DeviceArray:
    """``x * Phi(x)``, exact (``erf``) or with PyTorch's tanh approximation."""
    tanh = _approximate("gelu", approximate)
    src = contiguous(be, x)
    out = be.empty(x.shape, x.dtype)
    _launch(be, "gelu", out, (src,), tanh)
    return out


def gelu_backward(be: TritonBackend, g: DeviceArray, x: DeviceArray, y: DeviceArray,
                  approximate: str = "none") -> DeviceArray:
    """``g * d gelu(x) / dx`` (``y``, the forward's output, is not read: see the module)."""
    tanh = _approximate("gelu_backward", approximate)
    if not g.shape == x.shape == y.shape or not g.dtype == x.dtype == y.dtype:
        raise ValueError(f"gelu_backward: g {g.shape} {np.dtype(g.dtype).name}, x {x.shape} "
                         f"{np.dtype(x.dtype).name} and y {y.shape} {np.dtype(y.dtype).name} "
                         f"must share shape and dtype")
    out = be.empty(x.shape, x.dtype)
    _launch(be, "gelu_backward", out, (contiguous(be, g), contiguous(be, x)), tanh)
    return out


KERNELS: dict[Any, Any] = {
    cops.gelu: gelu,
    cops.gelu_backward: gelu_backward,
}
