"""Operators of the ``ai.onnx.preview`` domain: FlexAttention (scaled dot-product attention
with optional ``score_mod`` and ``prob_mod`` subgraphs applied to the scores and to the
probabilities), as a composite of ember ops.

``PREVIEW`` names the operators the loader accepts from that domain; any other one is
refused with its domain named, as an operator of any other domain is.
"""

from __future__ import annotations

import math
from typing import Any

import ember as E
from ember import Tensor

from ._dtypes import ember_dtype
from ._registry import Node, Run, op

PREVIEW_DOMAIN = "ai.onnx.preview"
PREVIEW = frozenset({"FlexAttention"})


def _mod(r: Run, node: Node, name: str, x: Tensor, dtype: Any) -> Tensor:
    g = node.attrs.get(name)
    if g is None:
        return x
    outs = g(r, [x])
    if len(outs) != 1:
        raise ValueError(f"{node.where()}: {name} must give one output, gave {len(outs)}")
    return r.tensor(outs[0]).to(dtype)


@op("FlexAttention", note="domain ai.onnx.preview: 4-D Q/K/V, GQA, scale, score_mod and "
    "prob_mod subgraphs, softmax_precision (float16/bfloat16 scores in float32)")
def flex_attention(r: Run, node: Node, q: Any, k: Any, v: Any) -> Tensor:
    tq, tk, tv = r.tensor(q), r.tensor(k), r.tensor(v)
    if tq.ndim != 4 or tk.ndim != 4 or tv.ndim != 4:
        raise ValueError(f"{node.where()}: Q {tuple(tq.shape)}, K {tuple(tk.shape)}, V "
                         f"{tuple(tv.shape)} must be 4-D [B, H, L, E]")
    hq, e = tq.shape[1], tq.shape[3]
    hkv, s = tk.shape[1], tk.shape[2]
    if tv.shape[1] != hkv or tv.shape[2] != s or tk.shape[3] != e or hq % hkv:
        raise ValueError(f"{node.where()}: Q {tuple(tq.shape)}, K {tuple(tk.shape)} and V "
                         f"{tuple(tv.shape)} do not fit (heads, lengths, head sizes)")
    if hq != hkv:
        tk = E.repeat_interleave(tk, hq // hkv, dim=1)
        tv = E.repeat_interleave(tv, hq // hkv, dim=1)
    scale = node.attrs.get("scale")
    scale = 1.0 / math.sqrt(e) if scale is None else float(scale)
    root = math.sqrt(scale)
    scores = E.matmul(tq * root, (tk * root).transpose(-1, -2))
    prec = node.attrs.get("softmax_precision")
    if prec is not None:
        cd = ember_dtype(int(prec), node.where())
    else:
        cd = E.float32 if tq.dtype.itemsize < 4 else tq.dtype
    scores = _mod(r, node, "score_mod", scores.to(cd), cd)
    probs = E.softmax(scores, dim=-1)
    probs = _mod(r, node, "prob_mod", probs, cd)
    return E.matmul(probs, tv.to(cd)).to(tv.dtype)
