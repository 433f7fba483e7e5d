"""Which kernels `ember.compile` may run in place on the CPU (``Backend.inplace``).

A recorded numpy ufunc whose input dies at that call can write its result into that input
(``np.add(a, b, out=a)``) instead of into a new array: no allocation, and the step's memory
stays where the cache already has it.  Only arrays a kernel of the step made (they own their
memory, are C-contiguous and writeable, and have at least one axis) with the result's exact
shape and dtype qualify; core checks that nothing alive shares their memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["CpuInplace"]


class CpuInplace:
    def can_overwrite(self, kernel: Any, inputs: list[Any], position: int, output: Any) -> bool:
        fn = getattr(kernel, "__wrapped__", kernel)  # quiet() wraps some ufuncs
        if not isinstance(fn, np.ufunc) or fn.nout != 1 or fn.nin != len(inputs):
            return False
        x = inputs[position]
        # a 0-d result is a numpy scalar when replayed (ufuncs return scalars for 0-d inputs;
        # only the trace makes them arrays): never a target
        return (type(x) is np.ndarray and x.ndim > 0 and type(output) is np.ndarray
                and x.base is None and x.flags.c_contiguous and x.flags.writeable
                and output is not x and all(output is not a for a in inputs)
                and x.shape == output.shape and x.dtype == output.dtype)

    def shares(self, a: Any, b: Any) -> bool:
        if type(a) is not np.ndarray or type(b) is not np.ndarray:
            return False
        return bool(np.may_share_memory(a, b))
