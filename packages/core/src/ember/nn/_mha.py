"""``multi_head_attention_forward``: PyTorch's functional multi-head attention, with its
signature and layouts (sequence-first ``[L, N, E]``, or unbatched ``[L, E]``), composed from
primitives."""

from __future__ import annotations

import math

from .. import _creation as cr, functional as F
from .._errors import ShapeError
from .._manipulation import cat, pad
from .._tensor import Tensor
from .attention import _additive

__all__ = ["multi_head_attention_forward"]


def _float_mask(mask: Tensor, dtype: object) -> Tensor:
    return _additive(mask, dtype).to(dtype=dtype)


def multi_head_attention_forward(
        query: Tensor, key: Tensor, value: Tensor, embed_dim_to_check: int, num_heads: int,
        in_proj_weight: Tensor | None, in_proj_bias: Tensor | None, bias_k: Tensor | None,
        bias_v: Tensor | None, add_zero_attn: bool, dropout_p: float,
        out_proj_weight: Tensor, out_proj_bias: Tensor | None, training: bool = True,
        key_padding_mask: Tensor | None = None, need_weights: bool = True,
        attn_mask: Tensor | None = None, use_separate_proj_weight: bool = False,
        q_proj_weight: Tensor | None = None, k_proj_weight: Tensor | None = None,
        v_proj_weight: Tensor | None = None, static_k: Tensor | None = None,
        static_v: Tensor | None = None, average_attn_weights: bool = True,
        is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
    """Multi-head attention as ``torch.nn.functional.multi_head_attention_forward``.

    ``query`` is ``[L, N, E]`` (or ``[L, E]``), ``key`` and ``value`` ``[S, N, E]``; masks are
    bool (True = masked out) or additive floats: ``attn_mask`` ``[L, S]`` or ``[N * H, L, S]``,
    ``key_padding_mask`` ``[N, S]``.  Returns the output ``[L, N, E]`` and, with
    ``need_weights``, the attention weights ``[N, L, S]`` (averaged over heads) or
    ``[N, H, L, S]``.

    Examples
    --------
    >>> import ember
    >>> import ember.nn.functional as F
    >>> x = ember.randn(3, 2, 4)
    >>> w, b = ember.randn(12, 4), ember.zeros(12)
    >>> out, weights = F.multi_head_attention_forward(
    ...     x, x, x, 4, 2, w, b, None, None, False, 0.0, ember.randn(4, 4), None)
    >>> out.shape, weights.shape
    ((3, 2, 4), (2, 3, 3))
    """
    unbatched = query.ndim == 2
    if unbatched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    length, n, e = query.shape
    if e != embed_dim_to_check:
        raise ShapeError(f"multi_head_attention_forward: was expecting embedding dimension of "
                         f"{embed_dim_to_check}, but got {e}")
    if e % num_heads:
        raise ShapeError(f"multi_head_attention_forward: embed_dim {e} not divisible by "
                         f"num_heads {num_heads}")
    h, d = num_heads, e // num_heads
    if is_causal and attn_mask is None:
        raise RuntimeError("multi_head_attention_forward: Need attn_mask if specifying the "
                           "is_causal hint (ember, as PyTorch, reads the mask, not the hint)")
    # the projections
    if use_separate_proj_weight:
        if q_proj_weight is None or k_proj_weight is None or v_proj_weight is None:
            raise ValueError("use_separate_proj_weight=True needs q_proj_weight, "
                             "k_proj_weight and v_proj_weight")
        wq, wk, wv = q_proj_weight, k_proj_weight, v_proj_weight
    else:
        if in_proj_weight is None:
            raise ValueError("in_proj_weight is None while use_separate_proj_weight=False")
        wq, wk, wv = in_proj_weight[:e], in_proj_weight[e:2 * e], in_proj_weight[2 * e:]
    bq = bk = bv = None
    if in_proj_bias is not None:
        bq, bk, bv = in_proj_bias[:e], in_proj_bias[e:2 * e], in_proj_bias[2 * e:]
    q = F.linear(query, wq, bq)
    k = F.linear(key, wk, bk)
    v = F.linear(value, wv, bv)
    mask = None if attn_mask is None else _float_mask(attn_mask, q.dtype)
    if mask is not None and mask.ndim == 2:
        mask = mask.unsqueeze(0)  # [1, L, S]
    padding = None if key_padding_mask is None else _float_mask(key_padding_mask, q.dtype)
    if bias_k is not None and bias_v is not None:  # one more key and value: the biases
        k = cat([k, bias_k.reshape(1, 1, e).expand(1, n, e)], 0)
        v = cat([v, bias_v.reshape(1, 1, e).expand(1, n, e)], 0)
        mask = None if mask is None else pad(mask, (0, 1))
        padding = None if padding is None else pad(padding, (0, 1))
    # [L, N, E] -> [N * H, L, D]
    q = q.reshape(length, n * h, d).transpose(0, 1)
    k = k.reshape(k.shape[0], n * h, d).transpose(0, 1) if static_k is None else static_k
    v = v.reshape(v.shape[0], n * h, d).transpose(0, 1) if static_v is None else static_v
    if add_zero_attn:  # one more key and value of zeros
        k = cat([k, cr.zeros((n * h, 1, d), dtype=k.dtype, device=k.device)], 1)
        v = cat([v, cr.zeros((n * h, 1, d), dtype=v.dtype, device=v.device)], 1)
        mask = None if mask is None else pad(mask, (0, 1))
        padding = None if padding is None else pad(padding, (0, 1))
    s = k.shape[1]
    if padding is not None:  # [N, S] -> [N * H, 1, S]
        padding = padding.reshape(n, 1, 1, s).expand(n, h, 1, s).reshape(n * h, 1, s)
        mask = padding if mask is None else mask + padding
    scores = (q * (1.0 / math.sqrt(d))) @ k.transpose(1, 2)
    if mask is not None:
        scores = scores + mask
    weights = scores.softmax(-1)
    if training and dropout_p > 0.0:
        weights = F.dropout(weights, dropout_p, True)
    out = (weights @ v).transpose(0, 1).reshape(length * n, e)
    out = F.linear(out, out_proj_weight, out_proj_bias).reshape(length, n, e)
    if unbatched:
        out = out.squeeze(1)
    if not need_weights:
        return out, None
    w = weights.reshape(n, h, length, s)
    if average_attn_weights:
        w = w.mean(dim=1)
    if unbatched:
        w = w.squeeze(0)
    return out, w
