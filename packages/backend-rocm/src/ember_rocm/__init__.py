"""ember's ROCm backend: ember's Triton kernels on AMD GPUs over CuPy-ROCm memory.

Untested on AMD hardware: it registers everywhere and reports itself unavailable without a HIP
runtime and an AMD GPU.  Triton's HIP driver imports torch, so ember installs its own, from
the code ``ember_cuda`` uses too (`ember_triton.gpu`, parametrised by `ember_rocm.probe.ROCM`).
No vendor GEMM library is wired in: matmuls run on ember's Triton kernels.
"""

from .probe import probe

__all__ = ["probe"]
