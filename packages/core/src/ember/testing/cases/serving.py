# Lambdas with default arguments bind loop variables; mypy cannot infer their types.
# mypy: disable-error-code="misc"
"""Decoding's ops: the KV-cache write (``index_copy`` at fixed and at device-computed
positions) and rotary embeddings in both layouts (``rms_norm``'s cases are in functional)."""

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
