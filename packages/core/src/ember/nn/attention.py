"""`MultiheadAttention` with PyTorch's packed ``in_proj_weight`` layout, and the functional
`scaled_dot_product_attention`."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .. import _creation as cr, functional as F
from .._apply import apply
from .._errors import ShapeError
from .._random import Generator
from .._tensor import Tensor
from ..amp._state import AUTOCAST, autocast_inputs
from ..ops import composite as cops
from . import init
from .linear import DeviceLike, DTypeLike, Linear
from .module import Module

if TYPE_CHECKING:
    from .kv_cache import KVCache

__all__ = ["MultiHeadAttention", "MultiheadAttention", "attention_weights", "causal_mask",
           "scaled_dot_product_attention"]


def causal_mask(length: int, source_length: int | None = None, *,
                device: DeviceLike = None) -> Tensor:
    """A bool mask, True where position ``i`` may *not* attend to ``j > i``."""
    s = length if source_length is None else source_length
    i = cr.arange(length, device=device).unsqueeze(1)
    j = cr.arange(s, device=device).unsqueeze(0)
    return j > i


def _additive(mask: Tensor, dtype: object) -> Tensor:
    """A float mask to add to scores: bool masks become 0 / -inf (True = masked out)."""
    if mask.dtype.is_bool:
        return cr.zeros(mask.shape, device=mask.device, dtype=dtype).masked_fill(  # type: ignore[arg-type]
            mask, float("-inf"))
    return mask


def attention_weights(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
                      dropout_p: float = 0.0, is_causal: bool = False,
                      scale: float | None = None,
                      generator: Generator | None = None) -> tuple[Tensor, Tensor]:
    """``softmax(q k^T * scale + mask) v`` and the weights; ``mask`` is additive (float)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q * scale) @ k.transpose(-1, -2)
    if is_causal:
        scores = scores + _additive(causal_mask(q.shape[-2], k.shape[-2], device=q.device),
                                    scores.dtype)
    if mask is not None:
        scores = scores + mask.to(dtype=scores.dtype)
    weights = scores.softmax(-1)
    if dropout_p > 0.0:
        weights = F.dropout(weights, dropout_p, True, generator)
    return weights @ v, weights


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor,
                                 attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False, *,
                                 generator: Generator | None = None) -> Tensor:
    """``softmax(q k^T / sqrt(d) + mask) v`` over ``[..., L, D]`` queries, as PyTorch's
    ``F.scaled_dot_product_attention``.

    A bool ``attn_mask`` is True where attention *is* allowed (PyTorch's convention for this
    function; `MultiheadAttention` masks use the opposite one, as in PyTorch); a float mask is
    added to the scores.  ``dropout_p`` applies whenever it is positive.  ``is_causal`` aligns
    the mask top-left (query ``i`` sees keys ``j <= i``), as PyTorch; a query block at an offset
    into a KV cache passes its mask instead (`ember.nn.KVCache.mask`).

    ``enable_gqa=True`` allows grouped-query attention, as PyTorch 2.5+: ``key`` and ``value``
    have ``Hkv`` heads (axis -3), ``query`` ``H``, a multiple of ``Hkv``; query head ``h``
    reads key/value head ``h // (H // Hkv)`` (PyTorch's ``repeat_interleave`` order).

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> q = ember.ones(1, 3, 4)
    >>> nn.scaled_dot_product_attention(q, q, q, is_causal=True).shape
    (1, 3, 4)
    """
    if enable_gqa:
        key, value = _repeat_kv(query, key, "key"), _repeat_kv(query, value, "value")
    if AUTOCAST:  # `ember.autocast`: the autocast dtype, a float mask too (ember.amp._policy)
        query, key, value, attn_mask = autocast_inputs(cops.scaled_dot_product_attention,
                                                       (query, key, value, attn_mask))
    if not dropout_p > 0.0 and _fusable(query, key, value, attn_mask):
        args = (query, key, value) if attn_mask is None else (query, key, value, attn_mask)
        out: Tensor = apply(cops.scaled_dot_product_attention, *args,
                            scale=1.0 / math.sqrt(query.shape[-1]) if scale is None
                            else float(scale), causal=bool(is_causal),
                            mask=attn_mask is not None)[0]
        return out
    mask = None
    if attn_mask is not None:
        mask = _additive(attn_mask.logical_not(), query.dtype) if attn_mask.dtype.is_bool \
            else attn_mask
    out, _ = attention_weights(query, key, value, mask, dropout_p, is_causal, scale, generator)
    return out


