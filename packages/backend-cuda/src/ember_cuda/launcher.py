"""Launching a compiled Triton kernel again on CUDA: the host path of every recurring eager op.

ember_cuda's `ember_triton.vendor.Launcher` (``backend.make_launch``, set by the plugin).

Triton's own launcher (``CompiledKernel.run``) is a Python object that allocates scratch
buffers and then calls a generated C function that parses every argument; on the H200's host
that costs 5-7 µs a launch, most of the budget of an eager op.  `DriverLaunch` replaces it, for
kernels that need nothing beyond a plain launch, with one `struct.pack_into` of the arguments
into a parameter buffer made once per compiled kernel, and one ``cuLaunchKernel`` through
CuPy's driver bindings.

The parameter layout follows the kernel Triton compiled: one parameter per argument whose
signature type is not ``constexpr`` (pointers as 64-bit addresses, integers and floats in their
widths), then the two scratch pointers Triton 3.6 appends to every kernel (null here: kernels
that need scratch memory keep Triton's launcher).  Any kernel or Triton version this module does
not recognise keeps Triton's launcher too (`ember_triton.vendor.TritonLaunch`).  Where a C
compiler is at hand (as Triton's own launchers need one), `ember_cuda.claunch` does the packing
and the launch in one compiled call instead of `DriverLaunch`'s three Python-level steps.
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading
from collections.abc import Sequence
from typing import Any

from ember_triton.vendor import LaunchEntry, TritonLaunch

__all__ = ["DriverLaunch", "make_entry"]

#: struct codes of scalar parameters, each padded to an 8-byte slot
_CODES = {
    "i1": "b7x", "i8": "b7x", "i16": "h6x", "i32": "i4x", "i64": "q",
    "u1": "B7x", "u8": "B7x", "u16": "H6x", "u32": "I4x", "u64": "Q",
    "fp16": "e6x", "fp32": "f4x", "f32": "f4x", "fp64": "d",
}
#: Triton versions whose kernels take exactly the parameters described above
_KNOWN_LAYOUTS = ("3.6.",)
#: ``EMBER_DRIVER_LAUNCH=0`` keeps Triton's launcher for every kernel
_ENABLED = os.environ.get("EMBER_DRIVER_LAUNCH", "1") != "0"
#: ``EMBER_C_LAUNCH=0`` keeps `DriverLaunch` instead of the compiled launcher (`claunch`)
_COMPILED = os.environ.get("EMBER_C_LAUNCH", "1") != "0"


class DriverLaunch:
    """A compiled kernel launched with one ``cuLaunchKernel`` (see the module docstring)."""

    __slots__ = ("_buffer", "_launch", "_lock", "_pack", "_params", "_params_at", "block",
                 "compiled", "function", "shared", "types")

    def __init__(self, compiled: Any, types: Sequence[str]) -> None:
        from cupy.cuda import driver

        fmt = "<" + "".join("q" if t == "constexpr" else ("Q" if t[0] == "*" else _CODES[t])
                            for t in types)
        self._pack = struct.Struct(fmt).pack_into
        nslots = len(types) + 2
        self._buffer = ctypes.create_string_buffer(8 * nslots)  # zeroed: null scratch pointers
        base = ctypes.addressof(self._buffer)
        slots = [i for i, t in enumerate(types) if t != "constexpr"] + [len(types),
                                                                       len(types) + 1]
        self._params = (ctypes.c_void_p * len(slots))(*[base + 8 * i for i in slots])
        self._params_at = ctypes.addressof(self._params)
        self._lock = threading.Lock()
        self._launch = driver.launchKernel
        self.compiled = compiled
        self.types = tuple(types)
        self.function = int(compiled.function)
        self.block = 32 * int(compiled.metadata.num_warps)
        self.shared = int(compiled.metadata.shared)

    def __call__(self, grid: tuple[int, ...], stream: int, raw: Sequence[Any]) -> None:
        n = len(grid)
        with self._lock:  # the buffer is read by the driver during the call
            try:
                self._pack(self._buffer, 0, *raw)
            except (OverflowError, struct.error):  # a float beyond float32: inf, as in C
                self._pack(self._buffer, 0, *[_narrow(v) for v in raw])
            self._launch(self.function, grid[0], grid[1] if n > 1 else 1,
                         grid[2] if n > 2 else 1, self.block, 1, 1, self.shared, stream,
                         self._params_at, 0)


def _narrow(v: Any) -> Any:
    if type(v) is float:
        import numpy as np

        with np.errstate(over="ignore"):
            return float(np.float32(v))
    return v


def _driver_types(compiled: Any, nraw: int) -> list[str] | None:
    """The signature types of the first ``nraw`` parameters, when `DriverLaunch` can launch
    ``compiled`` (else ``None``)."""
    import triton

    if not triton.__version__.startswith(_KNOWN_LAYOUTS):
        return None
    md = compiled.metadata
    if getattr(getattr(md, "target", None), "backend", None) != "cuda":  # ROCm: its own layout
        return None
    if (getattr(md, "num_ctas", 1) != 1 or getattr(md, "launch_cooperative_grid", False)
            or getattr(md, "launch_pdl", False) or getattr(md, "global_scratch_size", 0)
            or getattr(md, "profile_scratch_size", 0) or getattr(md, "tensordesc_meta", None)):
        return None
    sig = getattr(getattr(compiled, "src", None), "signature", None)
    if not isinstance(sig, dict) or len(sig) < nraw:
        return None
    types = list(sig.values())[:nraw]
    if not all(isinstance(t, str) and (t == "constexpr" or t[0] == "*" or t in _CODES)
               for t in types):
        return None
    return types


def make_entry(compiled: Any, raw: Sequence[Any], tail: tuple[Any, ...]) -> LaunchEntry:
    """How to launch ``compiled`` again with arguments like ``raw`` (addresses and numbers):
    a `DriverLaunch` when it can, else a `TritonLaunch`."""
    if _ENABLED and getattr(compiled, "function", None) is not None and all(
            type(a) in (int, float, bool) for a in raw):
        types = _driver_types(compiled, len(raw))
        if types is not None:
            try:
                entry = DriverLaunch(compiled, types)
                entry._pack(entry._buffer, 0, *raw)  # the arguments fit the layout
            except (ImportError, struct.error, OverflowError, KeyError, TypeError):
                pass
            else:
                if _COMPILED:  # the same launch, packed and issued by one C call
                    from .claunch import make_launch

                    fast = make_launch(compiled, types)
                    if fast is not None:
                        return fast  # type: ignore[no-any-return]
                return entry
    return TritonLaunch(compiled, tail)
