"""`TransformerEncoderLayer` and `TransformerEncoder` with PyTorch's structure and names."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from .. import functional as F
from .._random import Generator
from .._tensor import Tensor
from .attention import MultiheadAttention, causal_mask
from .containers import ModuleList
from .dropout import Dropout
from .linear import DeviceLike, DTypeLike, Linear
from .module import Module
from .normalization import LayerNorm

__all__ = ["TransformerEncoder", "TransformerEncoderLayer", "clone_module"]

_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "gelu": F.gelu}


class TransformerEncoderLayer(Module):
    """Self-attention and a feed-forward block, each with a residual connection and LayerNorm.

    ``norm_first=False`` (the default, "post-norm") computes ``norm1(x + sa(x))`` then
    ``norm2(x + ff(x))``; ``norm_first=True`` computes ``x + sa(norm1(x))`` then
    ``x + ff(norm2(x))``.  Submodules are named as in PyTorch (``self_attn``, ``linear1``,
    ``linear2``, ``norm1``, ``norm2``), so state dicts port both ways.

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> layer = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, batch_first=True)
    >>> layer(ember.randn(2, 5, 16)).shape
    (2, 5, 16)
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: str | Callable[[Tensor], Tensor] = "relu",
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, *, device: DeviceLike = None,
                 dtype: DTypeLike = None, generator: Generator | None = None) -> None:
        super().__init__()
        kw: dict[str, Any] = dict(device=device, dtype=dtype)
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, generator=generator, **kw)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, generator=generator, **kw)
        self.dropout = Dropout(dropout, generator=generator)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, generator=generator, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout, generator=generator)
        self.dropout2 = Dropout(dropout, generator=generator)
        self.batch_first = batch_first
        if isinstance(activation, str):
            if activation not in _ACTIVATIONS:
                raise ValueError(f"activation must be 'relu' or 'gelu' or a callable, got "
                                 f"{activation!r}")
            activation = _ACTIVATIONS[activation]
        self.activation = activation

    def forward(self, src: Tensor, src_mask: Tensor | None = None,
                src_key_padding_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x

    def _sa_block(self, x: Tensor, mask: Tensor | None, padding: Tensor | None,
                  is_causal: bool) -> Tensor:
        out, _ = self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=padding,
                                need_weights=False, is_causal=is_causal and mask is None)
        dropped: Tensor = self.dropout1(out)
        return dropped

    def _ff_block(self, x: Tensor) -> Tensor:
        out: Tensor = self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))
        return out


def clone_module(module: Module) -> Module:
    """A deep copy of ``module`` with its own parameters; generators stay shared."""
    from .._random import Generator as _Generator

    memo: dict[int, Any] = {}
    for m in module.modules():
        for value in vars(m).values():
            if isinstance(value, _Generator):
                memo[id(value)] = value
    return copy.deepcopy(module, memo)


class TransformerEncoder(Module):
    """``num_layers`` copies of ``encoder_layer`` (``layers.0``, ``layers.1``, ...) and an
    optional final ``norm``, as PyTorch's ``nn.TransformerEncoder``."""

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int,
                 norm: Module | None = None) -> None:
        super().__init__()
        self.layers = ModuleList([clone_module(encoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        if norm is not None:
            self.norm = norm
        else:
            self.add_module("norm", None)

    def forward(self, src: Tensor, mask: Tensor | None = None,
                src_key_padding_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        x = src
        if is_causal and mask is None:
            batch_first = getattr(self.layers[0], "batch_first", False)
            length = x.shape[1] if (batch_first and x.ndim == 3) else x.shape[0]
            mask = causal_mask(length, device=x.device)
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask)
        if self.norm is not None:
            x = self.norm(x)
        out: Tensor = x
        return out
