"""A character-level GPT: token and position embeddings, pre-LayerNorm blocks of causal
self-attention (separate q, k, v projections, masked softmax) and a 4x GELU MLP, a final
LayerNorm and the language-model head; AdamW with gradient-norm clipping at 1.0.

The model is written once, over a framework's namespace (``torch`` or ``ember``): ember's
``nn`` follows PyTorch's names, so the same lines build both.  The data are random token
sequences over a 65-character vocabulary (tiny Shakespeare's size): a step's cost does not
depend on the text.
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import numpy as np

import ember
from ember import optim

from ._harness import ModelBench

VOCAB, N_EMBD, N_HEAD, N_LAYER, BLOCK, BATCH = 65, 64, 4, 2, 32, 16
LR, WEIGHT_DECAY, CLIP = 1e-3, 0.1, 1.0


def gpt(lib: ModuleType, vocab: int = VOCAB, n_embd: int = N_EMBD, n_head: int = N_HEAD,
        n_layer: int = N_LAYER, block: int = BLOCK) -> Any:
    """The GPT as a ``lib.nn.Module`` (``lib`` is ``torch`` or ``ember``)."""
    nn, F = lib.nn, lib.nn.functional

    class CausalSelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.query = nn.Linear(n_embd, n_embd)
            self.key = nn.Linear(n_embd, n_embd)
            self.value = nn.Linear(n_embd, n_embd)
            self.proj = nn.Linear(n_embd, n_embd)
            self.register_buffer("mask", lib.tril(lib.ones(block, block)).reshape(
                1, 1, block, block), persistent=False)

        def forward(self, x: Any) -> Any:
            B, T, C = x.shape
            hs = C // n_head
            q = self.query(x).reshape(B, T, n_head, hs).transpose(1, 2)
            k = self.key(x).reshape(B, T, n_head, hs).transpose(1, 2)
            v = self.value(x).reshape(B, T, n_head, hs).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, C)
            return self.proj(y)

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(n_embd, 4 * n_embd)
            self.proj = nn.Linear(4 * n_embd, n_embd)

        def forward(self, x: Any) -> Any:
            return self.proj(F.gelu(self.fc(x)))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1 = nn.LayerNorm(n_embd)
            self.attn = CausalSelfAttention()
            self.ln2 = nn.LayerNorm(n_embd)
            self.mlp = MLP()

        def forward(self, x: Any) -> Any:
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok_emb = nn.Embedding(vocab, n_embd)
            self.pos_emb = nn.Embedding(block, n_embd)
            self.blocks = nn.ModuleList([Block() for _ in range(n_layer)])
            self.ln_f = nn.LayerNorm(n_embd)
            self.head = nn.Linear(n_embd, vocab)

        def forward(self, idx: Any) -> Any:
            T = idx.shape[1]
            pos = lib.arange(T, device=idx.device)
            x = self.tok_emb(idx) + self.pos_emb(pos)
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln_f(x))

    return GPT()


class GPTBench(ModelBench):
    name = "gpt"
    title = (f"char-level GPT: {N_LAYER} blocks, {N_HEAD} heads, n_embd {N_EMBD}, block "
             f"{BLOCK}, batch {BATCH}, vocab {VOCAB}; AdamW, grad-norm clip {CLIP}")
    reps = 5
    clip = CLIP

    def data(self, rng: np.random.Generator) -> list[tuple[np.ndarray, ...]]:
        out = []
        for _ in range(8):
            seq = rng.integers(0, VOCAB, (BATCH, BLOCK + 1))
            out.append((seq[:, :-1].copy(), seq[:, 1:].copy()))
        return out

    def torch_model(self) -> Any:
        import torch

        return gpt(torch)

    def ember_model(self) -> ember.nn.Module:
        return gpt(ember)  # type: ignore[no-any-return]  # an ember.nn.Module

    def torch_optimizer(self, params: Any) -> Any:
        import torch

        return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)

    def ember_optimizer(self, params: Any) -> optim.Optimizer:
        return optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)
