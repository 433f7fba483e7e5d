"""GPT-2 small (nanoGPT's layout and parameter names), written once over a framework's
namespace (``torch`` or ``ember``: ember's ``nn`` follows PyTorch's names, so the same lines
build both), with GPT-2's initialisation done once in PyTorch and handed to both as numpy.

Token and learned position embeddings, pre-LayerNorm blocks of causal self-attention (one
``c_attn`` Linear for q, k and v, split into heads by reshape + permute,
``scaled_dot_product_attention(is_causal=True)``) and a 4x MLP with GELU's tanh form, a final
LayerNorm and the language-model head tied to the token embedding; the loss is cross-entropy
over the flattened logits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = 50304  # GPT-2's 50257 padded to a multiple of 64, as nanoGPT
    block: int = 1024
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768


GPT2_SMALL = GPTConfig()
#: the CPU test's model: every layer of GPT-2, small enough for float32 on two cores
TINY = GPTConfig(vocab=256, block=32, n_layer=2, n_head=4, n_embd=64)


def gpt2(lib: ModuleType, cfg: GPTConfig, device: Any = None) -> Any:
    """GPT-2 as a ``lib.nn.Module`` on ``device``; ``model(idx, targets)`` returns the loss,
    ``model(idx)`` the logits."""
    nn, F = lib.nn, lib.nn.functional
    C, H = cfg.n_embd, cfg.n_head

    class CausalSelfAttention(nn.Module):  # type: ignore[misc,name-defined]  # torch or ember nn
        def __init__(self) -> None:
            super().__init__()
            self.c_attn = nn.Linear(C, 3 * C, device=device)
            self.c_proj = nn.Linear(C, C, device=device)

        def forward(self, x: Any) -> Any:
            B, T, _ = x.shape
            # [B, T, 3C] -> 3 x [B, H, T, C/H]: nanoGPT's split + view + transpose in one
            q, k, v = self.c_attn(x).reshape(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.permute(0, 2, 1, 3).reshape(B, T, C))

    class MLP(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.c_fc = nn.Linear(C, 4 * C, device=device)
            self.c_proj = nn.Linear(4 * C, C, device=device)

        def forward(self, x: Any) -> Any:
            return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))

    class Block(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.ln_1 = nn.LayerNorm(C, device=device)
            self.attn = CausalSelfAttention()
            self.ln_2 = nn.LayerNorm(C, device=device)
            self.mlp = MLP()

        def forward(self, x: Any) -> Any:
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(cfg.vocab, C, device=device),
                wpe=nn.Embedding(cfg.block, C, device=device),
                h=nn.ModuleList([Block() for _ in range(cfg.n_layer)]),
                ln_f=nn.LayerNorm(C, device=device)))
            self.lm_head = nn.Linear(C, cfg.vocab, bias=False, device=device)
            self.lm_head.weight = self.transformer.wte.weight  # tied embeddings

        def forward(self, idx: Any, targets: Any = None) -> Any:
            T = idx.shape[1]
            tr = self.transformer
            pos = lib.arange(T, device=idx.device)
            x = tr.wte(idx) + tr.wpe(pos)
            for block in tr.h:
                x = block(x)
            logits = self.lm_head(tr.ln_f(x))
            if targets is None:
                return logits
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    return GPT()


def init_state(cfg: GPTConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """GPT-2's initial weights, made by PyTorch on the CPU from ``seed``: every Linear and
    Embedding weight normal(0, 0.02), biases zero, LayerNorms one and zero, and the residual
    projections (``c_proj``) normal(0, 0.02 / sqrt(2 n_layer)).  Both tied keys map to one
    array."""
    import torch

    torch.manual_seed(seed)
    model = gpt2(torch, cfg)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.Linear, torch.nn.Embedding)):
                torch.nn.init.normal_(m.weight, 0.0, 0.02)
                if getattr(m, "bias", None) is not None:
                    torch.nn.init.zeros_(m.bias)
        for name, p in model.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * cfg.n_layer))
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def count_params(model: Any) -> int:
    """Scalars in the distinct parameters (the tied embedding once), in either framework."""
    return sum(math.prod(p.shape) for p in model.parameters())


def param_groups(model: Any, weight_decay: float) -> list[dict[str, Any]]:
    """nanoGPT's groups: weight decay on the matrices (Linear weights, embeddings), none on
    biases and LayerNorm parameters."""
    params = list(model.parameters())
    return [{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]


def batches(cfg: GPTConfig, batch: int, n: int, seed: int = 0
            ) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n`` batches of random token ids: inputs ``[batch, block]`` and next-token targets."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        seq = rng.integers(0, cfg.vocab, (batch, cfg.block + 1), dtype=np.int64)
        out.append((seq[:, :-1].copy(), seq[:, 1:].copy()))
    return out
