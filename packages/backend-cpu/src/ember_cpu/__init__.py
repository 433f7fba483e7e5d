"""ember's CPU backend: the primitive set on numpy arrays.

The plugin (:mod:`ember_cpu.plugin`) registers the ``cpu`` device; :class:`CpuBackend` is the
backend, and each kernel family lives in the module named like core's op group.
"""

from .backend import CpuBackend

__all__ = ["CpuBackend"]
