"""ember's CUDA backend: ember's Triton kernels on NVIDIA GPUs over CuPy memory pools.

PyTorch is never imported: ember installs its own Triton driver (`ember_triton.gpu`) that takes
the current device, stream and compute capability from CuPy.  What is CUDA's alone lives here:
cuBLASLt and cuBLAS as matmul candidates (`ember_cuda.gemm`), the compiled launcher
(`ember_cuda.launcher`, `ember_cuda.claunch`) and CUDA graphs (`ember_cuda.graph`).
"""

from .graph import CaptureError, CudaGraph, graph
from .probe import probe

__all__ = ["CaptureError", "CudaGraph", "graph", "probe"]
