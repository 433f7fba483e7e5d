"""Rotary position embeddings (RoPE, Su et al. 2021) as Llama uses them: the function
`apply_rotary_emb` and the module `RotaryEmbedding` (optionally with a cos/sin table).

Two layouts of the rotated pairs are in use, and weights trained with one give wrong results
with the other:

- **half-split** (``interleaved=False``, the default; Hugging Face's Llama, GPT-NeoX): feature
  ``i`` pairs with feature ``i + D/2`` (``rotate_half``);
- **interleaved** (``interleaved=True``; Meta's original Llama code, GPT-J): feature ``2i``
  pairs with ``2i + 1`` (the pairs read as complex numbers).

Pair ``i`` at position ``p`` turns by the angle ``p * base ** (-2i / D)`` in both.
"""

from __future__ import annotations

from .. import _creation as cr, _dtype as dt
from .._errors import ShapeError
from .._manipulation import cat, stack
from .._tensor import Tensor
from .linear import DeviceLike
from .module import Module

__all__ = ["RotaryEmbedding", "apply_rotary_emb", "rotary_tables"]


def apply_rotary_emb(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool = False) -> Tensor:
    """``x`` ``[..., T, D]`` with each feature pair turned by its angle at its position.

    ``cos`` and ``sin`` hold one angle per pair: ``[T, D/2]``, or any shape that broadcasts to
    ``x``'s ``[..., T, D/2]`` (``[B, 1, T, D/2]`` for per-sequence positions).  They are cast to
    ``x``'s dtype first, as Hugging Face's Llama does.  Differentiable in ``x`` (and in
    ``cos``/``sin``); built from slices, products and ``cat``, so it runs on every device.

    Examples
    --------
    >>> import ember
    >>> from ember.nn.functional import apply_rotary_emb
    >>> x = ember.tensor([[1.0, 0.0]])              # one position, one pair
    >>> c, s = ember.tensor([[0.0]]), ember.tensor([[1.0]])   # a quarter turn
    >>> apply_rotary_emb(x, c, s).tolist()
    [[0.0, 1.0]]
    """
    d = x.shape[-1] if x.ndim else 0
    if x.ndim < 2 or d % 2:
        raise ShapeError(f"apply_rotary_emb: x must be [..., T, D] with an even D, got "
                         f"{x.shape}")
    if tuple(cos.shape) != tuple(sin.shape) or cos.ndim == 0 or cos.shape[-1] != d // 2:
        raise ShapeError(f"apply_rotary_emb: cos {cos.shape} and sin {sin.shape} must have one "
                         f"shape ending in D/2 = {d // 2} (x {x.shape})")
    if cos.ndim >= 2 and cos.shape[-2] not in (1, x.shape[-2]):
        raise ShapeError(f"apply_rotary_emb: cos/sin have {cos.shape[-2]} positions, x "
                         f"{x.shape} has {x.shape[-2]}")
    cos, sin = cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)
    h = d // 2
    if interleaved:
        pairs = x.reshape(*x.shape[:-1], h, 2)
        a, b = pairs[..., 0], pairs[..., 1]
        return stack([a * cos - b * sin, a * sin + b * cos], -1).reshape(x.shape)
    a, b = x[..., :h], x[..., h:]
    return cat([a * cos - b * sin, b * cos + a * sin], -1)


def _inv_freq(dim: int, base: float, device: DeviceLike) -> Tensor:
    if dim <= 0 or dim % 2:
        raise ValueError(f"rotary embedding needs an even positive dimension, got {dim}")
    return 1.0 / (base ** (cr.arange(0, dim, 2, device=device, dtype=dt.float32) / dim))


def rotary_tables(dim: int, positions: int, base: float = 10000.0, *,
                  device: DeviceLike = None) -> tuple[Tensor, Tensor]:
    """``cos`` and ``sin`` ``[positions, dim/2]`` in float32: the angle of pair ``i`` at
    position ``p`` is ``p * base ** (-2i / dim)`` (computed in float32, as Llama does)."""
    if positions < 0:
        raise ValueError(f"rotary embeddings need positions >= 0, got {positions}")
    angles = cr.arange(positions, device=device, dtype=dt.float32).unsqueeze(1) \
        * _inv_freq(dim, base, device).unsqueeze(0)
    return angles.cos(), angles.sin()


