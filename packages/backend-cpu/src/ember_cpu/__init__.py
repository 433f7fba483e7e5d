"""ember's CPU backend: the primitive set on numpy arrays.

The plugin (:mod:`ember_cpu.plugin`) registers the ``cpu`` device; :class:`CpuBackend` is the
backend, and each kernel family lives in the module named like core's op group.  The kernels
load on first use of ``CpuBackend``, so that discovering the plugin stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import CpuBackend

__all__ = ["CpuBackend"]


def __getattr__(name: str) -> Any:
    if name == "CpuBackend":
        from .backend import CpuBackend

        return CpuBackend
    raise AttributeError(f"module 'ember_cpu' has no attribute {name!r}")
