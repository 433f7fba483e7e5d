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

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np

__all__ = ["attention_operands_ok", "interpolate", "linear_weights", "nearest_index",
           "pool_output_size"]


class _Operand(Protocol):
    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> Any: ...

    @property
    def ndim(self) -> int: ...


def attention_operands_ok(q: _Operand, k: _Operand, v: _Operand, mask: _Operand | None) -> bool:
    """Whether ``q[..., L, D]``, ``k[..., S, D]``, ``v[..., S, Dv]`` share one dtype and batch
    shape and ``mask`` (bool or of that dtype) broadcasts to the scores ``[..., L, S]``."""
    ok = (q.ndim >= 2 and k.ndim == q.ndim and v.ndim == q.ndim
          and q.shape[:-2] == k.shape[:-2] == v.shape[:-2] and q.shape[-1] == k.shape[-1]
          and k.shape[-2] == v.shape[-2] and q.dtype == k.dtype == v.dtype)
    if ok and mask is not None:
        scores = (*q.shape[:-1], k.shape[-2])
        ok = (mask.ndim <= len(scores) and (mask.dtype == np.bool_ or mask.dtype == q.dtype)
              and all(m in (1, n) for m, n in zip(mask.shape[::-1], scores[::-1],
                                                  strict=False)))
    return bool(ok)


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


A = TypeVar("A")


def interpolate(x: A, shape: Sequence[int], size: Sequence[int], mode: str,
                align_corners: bool | None, *, take: Callable[[A, np.ndarray, int], A],
                lerp: Callable[[A, A, np.ndarray, int], A], device: str) -> A:
    """``interpolate`` of ``x`` (of ``shape``, ``[N, C, *spatial]``) to the spatial ``size``,
    one axis after another, with the backend's kernels: ``take(a, index, axis)`` gathers
    along an axis (an int64 host index), ``lerp(lo, hi, lam, axis)`` is
    ``lo * (1 - lam) + hi * lam`` with the float64 host weights ``lam`` along ``axis``."""
    out = x
    for axis, o in enumerate(size, start=2):
        n = shape[axis]
        if mode == "nearest":
            out = take(out, nearest_index(n, o), axis)
            continue
        if mode not in ("linear", "bilinear"):
            raise ValueError(f"interpolate: unsupported mode {mode!r} on {device}")
        i0, i1, lam = linear_weights(n, o, bool(align_corners))
        out = lerp(take(out, i0, axis), take(out, i1, axis), lam, axis)
    return out