def _one_integer(start: Tensor, who: str) -> Tensor:
    if start.numel() != 1 or start.dtype.kind not in "iu":
        raise ValueError(f"{who}: a tensor offset must be one integer, got {start.dtype.name} "
                         f"{start.shape}")
    return start.reshape(1).to(dtype=dt.int64)


class RotaryEmbedding(Module):
    """Rotary position embeddings applied to queries or keys ``x`` ``[..., T, dim]`` (sequence
    on axis -2: ``[B, H, T, D]``) at positions ``offset .. offset + T - 1``.

    The default rotates the two halves of the last axis against each other (Hugging Face's
    Llama, GPT-NeoX); ``interleaved=True`` rotates adjacent pairs (Meta's Llama, RoFormer,
    GPT-J): see `apply_rotary_emb`.  With ``max_seq_len`` the cos/sin table of that many
    positions is computed once (buffers ``cos`` and ``sin`` ``[max_seq_len, dim/2]``, float32,
    not saved in the state dict); without it the angles are computed at each call from the
    buffer ``inv_freq``.

    ``offset`` is an int, or an integer tensor of one element on the device: a compiled
    decode step then reads its table rows by ``index_select`` (or computes its angles) at a
    position the recording does not bake in, so one recording serves every position.

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> rope = nn.RotaryEmbedding(8, max_seq_len=16)
    >>> q = ember.ones(1, 2, 3, 8)                  # [B, H, T, D]
    >>> bool((rope(q, 5) == rope(q, ember.tensor(5))).all())
    True
    """

    inv_freq: Tensor

    def __init__(self, dim: int, base: float = 10000.0, interleaved: bool = False,
                 max_seq_len: int | None = None, *, device: DeviceLike = None) -> None:
        super().__init__()
        self.dim, self.base, self.interleaved = dim, base, interleaved
        self.max_seq_len = max_seq_len
        self.register_buffer("inv_freq", _inv_freq(dim, base, device), persistent=False)
        if max_seq_len is not None:
            cos, sin = rotary_tables(dim, max_seq_len, base, device=device)
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)

    def tables(self, length: int, offset: int | Tensor = 0) -> tuple[Tensor, Tensor]:
        """``cos`` and ``sin`` ``[length, dim/2]`` (float32) for positions ``offset ..
        offset + length - 1``."""
        dev = self.inv_freq.device
        n = self.max_seq_len
        if isinstance(offset, Tensor):
            pos = _one_integer(offset, "RotaryEmbedding") \
                + cr.arange(length, device=dev, dtype=dt.int64)
            if n is not None:  # an index past the table raises in eager calls
                cos: Tensor = self.cos
                return cos.index_select(0, pos), self.sin.index_select(0, pos)
            angles = pos.to(dtype=dt.float32).unsqueeze(1) * self.inv_freq.unsqueeze(0)
            return angles.cos(), angles.sin()
        if n is not None:
            if not 0 <= offset <= n - length:
                raise ValueError(f"RotaryEmbedding: positions {offset} .. {offset + length - 1}"
                                 f" are outside the table of max_seq_len={n}")
            return self.cos[offset:offset + length], self.sin[offset:offset + length]
        pos = cr.arange(offset, offset + length, dtype=dt.float32, device=dev)
        angles = pos.unsqueeze(1) * self.inv_freq.unsqueeze(0)
        return angles.cos(), angles.sin()

    def forward(self, x: Tensor, offset: int | Tensor = 0) -> Tensor:
        if x.ndim < 2 or x.shape[-1] != self.dim:
            raise ShapeError(f"RotaryEmbedding({self.dim}): x must be [..., T, {self.dim}], "
                             f"got {x.shape}")
        cos, sin = self.tables(x.shape[-2], offset)
        return apply_rotary_emb(x, cos, sin, self.interleaved)

    def extra_repr(self) -> str:
        seq = "" if self.max_seq_len is None else f", max_seq_len={self.max_seq_len}"
        return f"dim={self.dim}, base={self.base}, interleaved={self.interleaved}{seq}"
