"""ember's CUDA backend: ember's Triton kernels on NVIDIA GPUs over CuPy memory pools.

PyTorch is never imported: ember installs its own Triton driver (:mod:`ember_cuda.driver`)
that takes the current device, stream and compute capability from CuPy.
"""

from .graph import CaptureError, CudaGraph, graph
from .probe import probe

__all__ = ["CaptureError", "CudaGraph", "graph", "probe"]
