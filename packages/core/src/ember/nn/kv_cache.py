"""`KVCache`: a static-shape key/value cache for decoding, preallocated ``[B, H, T_max, D]``
and written in place at a position.

Static shapes are what let `ember.compile` replay one decode step for every position: with
the position as an integer tensor on the device, the write is one ``scatter``
(`ember.index_copy`), attention reads the whole cache, and a mask hides the positions not
written yet. With the position as a Python int, the step reads only ``cache[:, :, :pos+L]``
(fewer operations eagerly, but a new shape, so a new recording, at every position).
"""

from __future__ import annotations

from .. import _creation as cr, _dtype as dt
from .._apply import apply
from .._checks import check_range
from .._errors import ShapeError
from .._tensor import Tensor
from ..ops import movement as mv
from ._values import lower, rebind
from .linear import DeviceLike, DTypeLike
from .module import Module

__all__ = ["KVCache"]


class KVCache(Module):
    """Keys and values of past positions: buffers ``k`` and ``v`` ``[batch, heads, max_len,
    head_dim]`` (zeros at first; not in the state dict).

    ``keys, values = cache.update(k, v, start)`` writes ``k`` and ``v`` ``[batch, heads, L,
    head_dim]`` at positions ``start .. start + L - 1`` (the buffers take the new values, as a
    BatchNorm's running statistics do, so a compiled step updates them in place) and returns
    what attention reads: ``cache[:, :, :start + L]`` for an int ``start``, the whole cache for
    a tensor ``start``.  The result is differentiable in ``k`` and ``v``; the buffers keep
    values only (a later step does not differentiate into earlier ones).
    ``cache.mask(L, start)`` is the matching bool mask (True = may attend) for
    `scaled_dot_product_attention`: query ``i`` sees keys ``0 .. start + i``.

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> cache = nn.KVCache(1, 2, 8, 4)
    >>> k = v = ember.ones(1, 2, 3, 4)
    >>> keys, values = cache.update(k, v, 0)            # a prompt of 3
    >>> keys.shape, cache.mask(3, 0).tolist()[0]
    ((1, 2, 3, 4), [True, False, False])
    >>> keys, _ = cache.update(k[:, :, :1], v[:, :, :1], ember.tensor(3))  # one more token
    >>> keys.shape, cache.mask(1, ember.tensor(3)).tolist()
    ((1, 2, 8, 4), [[True, True, True, True, False, False, False, False]])
    """

    k: Tensor
    v: Tensor

    def __init__(self, batch_size: int, num_heads: int, max_len: int, head_dim: int, *,
                 device: DeviceLike = None, dtype: DTypeLike = None) -> None:
        super().__init__()
        if min(batch_size, num_heads, max_len, head_dim) <= 0:
            raise ValueError(f"KVCache needs positive sizes, got batch_size={batch_size}, "
                             f"num_heads={num_heads}, max_len={max_len}, head_dim={head_dim}")
        shape = (batch_size, num_heads, max_len, head_dim)
        self.max_len = max_len
        self.register_buffer("k", cr.zeros(shape, device=device, dtype=dtype), persistent=False)
        self.register_buffer("v", cr.zeros(shape, device=device, dtype=dtype), persistent=False)

    def reset(self) -> None:
        """Zero both buffers (a new batch of sequences)."""
        rebind(self.k, cr.zeros_like(lower(self.k)))
        rebind(self.v, cr.zeros_like(lower(self.v)))

    def _positions(self, length: int, start: int | Tensor) -> Tensor:
        dev = self.k.device
        if isinstance(start, Tensor):
            if start.numel() != 1 or start.dtype.kind not in "iu":
                raise ValueError(f"KVCache: a tensor start must be one integer, got "
                                 f"{start.dtype.name} {start.shape}")
            start = start.reshape(1).to(dtype=dt.int64)
            # the positions must fit: one host read in eager calls, none while compiling
            # (docs/serving.md says what each backend's scatter does then)
            check_range("KVCache.update", start, 0, self.max_len - length + 1,
                        lambda v: f"start{v} with {length} new position(s) does not fit "
                                  f"max_len={self.max_len}")
            return start + cr.arange(length, device=dev, dtype=dt.int64)
        if not 0 <= start <= self.max_len - length:
            raise ValueError(f"KVCache.update: positions {start} .. {start + length - 1} do "
                             f"not fit max_len={self.max_len}")
        return cr.arange(start, start + length, device=dev, dtype=dt.int64)

    def _write(self, buf: Tensor, new: Tensor, pos: Tensor) -> Tensor:
        b, h, _, d = buf.shape
        if new.ndim != 4 or (new.shape[0], new.shape[1], new.shape[3]) != (b, h, d):
            raise ShapeError(f"KVCache.update: new keys/values must be [{b}, {h}, L, {d}] "
                             f"for a cache {buf.shape}, got {new.shape}")
        index = pos.reshape(1, 1, -1, 1).expand(new.shape)
        out: Tensor = apply(mv.scatter, buf, index, new.to(dtype=buf.dtype), dim=2)
        rebind(buf, lower(out))
        return out

    def update(self, k: Tensor, v: Tensor, start: int | Tensor) -> tuple[Tensor, Tensor]:
        length = k.shape[2] if k.ndim == 4 else 0
        pos = self._positions(length, start)
        keys, values = self._write(self.k, k, pos), self._write(self.v, v, pos)
        if isinstance(start, Tensor):
            return keys, values
        return keys[:, :, :start + length], values[:, :, :start + length]

    def mask(self, length: int, start: int | Tensor) -> Tensor:
        """Bool ``[length, S]``, True where query ``i`` (at ``start + i``) may attend key
        ``j``: ``j <= start + i``.  ``S`` is ``start + length`` for an int ``start`` and
        ``max_len`` for a tensor one (positions not written yet are masked)."""
        dev = self.k.device
        if isinstance(start, Tensor):
            keys = cr.arange(self.max_len, device=dev, dtype=dt.int64)
            last = start.reshape(1).to(dtype=dt.int64) \
                + cr.arange(length, device=dev, dtype=dt.int64)
            return keys.unsqueeze(0) <= last.unsqueeze(1)
        keys = cr.arange(start + length, device=dev, dtype=dt.int64)
        last = cr.arange(start, start + length, device=dev, dtype=dt.int64)
        return keys.unsqueeze(0) <= last.unsqueeze(1)

    def extra_repr(self) -> str:
        return f"shape={tuple(self.k.shape)}"
