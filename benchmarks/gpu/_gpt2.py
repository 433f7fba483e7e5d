"""GPT-2 small (nanoGPT's layout and parameter names), written once over a framework's
namespace (``torch`` or ``ember``: ember's ``nn`` follows PyTorch's names, so the same lines
build both), with GPT-2's initialisation done once in PyTorch and handed to both as numpy.

Token and learned position embeddings, pre-LayerNorm blocks of causal self-attention (one
``c_attn`` Linear for q, k and v, split into heads by reshape + permute,
``scaled_dot_product_attention(is_causal=True)``) and a 4x MLP with GELU's tanh form, a final
LayerNorm and the language-model head tied to the token embedding; the loss is cross-entropy
over the flattened logits.

Also each framework's training step over that model (`torch_side`, `ember_side`: AdamW with
nanoGPT's settings, forward and loss under bf16 autocast when asked) and its device-memory
counter (`TorchMemory`, `EmberMemory`), which ``gpt2.py`` runs, checks and times.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

LR, BETAS, WEIGHT_DECAY = 6e-4, (0.9, 0.95), 0.1  # nanoGPT's AdamW


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


# -- training steps in both frameworks --------------------------------------------------------

@dataclass
class Setup:
    """What every mode shares: the model, device, precision, weights and batches."""

    cfg: GPTConfig
    device: str  # ember's hardware device: "cuda:0", "cpu", "triton-interpret"
    batch: int
    precision: str  # "bf16" (autocast), "tf32" (float32 with TF32 matmuls) or "fp32"
    state: dict[str, Any]
    data: list[tuple[Any, Any]]

    @property
    def device_type(self) -> str:
        return self.device.split(":")[0]

    @property
    def torch_device(self) -> str:
        """PyTorch's device: the same GPU, or the CPU for ember's CPU-side devices (``cpu``,
        ``triton-interpret``)."""
        return self.device if self.device_type == "cuda" else "cpu"

    @property
    def tokens(self) -> int:
        return self.batch * self.cfg.block


@dataclass
class Side:
    """One mode, built: ``step(i)`` trains on batch ``i`` (cycling) and returns the loss as a
    device tensor (nothing waits for it); ``sync()`` waits for the device."""

    step: Callable[[int], Any]
    sync: Callable[[], None]
    model: Any
    #: bytes a mode holds outside its framework's default allocator (a CUDA graph's pool)
    extra_bytes: Callable[[], int] = lambda: 0
    info: dict[str, Any] = field(default_factory=dict)

def _torch_autocast(setup: Setup) -> Any:
    import torch

    if setup.precision != "bf16":
        return contextlib.nullcontext()
    return torch.autocast(setup.torch_device.split(":")[0], dtype=torch.bfloat16)


def _ember_autocast(setup: Setup) -> Any:
    import ember

    if setup.precision != "bf16":
        return contextlib.nullcontext()
    return ember.autocast(setup.device_type, dtype=ember.bfloat16)


def torch_side(setup: Setup, compiled: bool | str) -> Side:
    """PyTorch: ``zero_grad``, forward and loss under autocast, ``backward``, fused AdamW;
    ``compiled``: the model through ``torch.compile`` (a string: its ``mode``)."""
    import torch

    dev = torch.device(setup.torch_device)
    model = gpt2(torch, setup.cfg, device=dev)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in setup.state.items()})
    assert model.lm_head.weight is model.transformer.wte.weight
    opt = torch.optim.AdamW(param_groups(model, WEIGHT_DECAY), lr=LR, betas=BETAS,
                            fused=dev.type == "cuda")
    mode = compiled if isinstance(compiled, str) else None
    fwd = torch.compile(model, mode=mode) if compiled else model
    data = [(torch.from_numpy(x).to(dev), torch.from_numpy(y).to(dev)) for x, y in setup.data]

    def step(i: int) -> Any:
        x, y = data[i % len(data)]
        opt.zero_grad(set_to_none=True)
        with _torch_autocast(setup):
            loss = fwd(x, y)
        loss.backward()
        opt.step()
        return loss

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    return Side(step, sync, model)


def ember_side(setup: Setup, compiled: bool, fused: bool = False) -> Side:
    """ember: forward and loss under autocast, ``loss.backward()``, ``opt.step(grads)``; with
    ``compiled`` the whole step goes through ``ember.compile``; ``fused`` runs it on
    ``autodiff<fusion<device>>``."""
    import ember

    dev = f"autodiff<fusion<{setup.device}>>" if fused else f"autodiff<{setup.device}>"
    model = gpt2(ember, setup.cfg, device=dev)
    model.load_state_dict(setup.state)
    if model.lm_head.weight is not model.transformer.wte.weight:
        raise AssertionError("ember: lm_head.weight and transformer.wte.weight are no longer "
                             "one tensor after load_state_dict")
    opt = ember.optim.AdamW(param_groups(model, WEIGHT_DECAY), lr=LR, betas=BETAS)
    data = [(ember.tensor(x, device=dev), ember.tensor(y, device=dev)) for x, y in setup.data]

    def train_step(x: Any, y: Any) -> Any:
        with _ember_autocast(setup):
            loss = model(x, y)
        opt.step(loss.backward())
        return loss

    fn = ember.compile(train_step) if compiled else train_step

    def step(i: int) -> Any:
        return fn(*data[i % len(data)])

    side = Side(step, ember.device(setup.device).synchronize, model)
    side.info["data"] = data  # the batch tensors the steps are given
    if compiled:
        side.extra_bytes = lambda: _graph_pool_bytes(fn)
        side.info["compiled"] = fn
    return side


def _graph_pool_bytes(fn: Any) -> int:
    """Bytes the CUDA graphs of a compiled function's programs keep in their private pools
    (intermediates live there for the graph's lifetime)."""
    total = 0
    for program in fn.programs():
        for kept in getattr(program.runner, "keep", None) or ():
            total += int(getattr(kept, "total_bytes", lambda: 0)())
    return total


# -- memory counters ---------------------------------------------------------------------------

class TorchMemory:
    def __init__(self, device: str) -> None:
        import torch

        self.torch = torch
        self.dev = torch.device(device) if device.startswith("cuda") else None

    def available(self) -> bool:
        return self.dev is not None

    def in_use(self) -> int:
        return int(self.torch.cuda.memory_allocated(self.dev)) if self.dev else 0

    def reset_peak(self) -> None:
        if self.dev:
            self.torch.cuda.reset_peak_memory_stats(self.dev)

    def peak(self) -> int:
        return int(self.torch.cuda.max_memory_allocated(self.dev)) if self.dev else 0

    def stop(self) -> None:
        pass


class EmberMemory:
    """ember's device memory layer: CuPy's pool (``CupyMemory.peak_bytes``) on the GPU."""

    def __init__(self, device: str) -> None:
        import ember

        self.memory = getattr(ember.device(device).backend, "memory", None)
        if not hasattr(self.memory, "peak_bytes"):
            self.memory = None

    def available(self) -> bool:
        return self.memory is not None

    def in_use(self) -> int:
        return int(self.memory.stats()["used_bytes"]) if self.memory else 0

    def reset_peak(self) -> None:
        if self.memory:
            self.memory.reset_peak()

    def peak(self) -> int:
        return int(self.memory.peak_bytes()) if self.memory else 0

    def stop(self) -> None:  # take the counting out of the allocation path before timing
        if self.memory:
            self.memory.reset_peak(track=False)
