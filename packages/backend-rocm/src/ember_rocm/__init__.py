"""ember's ROCm backend: ember's Triton kernels on AMD GPUs over CuPy-ROCm memory.

Untested on AMD hardware: it registers everywhere and reports itself unavailable without a HIP
runtime and an AMD GPU.  Triton's HIP driver imports torch, so ember installs its own
(:mod:`ember_rocm.driver`), as ``ember_cuda`` does for NVIDIA.
"""

from .probe import probe

__all__ = ["probe"]
