"""`Embedding` and positional encodings (sinusoidal, rotary)."""

from __future__ import annotations

import math

from .. import _creation as cr, functional as F
from .._elementwise import where
from .._random import Generator
from .._tensor import Tensor
from . import init
from ._values import lower, rebind
from .linear import DeviceLike, DTypeLike
from .module import Module

__all__ = ["Embedding", "SinusoidalPositionalEncoding"]


class Embedding(Module):
    """A lookup table ``weight[num_embeddings, embedding_dim]``, initialised ``N(0, 1)``.

    The row ``padding_idx`` starts at zero and gets no gradient, as in PyTorch.

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> emb = nn.Embedding(10, 4, padding_idx=0)
    >>> emb(ember.tensor([[0, 3]])).shape, emb.weight[0].tolist()
    ((1, 2, 4), [0.0, 0.0, 0.0, 0.0])
    """

    weight: Tensor

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 *, device: DeviceLike = None, dtype: DTypeLike = None,
                 generator: Generator | None = None) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None and padding_idx < 0:
            padding_idx += num_embeddings
        self.padding_idx = padding_idx
        self.register_parameter("weight", cr.empty(num_embeddings, embedding_dim, device=device,
                                         dtype=dtype))
        self.reset_parameters(generator)

    def reset_parameters(self, generator: Generator | None = None) -> None:
        init.normal_(self.weight, generator=generator)
        if self.padding_idx is not None:
            w = lower(self.weight)
            keep = cr.arange(self.num_embeddings, device=w.device) != self.padding_idx
            rebind(self.weight, where(keep.unsqueeze(1), w, 0.0))

    def forward(self, indices: Tensor) -> Tensor:
        out = F.embedding(indices, self.weight)
        if self.padding_idx is None:
            return out
        # the padding row contributes neither values nor gradient
        keep = (indices != self.padding_idx).unsqueeze(-1).to(dtype=out.dtype)
        return out * keep

    def extra_repr(self) -> str:
        pad = f", padding_idx={self.padding_idx}" if self.padding_idx is not None else ""
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"


def sinusoidal_table(length: int, dim: int, base: float = 10000.0) -> Tensor:
    """``pe[pos, 2i] = sin(pos / base^(2i/dim))``, ``pe[pos, 2i+1] = cos(...)``."""
    pos = cr.arange(length, dtype="float32").unsqueeze(1)
    freq = (cr.arange(0, dim, 2, dtype="float32") * (-math.log(base) / dim)).exp()
    angles = pos * freq
    table = cr.zeros(length, dim)
    table[:, 0::2] = angles.sin()
    table[:, 1::2] = angles.cos()[:, : dim // 2]
    return table


class SinusoidalPositionalEncoding(Module):
    """Add the fixed sinusoidal encoding of "Attention Is All You Need" to ``x[B, T, D]``
    (or ``x[T, B, D]`` with ``batch_first=False``), then apply dropout.

    The table is a non-persistent buffer: it is not saved in records.
    """

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.0,
                 batch_first: bool = True, *, generator: Generator | None = None) -> None:
        super().__init__()
        self.d_model, self.max_len, self.batch_first = d_model, max_len, batch_first
        self.p = dropout
        self.generator = generator
        self.register_buffer("pe", sinusoidal_table(max_len, d_model), persistent=False)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        t = x.shape[1] if self.batch_first else x.shape[0]
        if offset + t > self.max_len:
            raise ValueError(f"sequence of {t} positions from {offset} exceeds max_len "
                             f"{self.max_len}")
        pe = self.pe[offset:offset + t]
        out = x + (pe if self.batch_first else pe.unsqueeze(1)).to(dtype=x.dtype)
        return F.dropout(out, self.p, self.training, self.generator)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}"
