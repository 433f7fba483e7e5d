"""Which kernels `ember.compile` may run in place on a Triton device (``Backend.inplace``).

No result is written over an input that dies (``can_overwrite``): a new array comes from the
caching pool at no cost a reuse would save.  An Adam update may be written into the parameter
and moments it replaces (``can_update``): a CUDA graph (`ember_cuda.graph.ProgramGraph`)
keeps a step's parameters and moments in fixed buffers, and writing each update there saves
copying it back, one launch per tensor (three per parameter).
"""

from __future__ import annotations

from typing import Any

from ._array import DeviceArray, contiguous_strides
from .optim import updated_output

__all__ = ["TritonInplace"]


class TritonInplace:
    def can_overwrite(self, kernel: Any, inputs: list[Any], position: int, output: Any) -> bool:
        return False

    def can_update(self, kernel: Any, inputs: list[Any], position: int, index: int,
                   outputs: list[Any]) -> bool:
        """Whether ``kernel(*inputs, out=...)`` may write its result ``index`` into
        ``inputs[position]`` (the value it replaces): an Adam kernel's parameter or moment,
        dense, 16-byte aligned, of the result's shape and dtype."""
        if updated_output(getattr(kernel, "func", None), len(inputs), position) != index:
            return False
        x, y = inputs[position], outputs[index]
        return (isinstance(x, DeviceArray) and isinstance(y, DeviceArray) and x.size > 0
                and x.shape == y.shape and x.dtype == y.dtype and x.ptr % 16 == 0
                and x.strides == contiguous_strides(x.shape))

    def shares(self, a: Any, b: Any) -> bool:
        """Whether the byte ranges of two arrays overlap (``False`` for anything else)."""
        if not isinstance(a, DeviceArray) or not isinstance(b, DeviceArray) \
                or a.size == 0 or b.size == 0:
            return False
        lo_a, hi_a = _extent(a)
        lo_b, hi_b = _extent(b)
        return lo_a < hi_b and lo_b < hi_a


def _extent(a: DeviceArray) -> tuple[int, int]:
    """The first byte of ``a`` and one past its last."""
    item = a.dtype.itemsize
    steps = [st * (d - 1) for st, d in zip(a.strides, a.shape, strict=True)]
    lo = a.ptr + sum(s for s in steps if s < 0) * item
    hi = a.ptr + sum(s for s in steps if s > 0) * item
    return lo, hi + item
