"""Scaled-dot-product attention forward and backward as one kernel each
(`ember.ops.composite.scaled_dot_product_attention` and its ``_backward``).

Batched ``np.matmul`` over the leading axes, the softmax in place in the score buffer.  The
forward keeps only the row logsumexp; the backward rebuilds the weights from it
(``p = exp(s - lse)``) rather than holding ``[..., L, S]`` weights between the passes.
float16 / bfloat16 compute in float32.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from ember.backend.geometry import attention_operands_ok
from ember.ops import composite

from ._common import F32, LOW, quiet, wide

__all__ = ["KERNELS", "scaled_dot_product_attention", "scaled_dot_product_attention_backward"]

_OP = "scaled_dot_product_attention"


def _check(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None,
           name: str) -> None:
    if not attention_operands_ok(q, k, v, mask):
        shapes = ", ".join(f"{a.shape} {a.dtype}" for a in (q, k, v) + (
            (mask,) if mask is not None else ()))
        raise ValueError(f"{name}: expected q[..., L, D], k[..., S, D], v[..., S, Dv] of one "
                         f"dtype and batch shape and a mask broadcasting to [..., L, S], got "
                         f"{shapes}")


@functools.lru_cache(maxsize=32)
def _causal_bias(length: int, source: int, dtype: np.dtype) -> np.ndarray:
    """0 where ``j <= i``, -inf above the diagonal: adding it is ~15x faster than assigning
    -inf through a boolean index."""
    bias = np.zeros((length, source), dtype)
    bias[np.triu(np.ones((length, source), dtype=bool), 1)] = -np.inf
    bias.flags.writeable = False
    return bias


def _scores(q: np.ndarray, k: np.ndarray, mask: np.ndarray | None, scale: float,
            causal: bool) -> np.ndarray:
    """``q k^T scale`` with the causal and bool masks as -inf and an additive mask added."""
    s: np.ndarray = np.matmul(q, k.swapaxes(-1, -2))
    s *= scale
    if causal:
        s += _causal_bias(s.shape[-2], s.shape[-1], s.dtype)
    if mask is not None:
        if mask.dtype == np.bool_:
            np.copyto(s, -np.inf, where=~mask)
        else:
            s += wide(mask)
    return s


@quiet
def scaled_dot_product_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray,
                                 *bias: np.ndarray, scale: float, causal: bool = False,
                                 mask: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(softmax(q k^T scale + bias) v, logsumexp of each score row)``; ``bias`` is the
    optional mask tensor, there when the ``mask`` flag is."""
    m = bias[0] if mask else None
    _check(q, k, v, m, _OP)
    s = _scores(wide(q), wide(k), m, scale, causal)
    top = s.max(axis=-1, keepdims=True)
    s -= top
    np.exp(s, out=s)
    total = s.sum(axis=-1, keepdims=True)
    s /= total
    out = np.matmul(s, wide(v))
    np.log(total, out=total)
    total += top
    lse = total[..., 0]
    if q.dtype in LOW:
        return out.astype(q.dtype), lse.astype(F32)
    return out, lse


@quiet
def scaled_dot_product_attention_backward(g: np.ndarray, q: np.ndarray, k: np.ndarray,
                                          v: np.ndarray, out: np.ndarray, lse: np.ndarray,
                                          *bias: np.ndarray, scale: float,
                                          causal: bool = False, mask: bool = False
                                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dq, dk, dv)`` from the weights rebuilt as ``exp(s - lse)``."""
    m = bias[0] if mask else None
    _check(q, k, v, m, _OP + "_backward")
    if g.shape != out.shape or out.shape != (*q.shape[:-1], v.shape[-1]):
        raise ValueError(f"{_OP}_backward: g {g.shape} and out {out.shape} must be "
                         f"{(*q.shape[:-1], v.shape[-1])}")
    dt = q.dtype
    q, k, v, g, out = wide(q), wide(k), wide(v), wide(g), wide(out)
    p = _scores(q, k, m, scale, causal)
    p -= lse[..., None]
    np.exp(p, out=p)
    dv = np.matmul(p.swapaxes(-1, -2), g)
    ds = np.matmul(g, v.swapaxes(-1, -2))
    ds -= np.einsum("...d,...d->...", g, out)[..., None]
    ds *= p
    ds *= scale
    dq = np.matmul(ds, k)
    dk = np.matmul(ds.swapaxes(-1, -2), q)
    if dt in LOW:
        return dq.astype(dt), dk.astype(dt), dv.astype(dt)
    return dq, dk, dv


KERNELS: dict[Any, Any] = {
    composite.scaled_dot_product_attention: scaled_dot_product_attention,
    composite.scaled_dot_product_attention_backward: scaled_dot_product_attention_backward,
}