def _repeat_kv(q: Tensor, kv: Tensor, name: str) -> Tensor:
    """``kv`` ``[..., Hkv, S, D]`` with each head repeated for its ``H // Hkv`` query heads."""
    if q.ndim < 3 or kv.ndim != q.ndim:
        raise ShapeError(f"scaled_dot_product_attention: enable_gqa needs query and {name} "
                         f"with a head axis (-3) and the same number of axes, got query "
                         f"{q.shape} and {name} {kv.shape}")
    h, hkv = q.shape[-3], kv.shape[-3]
    if hkv == h:
        return kv
    if hkv == 0 or h % hkv:
        raise ShapeError(f"scaled_dot_product_attention: enable_gqa needs the query's heads "
                         f"({h}) to be a multiple of the {name}'s heads ({hkv})")
    lead, (s, d) = kv.shape[:-3], kv.shape[-2:]
    return kv.unsqueeze(-3).expand(*lead, hkv, h // hkv, s, d).reshape(*lead, h, s, d)


def _fusable(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> bool:
    """Whether `ember.ops.composite.scaled_dot_product_attention` takes these as they are:
    one float dtype and batch shape, non-empty rows, a mask that broadcasts to the scores
    without widening them and needs no gradient, and a device with the kernel."""
    d = q._device
    if not (q.dtype.is_floating_point and k._dtype is q._dtype and v._dtype is q._dtype
            and k._device is d and v._device is d and q.ndim >= 2 and k.ndim == q.ndim
            and v.ndim == q.ndim and q.shape[:-2] == k.shape[:-2] == v.shape[:-2]
            and q.shape[-1] == k.shape[-1] and k.shape[-2] == v.shape[-2]
            and q.shape[-2] > 0 and k.shape[-2] > 0 and q.shape[-1] > 0):
        return False
    if mask is not None:
        scores = (*q.shape[:-1], k.shape[-2])
        if (mask._device is not d or mask.requires_grad or mask.ndim > len(scores)
                or not (mask.dtype.is_bool or mask._dtype is q._dtype)
                or any(m not in (1, n) for m, n in zip(mask.shape[::-1], scores[::-1],
                                                         strict=False))):
            return False
    return d.implements(cops.scaled_dot_product_attention)


class MultiheadAttention(Module):
    """Multi-head attention, parameter for parameter as PyTorch's ``nn.MultiheadAttention``.

    ``in_proj_weight[3 E, E]`` stacks the query, key and value projections, ``in_proj_bias[3 E]``
    their biases, ``out_proj`` is a `Linear`.  Inputs are ``[L, N, E]``, or ``[N, L, E]`` with
    ``batch_first=True``.

    ``attn_mask`` is ``[L, S]`` or ``[N * num_heads, L, S]``; ``key_padding_mask`` is ``[N, S]``;
    bool masks are True where attention is not allowed, float masks are added to the scores.
    # Note: ``is_causal=True`` builds the causal mask itself; PyTorch treats it only as a hint
    # about a mask you also pass.

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> mha = nn.MultiheadAttention(8, 2, batch_first=True)
    >>> out, weights = mha(ember.ones(3, 5, 8), ember.ones(3, 5, 8), ember.ones(3, 5, 8))
    >>> out.shape, weights.shape
    ((3, 5, 8), (3, 5, 5))
    """

    in_proj_weight: Tensor
    in_proj_bias: Tensor | None

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 batch_first: bool = False, *, device: DeviceLike = None,
                 dtype: DTypeLike = None, generator: Generator | None = None) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads "
                             f"({num_heads})")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.generator = generator
        self.register_parameter("in_proj_weight",
                                cr.empty(3 * embed_dim, embed_dim, device=device, dtype=dtype))
        if bias:
            self.register_parameter("in_proj_bias",
                                    cr.zeros(3 * embed_dim, device=device, dtype=dtype))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, device=device, dtype=dtype,
                               generator=generator)
        init.xavier_uniform_(self.in_proj_weight, generator=generator)
        if self.out_proj.bias is not None:
            init.zeros_(self.out_proj.bias)

    def forward(self, query: Tensor, key: Tensor, value: Tensor,
                key_padding_mask: Tensor | None = None, need_weights: bool = True,
                attn_mask: Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False, *, kv_cache: KVCache | None = None,
                cache_start: int | Tensor = 0) -> tuple[Tensor, Tensor | None]:
        """``kv_cache`` (ember's addition: a `KVCache` of ``[N, num_heads, T_max,
        head_dim]``) appends this call's keys and values at ``cache_start`` and attends causally
        over the cache (docs/serving.md); it takes no other mask."""
        if kv_cache is not None and (attn_mask is not None or key_padding_mask is not None
                                     or is_causal):
            raise ValueError("MultiheadAttention: with kv_cache the mask is the cache's causal "
                             "mask; attn_mask, key_padding_mask and is_causal must be unset")
        unbatched = query.ndim == 2
        if unbatched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        # [L, N, E] from here on
        length, n, e = query.shape
        s = key.shape[0]
        h, d = self.num_heads, self.head_dim
        w = self.in_proj_weight
        b = self.in_proj_bias
        q = F.linear(query, w[:e], None if b is None else b[:e])
        k = F.linear(key, w[e:2 * e], None if b is None else b[e:2 * e])
        v = F.linear(value, w[2 * e:], None if b is None else b[2 * e:])
        # [L, N, E] -> [N, H, L, D]
        q = q.reshape(length, n, h, d).permute(1, 2, 0, 3)
        k = k.reshape(s, n, h, d).permute(1, 2, 0, 3)
        v = v.reshape(s, n, h, d).permute(1, 2, 0, 3)
        mask = None
        if kv_cache is not None:
            k, v = kv_cache.update(k, v, cache_start)
            s = k.shape[2]
            mask = _additive(kv_cache.mask(length, cache_start).logical_not(), q.dtype)
        if attn_mask is not None:
            mask = _additive(attn_mask, q.dtype)
            if mask.ndim == 3:
                mask = mask.reshape(n, h, length, s)
        if key_padding_mask is not None:
            pad = _additive(key_padding_mask, q.dtype).reshape(n, 1, 1, s)
            mask = pad if mask is None else mask + pad
        dropout = self.dropout if self.training else 0.0
        weights: Tensor | None = None
        if need_weights:
            out, weights = attention_weights(q, k, v, mask, dropout, is_causal,
                                             generator=self.generator)
        else:  # the fused kernel where the device has one (PyTorch's fast path does the same)
            out = scaled_dot_product_attention(q, k, v, mask, dropout, is_causal,
                                               generator=self.generator)
        out = out.permute(2, 0, 1, 3).reshape(length, n, e)
        out = self.out_proj(out)
        if unbatched:
            out = out.squeeze(1)
        elif self.batch_first:
            out = out.transpose(0, 1)
        if weights is None:
            return out, None
        if average_attn_weights:
            weights = weights.mean(dim=1)
        if unbatched:
            weights = weights.squeeze(0)
        return out, weights

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"


MultiHeadAttention = MultiheadAttention
