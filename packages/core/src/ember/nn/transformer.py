"""`TransformerEncoderLayer`, `TransformerEncoder`, `TransformerDecoderLayer`,
`TransformerDecoder` and `Transformer` with PyTorch's structure and names."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from .. import _creation as cr, functional as F
from .._random import Generator
from .._tensor import Tensor
from . import init
from .attention import MultiheadAttention, causal_mask
from .containers import ModuleList
from .dropout import Dropout
from .linear import DeviceLike, DTypeLike, Linear
from .module import Module
from .normalization import LayerNorm

__all__ = [
    "Transformer", "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoder",
    "TransformerEncoderLayer", "clone_module",
]

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
        self.activation = _activation(activation)

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


def _activation(activation: str | Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    if isinstance(activation, str):
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be 'relu' or 'gelu' or a callable, got "
                             f"{activation!r}")
        return _ACTIVATIONS[activation]
    return activation


def _causal_if_asked(x: Tensor, mask: Tensor | None, is_causal: bool | None,
                     batch_first: bool) -> Tensor | None:
    """``mask``, or a causal mask over ``x``'s sequence where ``is_causal`` and none is given."""
    if not is_causal or mask is not None:
        return mask
    length = x.shape[1] if (batch_first and x.ndim == 3) else x.shape[0]
    return causal_mask(length, device=x.device)


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
        mask = _causal_if_asked(x, mask, is_causal, getattr(self.layers[0], "batch_first", False))
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask)
        if self.norm is not None:
            x = self.norm(x)
        out: Tensor = x
        return out


class TransformerDecoderLayer(Module):
    """Self-attention, attention over ``memory``, and a feed-forward block, each with a residual
    connection and LayerNorm (``norm1``, ``norm2``, ``norm3``; post-norm unless
    ``norm_first``).  Submodules are named as PyTorch's (``self_attn``, ``multihead_attn``,
    ``linear1``, ``linear2``), so state dicts port both ways.

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> layer = nn.TransformerDecoderLayer(16, 4, dim_feedforward=32, batch_first=True)
    >>> layer(ember.randn(2, 5, 16), ember.randn(2, 7, 16)).shape
    (2, 5, 16)
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: str | Callable[[Tensor], Tensor] = "relu",
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, *, device: DeviceLike = None,
                 dtype: DTypeLike = None, generator: Generator | None = None) -> None:
        super().__init__()
        kw: dict[str, Any] = dict(device=device, dtype=dtype)
        attn: dict[str, Any] = dict(dropout=dropout, bias=bias, batch_first=batch_first,
                                    generator=generator, **kw)
        self.self_attn = MultiheadAttention(d_model, nhead, **attn)
        self.multihead_attn = MultiheadAttention(d_model, nhead, **attn)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, generator=generator, **kw)
        self.dropout = Dropout(dropout, generator=generator)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, generator=generator, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout, generator=generator)
        self.dropout2 = Dropout(dropout, generator=generator)
        self.dropout3 = Dropout(dropout, generator=generator)
        self.batch_first = batch_first
        self.activation = _activation(activation)

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False) -> Tensor:
        x = tgt
        tgt_mask = _causal_if_asked(x, tgt_mask, tgt_is_causal, self.batch_first)
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask,
                                    memory_key_padding_mask, memory_is_causal)
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask))
            x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask,
                                               memory_is_causal))
            x = self.norm3(x + self._ff_block(x))
        return x

    def _sa_block(self, x: Tensor, mask: Tensor | None, padding: Tensor | None) -> Tensor:
        out, _ = self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=padding,
                                need_weights=False)
        dropped: Tensor = self.dropout1(out)
        return dropped

    def _mha_block(self, x: Tensor, memory: Tensor, mask: Tensor | None,
                   padding: Tensor | None, is_causal: bool) -> Tensor:
        out, _ = self.multihead_attn(x, memory, memory, attn_mask=mask,
                                     key_padding_mask=padding, need_weights=False,
                                     is_causal=is_causal and mask is None)
        dropped: Tensor = self.dropout2(out)
        return dropped

    def _ff_block(self, x: Tensor) -> Tensor:
        out: Tensor = self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))
        return out


class TransformerDecoder(Module):
    """``num_layers`` copies of ``decoder_layer`` (``layers.0``, ...) and an optional final
    ``norm``, as PyTorch's ``nn.TransformerDecoder``."""

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int,
                 norm: Module | None = None) -> None:
        super().__init__()
        self.layers = ModuleList([clone_module(decoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        if norm is not None:
            self.norm = norm
        else:
            self.add_module("norm", None)

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False) -> Tensor:
        x = tgt
        batch_first = getattr(self.layers[0], "batch_first", False)
        tgt_mask = _causal_if_asked(x, tgt_mask, tgt_is_causal, batch_first)
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask,
                      memory_is_causal=memory_is_causal)
        if self.norm is not None:
            x = self.norm(x)
        out: Tensor = x
        return out


class Transformer(Module):
    """The encoder-decoder of "Attention Is All You Need", as PyTorch's ``nn.Transformer``:
    ``encoder`` (layers and a final ``norm``), ``decoder`` (likewise), every weight matrix
    initialised ``xavier_uniform_``.

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> model = nn.Transformer(16, 4, 1, 1, dim_feedforward=32, batch_first=True)
    >>> model(ember.randn(2, 7, 16), ember.randn(2, 5, 16)).shape
    (2, 5, 16)
    """

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable[[Tensor], Tensor] = "relu",
                 custom_encoder: Module | None = None, custom_decoder: Module | None = None,
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, *, device: DeviceLike = None,
                 dtype: DTypeLike = None, generator: Generator | None = None) -> None:
        super().__init__()
        kw: dict[str, Any] = dict(device=device, dtype=dtype)
        layer_kw: dict[str, Any] = dict(dim_feedforward=dim_feedforward, dropout=dropout,
                                        activation=activation, layer_norm_eps=layer_norm_eps,
                                        batch_first=batch_first, norm_first=norm_first,
                                        bias=bias, generator=generator, **kw)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            self.encoder = TransformerEncoder(
                TransformerEncoderLayer(d_model, nhead, **layer_kw), num_encoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            self.decoder = TransformerDecoder(
                TransformerDecoderLayer(d_model, nhead, **layer_kw), num_decoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p, generator=generator)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None,
                tgt_mask: Tensor | None = None, memory_mask: Tensor | None = None,
                src_key_padding_mask: Tensor | None = None,
                tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None,
                src_is_causal: bool | None = None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> Tensor:
        batch_axis = 0 if self.batch_first else 1
        if src.ndim == 3 and tgt.ndim == 3 and src.shape[batch_axis] != tgt.shape[batch_axis]:
            raise ValueError(f"Transformer: src {src.shape} and tgt {tgt.shape} have different "
                             f"batch sizes")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise ValueError(f"Transformer: src {src.shape} and tgt {tgt.shape} must have "
                             f"d_model={self.d_model} features")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=bool(src_is_causal))
        out: Tensor = self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                                   tgt_key_padding_mask=tgt_key_padding_mask,
                                   memory_key_padding_mask=memory_key_padding_mask,
                                   tgt_is_causal=tgt_is_causal,
                                   memory_is_causal=memory_is_causal)
        return out

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device: DeviceLike = None,
                                        dtype: DTypeLike = None) -> Tensor:
        """A float ``[sz, sz]`` mask: ``-inf`` above the diagonal, ``0`` elsewhere."""
        zeros = cr.zeros(sz, sz, device=device, dtype=dtype)
        return zeros.masked_fill(causal_mask(sz, device=device), -float("inf"))
