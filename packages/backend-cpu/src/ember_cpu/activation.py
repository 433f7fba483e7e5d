"""GELU and its gradient as one kernel each (`ember.ops.composite.gelu`, ``gelu_backward``).

core's decomposition is six elementwise ops forward and about ten backward, each a dispatch
and a temporary; here each is a few in-place numpy passes over one buffer, and ``erf`` (by far
the costliest pass) runs once per forward and backward pair.  float32 computes in
float32, float64 in float64, float16 / bfloat16 through float32.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from ember.ops import composite
from scipy.special import erf

from ._common import F32, LOW, quiet, wide
from ._jit import gelu_erf

__all__ = ["KERNELS", "gelu", "gelu_backward"]

_SQRT1_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_K = math.sqrt(2.0 / math.pi)
_C = 0.044715


def _tanh_inner(w: np.ndarray) -> np.ndarray:
    """``tanh(k (w + 0.044715 w**3))`` in a new buffer."""
    t: np.ndarray = w * w
    t *= _C * _K
    t += _K
    t *= w
    np.tanh(t, out=t)
    return t


@quiet
def gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    """``x * Phi(x)``, exact (``erf``) or with PyTorch's tanh approximation."""
    if approximate == "none" and (x.dtype == F32 or x.dtype in LOW):
        return gelu_erf(wide(x)).astype(x.dtype, copy=False)  # one compiled pass
    w = wide(x)
    if approximate == "tanh":
        y = _tanh_inner(w)
    elif approximate == "none":
        y = w * _SQRT1_2
        erf(y, out=y)
    else:
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    y += 1.0
    y *= w
    y *= 0.5
    return y.astype(x.dtype) if x.dtype in LOW else y


@quiet
def gelu_backward(g: np.ndarray, x: np.ndarray, y: np.ndarray,
                  approximate: str = "none") -> np.ndarray:
    """``g * d gelu(x) / dx``; ``y = gelu(x)`` gives the exact form's ``Phi(x) = y / x``
    (``1/2`` at 0) without a second ``erf``, the costliest part of either pass."""
    if not g.shape == x.shape == y.shape or not g.dtype == x.dtype == y.dtype:
        raise ValueError(f"gelu_backward: g {g.shape} {g.dtype}, x {x.shape} {x.dtype} and y "
                         f"{y.shape} {y.dtype} must share shape and dtype")
    w = wide(x)
    if approximate == "tanh":
        t = _tanh_inner(w)
        # (1 + t) / 2 + x (1 - t^2) k (1 + 3 c x^2) / 2
        d: np.ndarray = w * w
        d *= 3.0 * _C
        d += 1.0
        d *= w
        d *= 0.5 * _K
        s = t * t
        np.subtract(1.0, s, out=s)
        d *= s
        t += 1.0
        t *= 0.5
        d += t
    elif approximate == "none":
        # Phi(x) + x phi(x)
        d = w * w
        d *= -0.5
        np.exp(d, out=d)
        d *= _INV_SQRT_2PI
        d *= w
        cdf = np.divide(wide(y), w, out=np.full(w.shape, 0.5, w.dtype), where=w != 0)
        d += cdf
    else:
        raise ValueError(f"gelu_backward: approximate must be 'none' or 'tanh', got "
                         f"{approximate!r}")
    d *= wide(g)
    return d.astype(x.dtype) if x.dtype in LOW else d


KERNELS: dict[Any, Any] = {
    composite.gelu: gelu,
    composite.gelu_backward: gelu_backward,
}
