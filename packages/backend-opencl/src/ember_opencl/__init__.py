"""ember's OpenCL backend: every primitive as generated OpenCL C, through pyopencl.

The plugin (:mod:`ember_opencl.plugin`) registers the ``opencl`` device; `OpenCLBackend` is the
backend, and each kernel family lives in the module named like core's op group.  Names are
imported on first access so that plugin discovery (which imports this package) never loads
pyopencl.
"""

from __future__ import annotations

from ember.backend import lazy_exports

__all__ = ["CLArray", "OpenCLBackend"]


__getattr__ = lazy_exports(__name__, {"OpenCLBackend": "backend", "CLArray": "runtime"})
