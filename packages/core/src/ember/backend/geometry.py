"""Host-side geometry of the nn ops, shared by every backend's kernels.

What a pooling window or an interpolation reads is decided on the host, the same way on
every device: the output extent of a pooling window (PyTorch's rule, ``ceil_mode`` included),
the source index of each output position for ``nearest`` interpolation, and the two source
indices and the weight of each output position for ``linear``/``bilinear``.  A backend then
gathers with its own kernels.

>>> pool_output_size(5, 2, 2, 0, 1, ceil_mode=True)
3
>>> nearest_index(4, 2).tolist()
[0, 2]
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["linear_weights", "nearest_index", "pool_output_size"]


def pool_output_size(n: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """Output extent of a window of size ``k``, stride ``s``, padding ``p`` and dilation ``d``
    over an axis of ``n``."""
    span = d * (k - 1) + 1
    if ceil_mode:
        out = -(-(n + 2 * p - span) // s) + 1
        if (out - 1) * s >= n + p:  # the last window must start inside the input or left pad
            out -= 1
        return out
    return (n + 2 * p - span) // s + 1


def nearest_index(n: int, o: int) -> np.ndarray:
    """For each of ``o`` outputs, the index it takes of an axis of ``n`` ("nearest" mode)."""
    # PyTorch's legacy "nearest": float32 scale, floor, clamp
    scale = np.float32(n) / np.float32(o)
    index: np.ndarray = np.minimum(np.floor(np.arange(o, dtype=np.float32) * scale)
                                   .astype(np.int64), n - 1)
    return index


def linear_weights(n: int, o: int, align_corners: bool) -> tuple[Any, Any, Any]:
    """For each of ``o`` outputs over an axis of ``n`` ("linear" mode): the lower and upper
    source indices ``i0``, ``i1`` (int64) and the weight ``lam`` of the upper one (float64);
    an output is ``x[i0] * (1 - lam) + x[i1] * lam``."""
    dst = np.arange(o, dtype=np.float64)
    if align_corners:
        src = dst * ((n - 1) / (o - 1)) if o > 1 else np.zeros(o)
    else:
        src = np.maximum((dst + 0.5) * (n / o) - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), n - 1)
    i1 = np.minimum(i0 + 1, n - 1)
    return i0, i1, src - i0
