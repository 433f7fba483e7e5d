"""ember's Triton kernel library and the device-independent `TritonBackend`.

``ember_cuda`` and ``ember_rocm`` run these kernels on GPUs; the ``triton-interpret`` device
(registered here) runs the same kernels under Triton's interpreter on host memory.  Names are
imported on first access so that plugin discovery (which imports this package) never loads
triton.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["CupyMemory", "CupyPointer", "DeviceArray", "HostMemory", "HostPointer", "Memory",
           "TritonBackend"]

_WHERE = {"CupyMemory": "._cupy", "CupyPointer": "._cupy", "DeviceArray": "._array",
          "HostMemory": "._memory", "HostPointer": "._memory", "Memory": "._memory",
          "TritonBackend": ".backend"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module 'ember_triton' has no attribute {name!r}")
