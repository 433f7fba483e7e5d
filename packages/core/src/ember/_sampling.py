"""Sampling from given distributions: ``multinomial``, ``bernoulli``, ``randperm``.

Each is a composite of the random primitives (`ember.rand`, `ember.randint`) and ordinary ops,
so it runs on every backend and draws from `ember.Generator` like ``rand``: the same seed gives
the same samples on the same backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _dtype as dt
from ._apply import cast
from ._device import Device, device as _device
from ._random import Generator

if TYPE_CHECKING:
    from ._tensor import Tensor

__all__ = ["bernoulli", "multinomial", "randperm"]


def multinomial(input: Tensor, num_samples: int, replacement: bool = False, *,
                generator: Generator | None = None) -> Tensor:
    """Indices of categories drawn from the (unnormalised) weights in the last axis of ``input``.

    ``input`` is ``[C]`` or ``[N, C]``; the result is int64 ``[num_samples]`` or
    ``[N, num_samples]``.  Without replacement a category is drawn at most once (so
    ``num_samples`` may not exceed the categories with non-zero weight).  Both draw by an
    exponential race: category ``c`` gets the key ``w_c / E_c`` with ``E_c ~ Exp(1)`` and the
    largest key wins, which picks ``c`` with probability ``w_c / sum(w)``; without replacement
    the ``num_samples`` largest keys of one race are the draws in order (as PyTorch does).

    Examples
    --------
    >>> import ember
    >>> w = ember.tensor([0., 3., 0., 1.])
    >>> sorted(ember.multinomial(w, 2, generator=ember.Generator(0)).tolist())
    [1, 3]
    """
    from ._creation import rand
    from ._elementwise import where

    if input.ndim not in (1, 2):
        raise ValueError(f"multinomial: input must be 1-D or 2-D, got shape {input.shape}")
    if not input.dtype.is_floating_point:
        raise TypeError(f"multinomial: input must be floating point, got {input.dtype.name}")
    categories = input.shape[-1]
    if num_samples <= 0:
        raise ValueError(f"multinomial: num_samples must be positive, got {num_samples}")
    if not replacement and num_samples > categories:
        raise ValueError(f"multinomial: cannot draw num_samples={num_samples} without "
                         f"replacement from {categories} categories")
    _check_weights(input, num_samples, replacement)
    w = input if input.ndim == 2 else input.unsqueeze(0)
    rows = w.shape[0]
    draws = num_samples if replacement else 1
    u = rand(rows, draws, categories, generator=generator, dtype=w.dtype, device=w.device)
    # E = -log(1 - u) in (0, inf]: u is in [0, 1), so 1 - u is never 0
    e = -(1.0 - u).log()
    keys = where(w.unsqueeze(1) > 0, w.detach().unsqueeze(1).log() - e.log(), -float("inf"))
    if replacement:
        out = keys.argmax(-1)
    else:
        out = keys.squeeze(1).topk(num_samples, -1).indices
    return out if input.ndim == 2 else out.squeeze(0)


def _check_weights(input: Tensor, num_samples: int, replacement: bool) -> None:
    """One host read: every weight finite and non-negative, every row with a positive sum
    (and enough non-zero categories without replacement)."""
    from ._manipulation import stack

    w = input.detach()
    bad = (w < 0).any() | w.isnan().any() | w.isinf().any()
    positive = cast(w > 0, dt.int64).sum(-1)
    fewest = positive.amin() if positive.ndim else positive
    negative, smallest = stack([cast(bad, dt.int64), fewest]).tolist()
    if negative:
        raise ValueError("multinomial: probabilities must be finite and non-negative, got "
                         f"{_preview(w)}")
    if smallest == 0:
        raise ValueError(f"multinomial: every row of probabilities needs a positive sum, got "
                         f"{_preview(w)}")
    if not replacement and smallest < num_samples:
        raise ValueError(f"multinomial: cannot draw num_samples={num_samples} without "
                         f"replacement from a row with only {smallest} non-zero categories")


def _preview(w: Tensor) -> str:
    values = w.reshape(-1)[:8].tolist()
    return f"{values}{' ...' if w.numel() > 8 else ''} (shape {w.shape})"


def bernoulli(input: Tensor, p: float | None = None, *,
              generator: Generator | None = None) -> Tensor:
    """0/1 samples in ``input``'s dtype: 1 with probability ``input`` (or ``p`` where given).

    No gradient flows through the draw, as in PyTorch.

    Examples
    --------
    >>> import ember
    >>> ember.bernoulli(ember.tensor([0., 1., 1.])).tolist()
    [0.0, 1.0, 1.0]
    """
    from ._creation import rand

    if not input.dtype.is_floating_point:
        raise TypeError(f"bernoulli: input must be floating point, got {input.dtype.name}")
    if p is not None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"bernoulli: p must be in [0, 1], got {p}")
        probs: Any = p
    else:
        probs = input.detach()
        outside = ((probs < 0) | (probs > 1) | probs.isnan()).any().item()
        if outside:
            raise ValueError(f"bernoulli: probabilities must be in [0, 1], got {_preview(probs)}")
    u = rand(input.shape, generator=generator, dtype=input.dtype, device=input.device)
    return cast((u < probs).detach(), input.dtype)


def randperm(n: int, *, generator: Generator | None = None, dtype: Any = None,
             device: str | Device | None = None, requires_grad: bool = False) -> Tensor:
    """A random permutation of ``0 .. n - 1`` (int64 unless ``dtype``).

    The order of ``n`` random 62-bit keys: ties (which would bias the order) are rare enough to
    ignore below billions of elements.

    Examples
    --------
    >>> import ember
    >>> sorted(ember.randperm(5, generator=ember.Generator(0)).tolist())
    [0, 1, 2, 3, 4]
    """
    from ._creation import randint

    if n < 0:
        raise ValueError(f"randperm: n must be non-negative, got {n}")
    d = dt.int64 if dtype is None else dt.as_dtype(dtype)
    if requires_grad and d.kind != "f":
        raise ValueError(f"randperm: requires_grad needs a floating dtype, got {d.name}")
    keys = randint(0, 2 ** 62, (n,), generator=generator, dtype=dt.int64,
                   device=_device(device))
    out = cast(keys.argsort(), d)
    return out.requires_grad_(True) if requires_grad else out
