# Lambdas with default arguments bind loop variables; mypy cannot infer their types.
# mypy: disable-error-code="misc"
"""Decoding's ops: the KV-cache write (``index_copy`` at fixed and at device-computed
positions), rotary embeddings in both layouts and grouped-query attention under a cache's
mask (``rms_norm``'s cases are in functional)."""

from __future__ import annotations

from typing import Any

import numpy as np

import ember
import ember.nn.functional as NF

from ... import _dtype as dt
from .._case import Arg, rng_for, sample
from ._build import FLOATS, case


def _idx(values: Any) -> Arg:
    return Arg(np.asarray(values, dtype=np.int64), "", (), dt.int64)


def _index_copy(v: np.ndarray, i: np.ndarray, s: np.ndarray, dim: int) -> np.ndarray:
    out = v.copy()
    dst = [slice(None)] * v.ndim
    for k, pos in enumerate(np.asarray(i).reshape(-1)):
        dst[dim] = pos
        out[tuple(dst)] = np.take(s, k, axis=dim)
    return out


def _rope(x: np.ndarray, c: np.ndarray, s: np.ndarray, interleaved: bool) -> Any:
    h = x.shape[-1] // 2
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = a * c - b * s, a * s + b * c
        return out
    a, b = x[..., :h], x[..., h:]
    return np.concatenate([a * c - b * s, b * c + a * s], -1)


def _tol(d: dt.DType) -> dict[str, Any]:
    return {"atol": 3e-2, "rtol": 2e-2} if d in (dt.float16, dt.bfloat16) else {}


for _d in (*FLOATS, dt.int64):
    g = (0, 2) if _d.kind == "f" else ()
    t = _tol(_d)
    for view in ("", "permuted"):
        sfx = f"{'-' + view if view else ''}-{_d.name}"
        rng = rng_for("index_copy" + sfx)
        cache = Arg(np.asarray(sample((2, 2, 5, 3), _d, rng)), view, (), _d)
        new = Arg(np.asarray(sample((2, 2, 2, 3), _d, rng)), "", (), _d)
        case("index_copy-cache" + sfx, "movement",
             lambda c, i, s: ember.index_copy(c, 2, i, s),
             lambda c, i, s: _index_copy(c, i, s, 2), [cache, _idx([4, 1]), new], _d,
             grad=g, **t)
    # a decode step's write: positions computed on the device from a 0-d start
    case(f"index_copy-device-start-{_d.name}", "movement",
         lambda c, p, s: ember.index_copy(c, 2, p + ember.arange(2, device=p.device), s),
         lambda c, p, s: _index_copy(c, p + np.arange(2), s, 2), [cache, _idx(3), new], _d,
         grad=g, **t)

for _d in FLOATS:
    t = _tol(_d)
    for interleaved in (False, True):
        cid = f"apply_rotary_emb{'-interleaved' if interleaved else ''}-{_d.name}"
        rng = rng_for(cid)
        x = Arg(np.asarray(sample((2, 3, 4), _d, rng)), "", (), _d)
        c = Arg(np.asarray(sample((3, 2), _d, rng)), "", (), _d)
        s = Arg(np.asarray(sample((3, 2), _d, rng)), "", (), _d)
        case(cid, "functional",
             lambda a, cc, ss, il=interleaved: NF.apply_rotary_emb(a, cc, ss, il),
             lambda a, cc, ss, il=interleaved: _rope(a, cc, ss, il), [x, c, s], _d, **t)
    xp = Arg(np.asarray(sample((2, 3, 4), _d, rng_for(f"rope-p-{_d.name}"))), "permuted", (), _d)
    case(f"apply_rotary_emb-permuted-broadcast-{_d.name}", "functional",
         lambda a, cc, ss: NF.apply_rotary_emb(a, cc, ss),
         lambda a, cc, ss: _rope(a, cc, ss, False), [xp, c, s], _d, **t)


def _gqa(q: np.ndarray, k: np.ndarray, v: np.ndarray, m: np.ndarray) -> Any:
    g = q.shape[-3] // k.shape[-3]
    k, v = np.repeat(k, g, axis=-3), np.repeat(v, g, axis=-3)
    s = np.where(m, q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]), -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


# grouped-query attention of 3 queries at positions 2..4 against a cache of 5 (the decode mask)
_CACHE_MASK = np.arange(5)[None, :] <= (2 + np.arange(3))[:, None]
for _d in FLOATS:
    cid = f"scaled_dot_product_attention-gqa-cache-mask-{_d.name}"
    rng = rng_for(cid)
    qkv = [Arg(np.asarray(sample(s, _d, rng)), "", (), _d)
           for s in ((1, 4, 3, 4), (1, 2, 5, 4), (1, 2, 5, 3))]
    case(cid, "nn",
         lambda q, k, v, m: NF.scaled_dot_product_attention(q, k, v, m, enable_gqa=True),
         _gqa, [*qkv, Arg(_CACHE_MASK, "", (), dt.bool_)], _d, grad=(0, 1, 2), **_tol(_d))
