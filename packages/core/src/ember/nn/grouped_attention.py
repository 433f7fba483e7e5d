"""Llama-style blocks: `GroupedQueryAttention` (with rotary embeddings and a `KVCache`) and
the `SwiGLU` feed-forward, with Hugging Face's Llama parameter names (``q_proj``, ``k_proj``,
``v_proj``, ``o_proj``; ``gate_proj``, ``up_proj``, ``down_proj``) so its weights load by
name."""

from __future__ import annotations

from .. import functional as F
from .._random import Generator
from .._tensor import Tensor
from .attention import scaled_dot_product_attention
from .kv_cache import KVCache
from .linear import DeviceLike, DTypeLike, Linear
from .module import Module
from .rotary import RotaryEmbedding

__all__ = ["GroupedQueryAttention", "SwiGLU"]


class GroupedQueryAttention(Module):
    """Causal self-attention of ``num_heads`` query heads over ``num_kv_heads`` key/value
    heads (each shared by ``num_heads // num_kv_heads`` query heads; ``num_kv_heads =
    num_heads`` is multi-head attention, 1 is multi-query), on ``[B, T, E]`` inputs.

    ``rotary`` (a `RotaryEmbedding` over ``head_dim``, shareable between layers) turns queries
    and keys by their positions.  With a cache (``setup_cache(batch, max_len)`` or an assigned
    ``kv_cache``), ``attn(x, start)`` appends the keys and values of ``x``'s ``T`` positions
    at ``start`` and attends over every cached position up to each query's own; ``start`` may
    be an int or an integer tensor on the device (one compiled step for every position, see
    `KVCache`). Without one, ``attn(x)`` is plain causal attention over ``x``.

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> attn = nn.GroupedQueryAttention(16, 4, 2, rotary=nn.RotaryEmbedding(4, max_seq_len=32))
    >>> attn.setup_cache(1, 32)
    KVCache(shape=(1, 2, 32, 4))
    >>> attn(ember.ones(1, 5, 16), 0).shape          # the prompt
    (1, 5, 16)
    >>> attn(ember.ones(1, 1, 16), ember.tensor(5)).shape   # one decode step
    (1, 1, 16)
    """

    kv_cache: KVCache | None

    def __init__(self, embed_dim: int, num_heads: int, num_kv_heads: int | None = None,
                 bias: bool = False, rotary: RotaryEmbedding | None = None, *,
                 device: DeviceLike = None, dtype: DTypeLike = None,
                 generator: Generator | None = None) -> None:
        super().__init__()
        kv = num_heads if num_kv_heads is None else num_kv_heads
        if num_heads <= 0 or kv <= 0 or embed_dim % num_heads or num_heads % kv:
            raise ValueError(f"GroupedQueryAttention: embed_dim ({embed_dim}) must divide by "
                             f"num_heads ({num_heads}), and num_heads by num_kv_heads ({kv})")
        self.embed_dim, self.num_heads, self.num_kv_heads = embed_dim, num_heads, kv
        self.head_dim = d = embed_dim // num_heads
        if rotary is not None and rotary.dim != d:
            raise ValueError(f"GroupedQueryAttention: rotary.dim ({rotary.dim}) must be "
                             f"head_dim ({d})")
        kw = dict(bias=bias, device=device, dtype=dtype, generator=generator)
        self.q_proj = Linear(embed_dim, num_heads * d, **kw)  # type: ignore[arg-type]
        self.k_proj = Linear(embed_dim, kv * d, **kw)  # type: ignore[arg-type]
        self.v_proj = Linear(embed_dim, kv * d, **kw)  # type: ignore[arg-type]
        self.o_proj = Linear(num_heads * d, embed_dim, **kw)  # type: ignore[arg-type]
        self.rotary = rotary
        self.kv_cache = None

    def setup_cache(self, batch_size: int, max_len: int) -> KVCache:
        """Give this layer a fresh `KVCache` on its weights' device and dtype."""
        w = self.k_proj.weight
        self.kv_cache = KVCache(batch_size, self.num_kv_heads, max_len, self.head_dim,
                                device=w.device, dtype=w.dtype)
        return self.kv_cache

    def forward(self, x: Tensor, start: int | Tensor = 0) -> Tensor:
        b, t, _ = x.shape
        h, kv, d = self.num_heads, self.num_kv_heads, self.head_dim
        q = self.q_proj(x).reshape(b, t, h, d).transpose(1, 2)
        k = self.k_proj(x).reshape(b, t, kv, d).transpose(1, 2)
        v = self.v_proj(x).reshape(b, t, kv, d).transpose(1, 2)
        if self.rotary is not None:
            q, k = self.rotary(q, start), self.rotary(k, start)
        if self.kv_cache is None:
            y = scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            k, v = self.kv_cache.update(k, v, start)
            mask = self.kv_cache.mask(t, start)
            y = scaled_dot_product_attention(q, k, v, mask, enable_gqa=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, h * d))  # type: ignore[no-any-return]

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"num_kv_heads={self.num_kv_heads}")


class SwiGLU(Module):
    """Llama's feed-forward: ``down_proj(silu(gate_proj(x)) * up_proj(x))``, ``dim`` ->
    ``hidden_dim`` -> ``dim``, without biases by default.

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> nn.SwiGLU(8, 24)(ember.ones(2, 8)).shape
    (2, 8)
    """

    def __init__(self, dim: int, hidden_dim: int, bias: bool = False, *,
                 device: DeviceLike = None, dtype: DTypeLike = None,
                 generator: Generator | None = None) -> None:
        super().__init__()
        kw = dict(bias=bias, device=device, dtype=dtype, generator=generator)
        self.gate_proj = Linear(dim, hidden_dim, **kw)  # type: ignore[arg-type]
        self.up_proj = Linear(dim, hidden_dim, **kw)  # type: ignore[arg-type]
        self.down_proj = Linear(hidden_dim, dim, **kw)  # type: ignore[arg-type]

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(  # type: ignore[no-any-return]
            F.silu(self.gate_proj(x)) * self.up_proj(x))
