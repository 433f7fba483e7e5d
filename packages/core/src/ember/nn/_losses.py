"""The losses `ember.functional` does not already have, with PyTorch's formulas and defaults."""

from __future__ import annotations

from .._elementwise import where
from .._tensor import Tensor
from ..amp._state import AUTOCAST, autocast_inputs
from ..functional import _reduce_loss

__all__ = [
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "cosine_embedding_loss",
    "cosine_similarity", "huber_loss", "kl_div", "l1_loss", "margin_ranking_loss",
    "pairwise_distance", "smooth_l1_loss", "triplet_margin_loss",
]


def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """Mean absolute error."""
    if AUTOCAST:  # `ember.autocast`: every loss runs in float32 (ember.amp._policy)
        input, target = autocast_inputs("l1_loss", (input, target))
    return _reduce_loss((input - target).abs(), reduction)


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean",
               delta: float = 1.0) -> Tensor:
    """Quadratic below ``delta``, linear (slope ``delta``) above."""
    if AUTOCAST:
        input, target = autocast_inputs("huber_loss", (input, target))
    d = (input - target).abs()
    return _reduce_loss(where(d < delta, d * d * 0.5, (d - 0.5 * delta) * delta), reduction)


def smooth_l1_loss(input: Tensor, target: Tensor, reduction: str = "mean",
                   beta: float = 1.0) -> Tensor:
    """``0.5 d² / beta`` below ``beta``, ``d - beta / 2`` above (``beta=0`` is L1)."""
    if AUTOCAST:
        input, target = autocast_inputs("smooth_l1_loss", (input, target))
    d = (input - target).abs()
    if beta == 0.0:
        return _reduce_loss(d, reduction)
    return _reduce_loss(where(d < beta, d * d * (0.5 / beta), d - 0.5 * beta), reduction)


def binary_cross_entropy(input: Tensor, target: Tensor,
                         weight: Tensor | None = None, reduction: str = "mean") -> Tensor:
    """BCE of probabilities ``input``; each log is clamped at -100 as PyTorch does.

    Examples
    --------
    >>> import ember
    >>> import ember.nn.functional as F
    >>> round(F.binary_cross_entropy(ember.tensor([0.5]), ember.tensor([1.])).item(), 4)
    0.6931
    """
    if AUTOCAST:
        input, target, weight = autocast_inputs("binary_cross_entropy", (input, target, weight))
    log_p = input.log().clamp(min=-100.0)
    log_q = (1.0 - input).log().clamp(min=-100.0)
    loss = -(target * log_p + (1.0 - target) * log_q)
    if weight is not None:
        loss = loss * weight
    return _reduce_loss(loss, reduction)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor,
                                     weight: Tensor | None = None, reduction: str = "mean",
                                     pos_weight: Tensor | None = None) -> Tensor:
    """BCE of ``sigmoid(input)``, computed stably from the logits."""
    if AUTOCAST:
        input, target, weight, pos_weight = autocast_inputs(
            "binary_cross_entropy_with_logits", (input, target, weight, pos_weight))
    # log(1 + exp(-|x|)) + max(-x, 0) is -log(sigmoid(x)) without overflow
    log_sig_neg = (-input.abs()).exp().log1p() + (-input).clamp(min=0)
    if pos_weight is None:
        loss = (1.0 - target) * input + log_sig_neg
    else:
        loss = (1.0 - target) * input + (1.0 + (pos_weight - 1.0) * target) * log_sig_neg
    if weight is not None:
        loss = loss * weight
    return _reduce_loss(loss, reduction)


def kl_div(input: Tensor, target: Tensor, reduction: str = "mean",
           log_target: bool = False) -> Tensor:
    """``target * (log(target) - input)`` with ``input`` given as log-probabilities.

    ``reduction="batchmean"`` divides the sum by the batch size (the mathematically correct
    KL divergence); ``"mean"`` averages over every element, as PyTorch.
    """
    if AUTOCAST:
        input, target = autocast_inputs("kl_div", (input, target))
    if log_target:
        loss = target.exp() * (target - input)
    else:
        safe = where(target > 0, target, 1.0)
        loss = where(target > 0, target * (safe.log() - input), 0.0)
    if reduction == "batchmean":
        return loss.sum() / (input.shape[0] if input.ndim else 1)
    return _reduce_loss(loss, reduction)


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """Cosine of the angle between ``x1`` and ``x2`` along ``dim``."""
    if AUTOCAST:
        x1, x2 = autocast_inputs("cosine_similarity", (x1, x2))
    n1 = (x1 * x1).sum(dim).sqrt().clamp(min=eps)
    n2 = (x2 * x2).sum(dim).sqrt().clamp(min=eps)
    return (x1 * x2).sum(dim) / (n1 * n2)


