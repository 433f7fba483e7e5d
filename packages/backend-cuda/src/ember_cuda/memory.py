"""The CUDA devices' memory: CuPy's memory pool (the layer lives in ``ember_triton``, shared
with ROCm)."""

from ember_triton._cupy import CupyMemory as CupyMemory
from ember_triton._cupy import CupyPointer as CupyPointer

__all__ = ["CupyMemory", "CupyPointer"]
