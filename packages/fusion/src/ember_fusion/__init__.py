"""ember's Fusion decorator: ``fusion<inner>`` records ops lazily and runs them as fused kernels.

Inspect what it does with :func:`stats` (kernel counts, plan-cache hits, time spent in
analysis) or set ``EMBER_FUSION_LOG=1`` to log every flush.
"""

from ._api import reset_stats, stats
from ._backend import FusionBackend
from ._compiler import FusedGroup, FusedKernel, FusionCompiler, GroupNode, ReferenceCompiler
from ._stream import FusionStats

__all__ = [
    "FusedGroup",
    "FusedKernel",
    "FusionBackend",
    "FusionCompiler",
    "FusionStats",
    "GroupNode",
    "ReferenceCompiler",
    "reset_stats",
    "stats",
]
