"""ember's OpenCL backend: every primitive as generated OpenCL C, through pyopencl.

The plugin (:mod:`ember_opencl.plugin`) registers the ``opencl`` device; `OpenCLBackend` is the
backend, and each kernel family lives in the module named like core's op group.
"""

from .backend import OpenCLBackend
from .runtime import CLArray

__all__ = ["CLArray", "OpenCLBackend"]
