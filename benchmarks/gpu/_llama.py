"""A Llama-style decoder (Llama 3's layout: RMSNorm, rotary embeddings in the half-split
layout, grouped-query attention, SwiGLU, tied embeddings) with a static KV cache, written once
over a framework's namespace (``torch`` or ``ember``: the same lines build both), with its
initial weights made once in PyTorch and handed to both as numpy.

The cache is a pair of ``[B, Hkv, T_max, D]`` buffers per layer written in place by
``index_copy_`` at the step's positions; attention reads the whole cache under a mask that
hides later positions, so every decode step has the same shapes whether the position is an
int or a device tensor (what lets ``ember.compile`` or CUDA graphs replay one step).

`greedy_decode` is the decode loop both frameworks run: a prefill of the prompt, then one
token per step at a position held in a device tensor.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np


@dataclass(frozen=True)
class LlamaConfig:
    vocab: int = 128256
    dim: int = 2048
    n_layer: int = 16
    n_head: int = 32
    n_kv_head: int = 8
    hidden: int = 8192
    max_seq: int = 512  # the cache length (prompt + new tokens)
    rope_base: float = 500000.0
    eps: float = 1e-5


LLAMA_1B = LlamaConfig()  # Llama 3.2 1B's shapes
#: the CPU test's model: every piece of the 1B, small enough for float32 on two cores
TINY = LlamaConfig(vocab=256, dim=64, n_layer=2, n_head=4, n_kv_head=2, hidden=160,
                   max_seq=48, rope_base=10000.0)
#: the CPU figure's model (docs/serving.md)
SMALL = LlamaConfig(vocab=2048, dim=256, n_layer=4, n_head=8, n_kv_head=2, hidden=688,
                    max_seq=192, rope_base=10000.0)


def llama(lib: ModuleType, cfg: LlamaConfig, batch: int, device: Any = None,
          dtype: Any = None) -> Any:
    """The model as a ``lib.nn.Module``; ``model(idx, start)`` maps ``[B, T]`` tokens at
    positions ``start ..`` (an int or a 0-d int64 tensor) to logits ``[B, T, vocab]``,
    writing their keys and values into the caches."""
    nn, F = lib.nn, lib.nn.functional
    C, H, KV = cfg.dim, cfg.n_head, cfg.n_kv_head
    D = C // H
    kw = dict(bias=False, device=device, dtype=dtype)

    def rope(x: Any, cos: Any, sin: Any) -> Any:  # x [B, H, T, D]; cos, sin [T, D/2]
        a, b = x[..., :D // 2], x[..., D // 2:]
        return lib.cat([a * cos - b * sin, b * cos + a * sin], -1)

    class Attention(nn.Module):  # type: ignore[misc,name-defined]  # torch or ember nn
        def __init__(self) -> None:
            super().__init__()
            self.q_proj = nn.Linear(C, H * D, **kw)
            self.k_proj = nn.Linear(C, KV * D, **kw)
            self.v_proj = nn.Linear(C, KV * D, **kw)
            self.o_proj = nn.Linear(H * D, C, **kw)
            shape = (batch, KV, cfg.max_seq, D)
            self.register_buffer("k_cache", lib.zeros(shape, device=device, dtype=dtype),
                                 persistent=False)
            self.register_buffer("v_cache", lib.zeros(shape, device=device, dtype=dtype),
                                 persistent=False)

        def forward(self, x: Any, pos: Any, cos: Any, sin: Any, mask: Any) -> Any:
            B, T, _ = x.shape
            q = self.q_proj(x).reshape(B, T, H, D).transpose(1, 2)
            k = self.k_proj(x).reshape(B, T, KV, D).transpose(1, 2)
            v = self.v_proj(x).reshape(B, T, KV, D).transpose(1, 2)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            self.k_cache.index_copy_(2, pos, k)
            self.v_cache.index_copy_(2, pos, v)
            y = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache, mask,
                                               enable_gqa=True)
            return self.o_proj(y.transpose(1, 2).reshape(B, T, C))

    class MLP(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.gate_proj = nn.Linear(C, cfg.hidden, **kw)
            self.up_proj = nn.Linear(C, cfg.hidden, **kw)
            self.down_proj = nn.Linear(cfg.hidden, C, **kw)

        def forward(self, x: Any) -> Any:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Block(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.input_layernorm = nn.RMSNorm(C, eps=cfg.eps, device=device, dtype=dtype)
            self.self_attn = Attention()
            self.post_attention_layernorm = nn.RMSNorm(C, eps=cfg.eps, device=device,
                                                       dtype=dtype)
            self.mlp = MLP()

        def forward(self, x: Any, pos: Any, cos: Any, sin: Any, mask: Any) -> Any:
            x = x + self.self_attn(self.input_layernorm(x), pos, cos, sin, mask)
            return x + self.mlp(self.post_attention_layernorm(x))

    class Llama(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.embed_tokens = nn.Embedding(cfg.vocab, C, device=device, dtype=dtype)
            self.layers = nn.ModuleList([Block() for _ in range(cfg.n_layer)])
            self.norm = nn.RMSNorm(C, eps=cfg.eps, device=device, dtype=dtype)
            self.lm_head = nn.Linear(C, cfg.vocab, **kw)
            self.lm_head.weight = self.embed_tokens.weight  # tied, as Llama 3.2 1B
            inv = 1.0 / cfg.rope_base ** (lib.arange(0, D, 2, device=device,
                                                     dtype=lib.float32) / D)
            ang = lib.arange(cfg.max_seq, device=device, dtype=lib.float32)[:, None] * inv
            self.register_buffer("cos", ang.cos(), persistent=False)  # float32, [T_max, D/2]
            self.register_buffer("sin", ang.sin(), persistent=False)
            self.register_buffer("keys", lib.arange(cfg.max_seq, device=device),
                                 persistent=False)

        def forward(self, idx: Any, start: Any) -> Any:
            T = idx.shape[1]
            pos = lib.arange(T, device=idx.device) + start  # an int or a 0-d tensor start
            x = self.embed_tokens(idx)
            cos = self.cos.index_select(0, pos).to(x.dtype)
            sin = self.sin.index_select(0, pos).to(x.dtype)
            mask = self.keys[None, :] <= pos[:, None]  # True: may attend
            for layer in self.layers:
                x = layer(x, pos, cos, sin, mask)
            return self.lm_head(self.norm(x))

    return Llama()


def init_state(cfg: LlamaConfig, seed: int = 0, std: float = 0.02) -> dict[str, np.ndarray]:
    """Initial weights made by PyTorch on the CPU from ``seed``: Linear and Embedding weights
    normal(0, std), the residual projections (``o_proj``, ``down_proj``) normal(0, std /
    sqrt(2 n_layer)), RMSNorm weights one.  (At GPT-2's 0.02 a random model's greedy decode
    mostly repeats a token, through the tied head; the checks use a larger ``std``.)"""
    import torch

    torch.manual_seed(seed)
    model = llama(torch, cfg, 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 2:
                residual = name.endswith(("o_proj.weight", "down_proj.weight"))
                torch.nn.init.normal_(p, 0.0, std / math.sqrt(2 * cfg.n_layer) if residual
                                      else std)
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def greedy_decode(lib: ModuleType, model: Any, prompt: Any, new_tokens: int,
                  step: Callable[[Any, Any], Any] | None = None) -> Any:
    """``prompt`` ``[B, T]`` and ``new_tokens`` greedy tokens after it, ``[B, T + n]``: a
    prefill at position 0, then ``step(token [B, 1], position)`` (default: the model's argmax)
    per token with the position as a 0-d int64 device tensor."""
    step = step or greedy_step(model)
    T = prompt.shape[1]
    out = [prompt]
    token = model(prompt, 0)[:, -1].argmax(-1)
    for i in range(new_tokens):
        out.append(token[:, None])
        if i + 1 < new_tokens:
            pos = lib.tensor(T + i, device=prompt.device)
            token = step(token[:, None], pos)
    return lib.cat(out, 1)


def greedy_step(model: Any) -> Callable[[Any, Any], Any]:
    """One decode step: the next token's argmax."""
    return lambda token, pos: model(token, pos)[:, -1].argmax(-1)
