"""Gradient clipping on `Gradients` (or any ``{param: grad}`` mapping).

Two forms.  ``clip_grad_norm`` / ``clip_grad_value`` return new gradients (gradients are
values): ``grads, norm = clip_grad_norm(grads, 1.0)`` then ``optimizer.step(grads)``.
``clip_grad_norm_`` / ``clip_grad_value_`` (also ``ember.nn.utils``) are PyTorch's: they clip
the gradient tensors the mapping holds in place (each tensor gets its clipped value, as
``p.grad`` would) and ``clip_grad_norm_`` returns the total norm:
``norm = clip_grad_norm_(grads, 1.0)`` then ``optimizer.step(grads)``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .. import _capture, _creation as cr
from .._manipulation import stack
from .._tensor import Tensor

__all__ = ["GradientMap", "clip_grad_norm", "clip_grad_norm_", "clip_grad_value",
           "clip_grad_value_", "grad_norm"]


class GradientMap:
    """Gradients by tensor, looked up through the tensor's payload as `Gradients` does.

    (Iterating a `Gradients` yields new tensor objects for the same payloads, so a plain dict
    keyed by those objects would not find the parameters.)
    """

    __slots__ = ("_items",)

    def __init__(self, items: Iterable[tuple[Tensor, Tensor]] = ()) -> None:
        self._items: dict[int, tuple[Tensor, Tensor]] = {id(t._data): (t, g) for t, g in items}

    def get(self, t: Tensor, default: Tensor | None = None) -> Tensor | None:
        entry = self._items.get(id(t._data))
        return default if entry is None else entry[1]

    def __getitem__(self, t: Tensor) -> Tensor:
        g = self.get(t)
        if g is None:
            raise KeyError("no gradient for this tensor")
        return g

    def __contains__(self, t: object) -> bool:
        return isinstance(t, Tensor) and id(t._data) in self._items

    def items(self) -> list[tuple[Tensor, Tensor]]:
        return list(self._items.values())

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        return iter(self.items())

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"GradientMap({len(self)} tensors)"


def _items(grads: Mapping[Tensor, Tensor] | Any,
           parameters: Iterable[Tensor] | None) -> list[tuple[Tensor, Tensor]]:
    if isinstance(grads, Tensor) or not hasattr(grads, "items"):
        raise TypeError(
            "clipping takes the gradients, not the parameters: ember's gradients are values "
            "returned by backward(), not stored in .grad, so write `grads = loss.backward()` "
            "then `clip_grad_norm_(grads, max_norm)` and `opt.step(grads)` (pass "
            "parameters=... to clip only some of them); got "
            + type(grads).__name__)
    if parameters is not None:
        from .optimizer import grad_of

        out = []
        for p in parameters:
            g = grad_of(grads, p)
            if g is not None:
                out.append((p, g))
        return out
    # leaves only: a `Gradients` also holds the gradients of live intermediates (and of the
    # value backward() started from), which are not parameters
    return [(t, g) for t, g in grads.items() if getattr(t, "is_leaf", True)]


def grad_norm(grads: Mapping[Tensor, Tensor] | Any, norm_type: float = 2.0, *,
              parameters: Iterable[Tensor] | None = None) -> Tensor:
    """The ``norm_type``-norm of all gradients taken together, as a 0-d tensor."""
    items = _items(grads, parameters)
    if not items:
        raise ValueError("grad_norm: no gradients")
    dev = items[0][1].device
    if norm_type == math.inf:
        return stack([g.abs().amax().to(dev) for _, g in items]).amax()
    parts = [(g.abs() ** norm_type).sum().to(dev) for _, g in items]
    return stack(parts).sum() ** (1.0 / norm_type)


def clip_grad_norm(grads: Mapping[Tensor, Tensor] | Any, max_norm: float,
                   norm_type: float = 2.0, *, parameters: Iterable[Tensor] | None = None,
                   error_if_nonfinite: bool = False) -> tuple[GradientMap, Tensor]:
    """Scale all gradients together so that their total norm is at most ``max_norm``.

    Returns the clipped gradients and the total norm before clipping.  The scale is
    ``min(1, max_norm / (norm + 1e-6))``, as PyTorch's ``clip_grad_norm_``.  Without
    ``parameters``, every leaf tensor of ``grads`` counts (intermediates do not).

    Examples
    --------
    >>> import ember
    >>> w = ember.zeros(2)
    >>> clipped, norm = ember.optim.clip_grad_norm({w: ember.tensor([3.0, 4.0])}, 1.0)
    >>> norm.item(), [round(v, 4) for v in clipped[w].tolist()]
    (5.0, [0.6, 0.8])
    """
    items = _items(grads, parameters)
    total = grad_norm(GradientMap(items), norm_type)
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise RuntimeError(f"the total gradient norm is {total.item()}")
    scale = (max_norm / (total + 1e-6)).clamp(max=1.0)
    return GradientMap((p, g * scale.to(g.device).to(dtype=g.dtype)) for p, g in items), total


def clip_grad_value(grads: Mapping[Tensor, Tensor] | Any, clip_value: float, *,
                    parameters: Iterable[Tensor] | None = None) -> GradientMap:
    """Clamp every gradient element to ``[-clip_value, clip_value]``."""
    return GradientMap((p, g.clamp(-clip_value, clip_value)) for p, g in _items(grads, parameters))


def _in_place(pairs: Iterable[tuple[Tensor, Tensor]]) -> None:
    """Give each gradient tensor its new value in place (once per tensor object)."""
    done: set[int] = set()
    for g, new in pairs:
        if id(g) not in done:
            done.add(id(g))
            _capture.replace(g, new._data)


def clip_grad_norm_(grads: Mapping[Tensor, Tensor] | Any, max_norm: float,
                    norm_type: float = 2.0, error_if_nonfinite: bool = False,
                    foreach: bool | None = None, *,
                    parameters: Iterable[Tensor] | None = None) -> Tensor:
    """PyTorch's ``clip_grad_norm_`` on ember's gradients: scale the gradients that ``grads``
    holds, in place, so that their total norm is at most ``max_norm``; return that norm
    (before clipping, a 0-d tensor).

    ``grads`` is what ``loss.backward()`` returned (or a ``{param: grad}`` mapping); its
    tensors get their clipped values, so ``opt.step(grads)`` then uses them.  Without
    ``parameters``, every leaf of ``grads`` counts.  ``foreach`` is accepted for PyTorch's
    signature (the kernels are the same either way).  With no gradients the norm is 0.

    Examples
    --------
    >>> import ember
    >>> w = ember.zeros(2)
    >>> grads = {w: ember.tensor([3.0, 4.0])}
    >>> norm = ember.nn.utils.clip_grad_norm_(grads, 1.0)
    >>> norm.item(), [round(v, 4) for v in grads[w].tolist()]
    (5.0, [0.6, 0.8])
    """
    items = _items(grads, parameters)
    if not items:
        return cr.zeros(())
    total = grad_norm(GradientMap(items), norm_type)
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients is non-finite "
                           f"({total.item()}), so it cannot be clipped. To disable this "
                           "error and scale the gradients by the non-finite norm anyway, set "
                           "`error_if_nonfinite=False`")
    scale = (max_norm / (total + 1e-6)).clamp(max=1.0)
    _in_place((g, g * scale.to(g.device).to(dtype=g.dtype)) for _, g in items)
    return total


def clip_grad_value_(grads: Mapping[Tensor, Tensor] | Any, clip_value: float,
                     foreach: bool | None = None, *,
                     parameters: Iterable[Tensor] | None = None) -> None:
    """PyTorch's ``clip_grad_value_`` on ember's gradients: clamp every element of the
    gradients ``grads`` holds to ``[-clip_value, clip_value]``, in place.

    Examples
    --------
    >>> import ember
    >>> w = ember.zeros(2)
    >>> grads = {w: ember.tensor([3.0, -0.5])}
    >>> ember.nn.utils.clip_grad_value_(grads, 1.0)
    >>> grads[w].tolist()
    [1.0, -0.5]
    """
    _in_place((g, g.clamp(-clip_value, clip_value)) for _, g in _items(grads, parameters))
