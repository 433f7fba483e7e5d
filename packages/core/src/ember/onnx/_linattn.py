"""Recurrent-state operators of opset 27: LinearAttention (linear, gated, delta and
gated-delta state updates, GQA/MQA) and CausalConvWithState (a depthwise causal convolution
that carries its last ``k - 1`` inputs).

Both are composites of ember ops; LinearAttention walks the sequence one step at a time as
the operator's definition does (the state is ``[B, H_kv, d_k, d_v]``), in float32 whatever
the input's dtype, and casts back, so it trains under ``autodiff<...>``.
"""

from __future__ import annotations

import math
from typing import Any

import ember as E
from ember import Tensor
from ember.nn import functional as F

from ._registry import Node, Run, op


def _heads(x: Tensor, heads: int, node: Node, what: str) -> Tensor:
    """[B, T, H*D] -> [B, H, T, D]."""
    if x.ndim != 3 or x.shape[2] % heads:
        raise ValueError(f"{node.where()}: {what} {tuple(x.shape)} is not [B, T, {heads} * D]")
    b, t, hd = x.shape
    return x.reshape(b, t, heads, hd // heads).permute(0, 2, 1, 3)


@op("LinearAttention", note="update rules linear, gated, delta, gated_delta; GQA/MQA; "
    "per-head or per-key decay; past/present state; stepped in float32")
def linear_attention(r: Run, node: Node, query: Any, key: Any, value: Any,
                     past_state: Any = None, decay: Any = None,
                     beta: Any = None) -> tuple[Tensor, Tensor]:
    at = node.attrs
    rule = at.get("update_rule", "gated_delta")
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        raise ValueError(f"{node.where()}: update_rule {rule!r} is not linear, gated, delta "
                         "or gated_delta")
    if "q_num_heads" not in at or "kv_num_heads" not in at:
        raise ValueError(f"{node.where()}: q_num_heads and kv_num_heads are required")
    hq, hkv = int(at["q_num_heads"]), int(at["kv_num_heads"])
    if hq <= 0 or hkv <= 0 or hq % hkv:
        raise ValueError(f"{node.where()}: q_num_heads {hq} is not a positive multiple of "
                         f"kv_num_heads {hkv}")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gating != (decay is not None) or delta != (beta is not None):
        raise ValueError(f"{node.where()}: update_rule {rule!r} takes "
                         f"{'a' if gating else 'no'} decay and {'a' if delta else 'no'} beta "
                         "input")
    tq = r.tensor(query)
    q4 = _heads(tq, hq, node, "query").float()
    k4 = _heads(r.tensor(key), hkv, node, "key").float()
    v4 = _heads(r.tensor(value), hkv, node, "value").float()
    b, t = tq.shape[0], tq.shape[1]
    dk, dv = q4.shape[3], v4.shape[3]
    if k4.shape[3] != dk:
        raise ValueError(f"{node.where()}: key head size {k4.shape[3]} differs from the "
                         f"query's {dk}")
    g4 = be4 = None
    if decay is not None:
        dec = r.tensor(decay)
        if dec.ndim != 3 or dec.shape[2] not in (hkv, hkv * dk):
            raise ValueError(f"{node.where()}: decay {tuple(dec.shape)} is not [B, T, {hkv}] "
                             f"or [B, T, {hkv * dk}]")
        g4 = (dec.reshape(b, t, hkv, 1).permute(0, 2, 1, 3) if dec.shape[2] == hkv
              else _heads(dec, hkv, node, "decay")).float()
    if beta is not None:
        bt = r.tensor(beta)
        if bt.ndim != 3 or bt.shape[2] not in (hkv, 1):
            raise ValueError(f"{node.where()}: beta {tuple(bt.shape)} is not [B, T, {hkv}] "
                             "or [B, T, 1]")
        be4 = bt.reshape(b, t, bt.shape[2], 1).permute(0, 2, 1, 3).float()
    if past_state is not None:
        ps = r.tensor(past_state)
        if tuple(ps.shape) != (b, hkv, dk, dv):
            raise ValueError(f"{node.where()}: past_state {tuple(ps.shape)} is not "
                             f"{(b, hkv, dk, dv)}")
        state_dtype, state = ps.dtype, ps.float()
    else:
        state_dtype = tq.dtype
        state = E.zeros((b, hkv, dk, dv), dtype=E.float32, device=tq.device)
    scale = float(at.get("scale", 0.0)) or 1.0 / math.sqrt(dk)
    group = hq // hkv
    outs = []
    for i in range(t):
        k_t, v_t = E.select(k4, 2, i), E.select(v4, 2, i)  # [B, H_kv, d]
        if g4 is not None:
            state = state * E.exp(E.select(g4, 2, i)).unsqueeze(-1)
        if be4 is not None:
            got = E.matmul(k_t.unsqueeze(-2), state).squeeze(-2)  # [B, H_kv, d_v]
            v_t = E.select(be4, 2, i) * (v_t - got)
        state = state + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)
        read = state if group == 1 else E.repeat_interleave(state, group, dim=1)
        q_t = E.select(q4, 2, i)
        outs.append(E.matmul(q_t.unsqueeze(-2), read).squeeze(-2) * scale)  # [B, H_q, d_v]
    out = E.stack(outs, dim=2).permute(0, 2, 1, 3).reshape(b, t, hq * dv)
    return out.to(tq.dtype), state.to(state_dtype)


@op("CausalConvWithState", note="depthwise causal 1-D convolution, bias, past/present "
    "state, activation none/silu/swish")
def causal_conv_with_state(r: Run, node: Node, x: Any, w: Any, bias: Any = None,
                           past_state: Any = None) -> tuple[Tensor, Tensor]:
    act = node.attrs.get("activation", "none")
    if act not in ("none", "silu", "swish"):
        raise ValueError(f"{node.where()}: activation {act!r} is not none, silu or swish")
    t, wt = r.tensor(x), r.tensor(w)
    if t.ndim != 3 or wt.ndim != 3 or wt.shape[0] != t.shape[1] or wt.shape[1] != 1:
        raise ValueError(f"{node.where()}: input {tuple(t.shape)} and weight "
                         f"{tuple(wt.shape)} are not [B, C, L] and [C, 1, k]")
    b, c, _ = t.shape
    k = wt.shape[2]
    if past_state is not None:
        pad = r.tensor(past_state)
        if tuple(pad.shape) != (b, c, k - 1):
            raise ValueError(f"{node.where()}: past_state {tuple(pad.shape)} is not "
                             f"{(b, c, k - 1)}")
        padded = E.cat([pad.to(t.dtype), t], dim=2)
    else:
        padded = E.pad(t, [k - 1, 0])
    y = F.conv1d(padded, wt, r.tensor(bias) if bias is not None else None, groups=c)
    if act != "none":
        y32 = y.float()
        y = (y32 * E.sigmoid(y32)).to(t.dtype)
    state = E.narrow(padded, 2, padded.shape[2] - (k - 1), k - 1)
    return y, state
