"""Token sampling on the device (greedy, temperature, top-k, top-p) and `generate`, a decode
loop over a model with KV caches, compiled into one recorded step for every position.

The model contract is small: ``model(tokens, start)`` maps ``[B, T]`` int64 tokens at
positions ``start .. start + T - 1`` to logits ``[B, T, V]``, appending to the KV caches its
layers hold (`GroupedQueryAttention.setup_cache`); ``start`` may be an int or a one-element
integer tensor.
"""

from __future__ import annotations

from typing import Any

from .. import _creation as cr, _dtype as dt
from .._compile import compile as _compile
from .._elementwise import where
from .._grad_mode import no_grad
from .._manipulation import cat
from .._random import Generator
from .._tensor import Tensor

__all__ = ["generate", "sample"]


def sample(logits: Tensor, temperature: float = 1.0, top_k: int | None = None,
           top_p: float | None = None, *, generator: Generator | None = None) -> Tensor:
    """One token per row of ``logits`` ``[..., V]`` (int64 ``[...]``), drawn on the device.

    ``temperature=0`` is greedy (``argmax``); otherwise the logits are divided by
    ``temperature``, cut to the ``top_k`` largest, then to the smallest set of the largest
    whose probabilities reach ``top_p`` (the token that crosses ``top_p`` is kept, as Meta's
    Llama does), and a token is drawn by an exponential race (``argmax(logit - log E)``,
    ``E ~ Exp(1)``: token ``i`` wins with probability ``softmax(logits)[i]``) with
    ``generator``'s numbers. Ties in ``top_k`` keep every tied value.  No host reads: a
    compiled step draws new numbers at every replay.

    Examples
    --------
    >>> import ember
    >>> from ember.nn.generation import sample
    >>> logits = ember.tensor([[0.0, 5.0, 1.0], [2.0, 0.0, 0.0]])
    >>> sample(logits, 0.0).tolist()                           # greedy
    [1, 0]
    >>> sample(logits, 1.0, top_k=1, generator=ember.Generator(0)).tolist()
    [1, 0]
    """
    if logits.ndim == 0 or not logits.dtype.is_floating_point:
        raise ValueError(f"sample: logits must be floating [..., V], got {logits.dtype.name} "
                         f"{logits.shape}")
    if temperature < 0:
        raise ValueError(f"sample: temperature must be >= 0, got {temperature}")
    if top_k is not None and not 1 <= top_k:
        raise ValueError(f"sample: top_k must be >= 1, got {top_k}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"sample: top_p must be in (0, 1], got {top_p}")
    if temperature == 0:
        return logits.argmax(-1)
    x = (logits if logits.dtype is dt.float64 else logits.to(dtype=dt.float32)) / temperature
    ninf = float("-inf")
    if top_k is not None and top_k < x.shape[-1]:
        kth = x.topk(top_k, -1).values[..., -1:]
        x = where(x < kth, ninf, x)
    order = None
    if top_p is not None and top_p < 1.0:
        x, order = x.sort(-1, descending=True)
        p = x.softmax(-1)
        x = where(p.cumsum(-1) - p > top_p, ninf, x)  # mass before the token already > top_p
    u = cr.rand(x.shape, generator=generator, device=x.device)
    choice = (x - (-(1.0 - u).log()).log()).argmax(-1)  # 1 - u > 0: u is in [0, 1)
    if order is None:
        return choice
    return order.gather(-1, choice.unsqueeze(-1)).squeeze(-1)


def generate(model: Any, prompt: Tensor, max_new_tokens: int, *, temperature: float = 0.0,
             top_k: int | None = None, top_p: float | None = None,
             generator: Generator | None = None, compile: bool = True) -> Tensor:
    """``prompt`` ``[B, T]`` followed by ``max_new_tokens`` tokens, ``[B, T + n]``.

    The prompt runs once (prefill, position 0); each new token is one call of a decode step
    at a position held in a device tensor, so with ``compile=True`` the step is traced once
    and replayed for every later position (one recording; a CUDA graph on ``cuda:N``).
    ``model``'s caches must hold ``T + max_new_tokens`` positions and are written from
    position 0.  Runs under `ember.no_grad`.

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> from ember.nn.generation import generate
    >>> class Tiny(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.emb = nn.Embedding(11, 8)
    ...         self.attn = nn.GroupedQueryAttention(8, 2, 1, rotary=nn.RotaryEmbedding(4))
    ...         self.head = nn.Linear(8, 11)
    ...     def forward(self, tokens, start):
    ...         return self.head(self.attn(self.emb(tokens), start))
    >>> model = Tiny()
    >>> _ = model.attn.setup_cache(1, 16)
    >>> generate(model, ember.tensor([[1, 2, 3]]), 4).shape
    (1, 7)
    """
    if prompt.ndim != 2 or prompt.dtype.kind not in "iu":
        raise ValueError(f"generate: prompt must be integer [B, T], got {prompt.dtype.name} "
                         f"{prompt.shape}")

    def step(tokens: Tensor, start: Tensor) -> Tensor:
        return sample(model(tokens, start)[:, -1], temperature, top_k, top_p,
                      generator=generator)

    decode = _compile(step) if compile else step
    out = [prompt]
    with no_grad():
        token = sample(model(prompt, 0)[:, -1], temperature, top_k, top_p, generator=generator)
        for i in range(max_new_tokens):
            out.append(token.unsqueeze(1).to(dtype=prompt.dtype))
            if i + 1 == max_new_tokens:
                break
            pos = cr.tensor(prompt.shape[1] + i, dtype=dt.int64, device=prompt.device)
            token = decode(token.unsqueeze(1), pos)
    return cat(out, 1) if max_new_tokens > 0 else prompt