def cosine_embedding_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0,
                          reduction: str = "mean") -> Tensor:
    """``1 - cos`` for pairs labelled 1, ``max(0, cos - margin)`` for pairs labelled -1."""
    if AUTOCAST:
        input1, input2 = autocast_inputs("cosine_embedding_loss", (input1, input2))
    eps = 1e-12  # PyTorch's EPSILON in its implementation
    dot = (input1 * input2).sum(-1)
    mag = (((input1 * input1).sum(-1) + eps) * ((input2 * input2).sum(-1) + eps)).sqrt()
    cos = dot / mag
    loss = where(target > 0, 1.0 - cos, (cos - margin).clamp(min=0.0))
    loss = where((target > 0) | (target < 0), loss, 0.0)
    return _reduce_loss(loss, reduction)


def margin_ranking_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0,
                        reduction: str = "mean") -> Tensor:
    """``max(0, -target * (input1 - input2) + margin)``: ``target = 1`` ranks ``input1`` first.

    Examples
    --------
    >>> import ember
    >>> import ember.nn.functional as F
    >>> F.margin_ranking_loss(ember.tensor([1., 2.]), ember.tensor([2., 1.]),
    ...                       ember.tensor([1., 1.]), reduction="none").tolist()
    [1.0, 0.0]
    """
    if AUTOCAST:
        input1, input2, target = autocast_inputs("margin_ranking_loss", (input1, input2, target))
    return _reduce_loss((-target * (input1 - input2) + margin).clamp(min=0.0), reduction)


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6,
                      keepdim: bool = False) -> Tensor:
    """The ``p``-norm of ``x1 - x2 + eps`` along the last axis (PyTorch's ``eps`` placement)."""
    d = (x1 - x2 + eps).abs()
    if p == float("inf"):
        return d.amax(-1, keepdim=keepdim)
    if p == 1.0:
        return d.sum(-1, keepdim=keepdim)
    if p == 2.0:
        return (d * d).sum(-1, keepdim=keepdim).sqrt()
    if p <= 0:
        raise ValueError(f"pairwise_distance: p must be positive, got {p}")
    return (d ** p).sum(-1, keepdim=keepdim) ** (1.0 / p)


def triplet_margin_loss(anchor: Tensor, positive: Tensor, negative: Tensor, margin: float = 1.0,
                        p: float = 2.0, eps: float = 1e-6, swap: bool = False,
                        reduction: str = "mean") -> Tensor:
    """``max(d(a, p) - d(a, n) + margin, 0)`` with ``d`` the `pairwise_distance`; ``swap``
    uses ``min(d(a, n), d(p, n))`` as the negative distance.

    Examples
    --------
    >>> import ember
    >>> import ember.nn.functional as F
    >>> a, p, n = ember.zeros(1, 2), ember.tensor([[3., 4.]]), ember.tensor([[6., 8.]])
    >>> round(F.triplet_margin_loss(a, p, n, eps=0.0).item(), 4)
    0.0
    """
    if AUTOCAST:
        anchor, positive, negative = autocast_inputs("triplet_margin_loss",
                                                     (anchor, positive, negative))
    dims = {anchor.ndim, positive.ndim, negative.ndim}
    if len(dims) != 1 or dims.pop() not in (1, 2):
        raise ValueError(f"triplet_margin_loss: anchor, positive and negative must all be 1-D "
                         f"or all 2-D, got {anchor.shape}, {positive.shape}, {negative.shape}")
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        from .._elementwise import minimum

        d_neg = minimum(d_neg, pairwise_distance(positive, negative, p, eps))
    return _reduce_loss((d_pos - d_neg + margin).clamp(min=0.0), reduction)
