"""ember's OpenCL backend: every primitive as generated OpenCL C, through pyopencl.

The plugin (:mod:`ember_opencl.plugin`) registers the ``opencl`` device; `OpenCLBackend` is the
backend, and each kernel family lives in the module named like core's op group.  Names are
imported on first access so that plugin discovery (which imports this package) never loads
pyopencl.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CLArray", "OpenCLBackend"]


def __getattr__(name: str) -> Any:
    if name == "OpenCLBackend":
        from .backend import OpenCLBackend

        return OpenCLBackend
    if name == "CLArray":
        from .runtime import CLArray

        return CLArray
    raise AttributeError(f"module 'ember_opencl' has no attribute {name!r}")
