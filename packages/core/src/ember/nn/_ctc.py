"""Connectionist temporal classification loss: the forward algorithm in log space.

The loss is a composite: one step of ordinary ops per time frame, batched over the sequences
and the positions of the blank-extended targets, so it runs on every backend and its gradient
comes from differentiating the recursion (the backward algorithm is what autodiff computes).
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import _dtype as dt
from .._creation import full, tensor
from .._elementwise import maximum, where
from .._errors import ShapeError
from .._manipulation import cat, stack
from .._tensor import Tensor
from ..amp._state import AUTOCAST, autocast_inputs
from ..functional import _reduce_loss

__all__ = ["ctc_loss"]

Lengths = Tensor | Sequence[int] | int

_NEG = -float("inf")


def _host_lengths(v: Lengths, n: int, name: str) -> list[int]:
    values = v.tolist() if isinstance(v, Tensor) else v
    out = [int(values)] if isinstance(values, (int, float)) else [int(i) for i in values]
    if len(out) != n:
        raise ShapeError(f"ctc_loss: {name} has {len(out)} entries for a batch of {n}")
    return out


def _logaddexp(*xs: Tensor) -> Tensor:
    """``log(sum(exp(x)))`` of the ``xs`` elementwise; where every term is ``-inf`` the result
    is ``-inf`` with a zero gradient (never ``inf * 0``)."""
    m = xs[0]
    for x in xs[1:]:
        m = maximum(m, x)
    m = m.detach()
    dead = m.isinf()
    m = where(dead, 0.0, m)
    s = (xs[0] - m).exp()
    for x in xs[1:]:
        s = s + (x - m).exp()
    return where(dead, _NEG, where(dead, 1.0, s).log() + m)


def ctc_loss(log_probs: Tensor, targets: Tensor, input_lengths: Lengths, target_lengths: Lengths,
             blank: int = 0, reduction: str = "mean", zero_infinity: bool = False) -> Tensor:
    """Negative log likelihood of ``targets`` under the frame distributions ``log_probs``.

    ``log_probs`` is ``[T, N, C]`` (or ``[T, C]``) log-probabilities; ``targets`` is
    ``[N, S]`` padded or the ``N`` targets concatenated in 1-D; lengths are tensors or
    sequences of ints.  ``reduction="mean"`` divides each loss by its target length, then
    averages over the batch, as PyTorch.

    Note: a target longer than its input cannot be aligned; PyTorch returns ``inf`` for it,
    ember raises ``ValueError`` naming the sample unless ``zero_infinity=True`` (then its loss
    is zero, as in PyTorch).

    Examples
    --------
    >>> import ember
    >>> import ember.nn.functional as F
    >>> lp = ember.full((2, 1, 2), 0.5).log()
    >>> round(F.ctc_loss(lp, ember.tensor([[1]]), [2], [1], reduction="sum").item(), 4)
    0.2877
    """
    if AUTOCAST:
        (log_probs,) = autocast_inputs("ctc_loss", (log_probs,))
    unbatched = log_probs.ndim == 2
    if unbatched:
        log_probs = log_probs.unsqueeze(1)
        targets = targets.unsqueeze(0) if targets.ndim == 1 else targets
    if log_probs.ndim != 3 or not log_probs.dtype.is_floating_point:
        raise ShapeError(f"ctc_loss: log_probs must be floating [T, N, C] or [T, C], got "
                         f"{log_probs.shape} {log_probs.dtype.name}")
    t_max, n, c = log_probs.shape
    in_lens = _host_lengths(input_lengths, n, "input_lengths")
    tg_lens = _host_lengths(target_lengths, n, "target_lengths")
    if not 0 <= blank < c:
        raise ValueError(f"ctc_loss: blank={blank} is not a class of {c}")
    for i, (li, lt) in enumerate(zip(in_lens, tg_lens, strict=True)):
        if not 0 <= li <= t_max:
            raise ValueError(f"ctc_loss: input_lengths[{i}]={li} is outside [0, {t_max}] "
                             f"(log_probs has {t_max} frames)")
        if lt < 0:
            raise ValueError(f"ctc_loss: target_lengths[{i}]={lt} is negative")
        if lt > li and not zero_infinity:
            raise ValueError(f"ctc_loss: target_lengths[{i}]={lt} is longer than "
                             f"input_lengths[{i}]={li}: no alignment exists (pass "
                             f"zero_infinity=True to give such samples a zero loss)")
    dev, ftype = log_probs.device, log_probs.dtype
    padded = _padded_targets(targets, tg_lens, n).detach().to(dev)
    s = padded.shape[1]
    width = 2 * s + 1
    # the blank-extended targets [blank, y1, blank, y2, ..., blank]; padding becomes blank
    blanks = full((n, s), blank, dtype=dt.int64, device=dev)
    ext = cat([stack([blanks, padded], -1).reshape(n, 2 * s),
               full((n, 1), blank, dtype=dt.int64, device=dev)], -1)
    inside = tensor([[p <= 2 * lt for p in range(width)] for lt in tg_lens], device=dev)
    ext = where(inside, ext, blank)
    # a step over two positions is allowed onto a label that differs from the label before
    odd = tensor([[p >= 2 and p % 2 == 1 for p in range(width)]], device=dev)
    skip = odd & cat([full((n, 2), False, device=dev), ext[:, 2:] != ext[:, :-2]], -1)
    # lp[n, t, p]: log-probability of the extended label p at frame t
    lp = log_probs.permute(1, 0, 2).gather(2, ext.unsqueeze(1).expand(n, t_max, width))
    start = tensor([[p == 0 or (p == 1 and lt > 0) for p in range(width)] for lt in tg_lens],
                   device=dev)
    alpha = where(start, lp[:, 0], _NEG)
    one, two = full((n, 1), _NEG, dtype=ftype, device=dev), full((n, 2), _NEG, dtype=ftype,
                                                                  device=dev)
    for t in range(1, max(in_lens, default=0)):
        stay = alpha
        advance = cat([one, alpha[:, :-1]], -1)
        jump = where(skip, cat([two, alpha[:, :-2]], -1), _NEG)
        step = _logaddexp(stay, advance, jump) + lp[:, t]
        running = tensor([[t < li] for li in in_lens], device=dev)
        alpha = where(running, step, alpha)  # a finished sequence keeps its last frame's alpha
    last = alpha.gather(1, tensor([[2 * lt] for lt in tg_lens], device=dev))
    before = alpha.gather(1, tensor([[max(2 * lt - 1, 0)] for lt in tg_lens], device=dev))
    before = where(tensor([[lt > 0] for lt in tg_lens], device=dev), before, _NEG)
    loss = -_logaddexp(last, before).squeeze(1)
    if any(li == 0 for li in in_lens):  # no frames: probability 1 of the empty target only
        no_frames = tensor([li == 0 for li in in_lens], device=dev)
        empty = tensor([lt == 0 for lt in tg_lens], device=dev)
        loss = where(no_frames, where(empty, 0.0, float("inf")), loss)
    if zero_infinity:
        loss = where(loss.isinf(), 0.0, loss)
    if reduction == "mean":
        per = tensor([max(lt, 1) for lt in tg_lens], dtype=ftype, device=dev)
        return (loss / per).mean()
    out = _reduce_loss(loss, reduction)
    return out.squeeze(0) if unbatched and reduction == "none" else out


def _padded_targets(targets: Tensor, tg_lens: list[int], n: int) -> Tensor:
    """``[N, max(target_lengths)]`` int64 targets (entries past a length are arbitrary)."""
    s = max(tg_lens, default=0)
    if targets.ndim == 2:
        if targets.shape[0] != n or targets.shape[1] < s:
            raise ShapeError(f"ctc_loss: targets {targets.shape} do not hold {n} targets of "
                             f"lengths {tg_lens}")
        return targets[:, :s].long() if s else _empty(targets, n)
    if targets.ndim != 1 or targets.shape[0] < sum(tg_lens):
        raise ShapeError(f"ctc_loss: concatenated targets {targets.shape} are shorter than the "
                         f"sum of target_lengths {tg_lens}")
    if s == 0:
        return _empty(targets, n)
    offsets = [sum(tg_lens[:i]) for i in range(n)]
    last = targets.shape[0] - 1  # entries past a target's length are masked: any index does
    rows = [[min(o + min(j, max(lt - 1, 0)), last) for j in range(s)]
            for o, lt in zip(offsets, tg_lens, strict=True)]
    index = tensor(rows, dtype=dt.int64, device=targets.device)
    return targets.long().index_select(0, index.reshape(-1)).reshape(n, s)


def _empty(targets: Tensor, n: int) -> Tensor:
    return full((n, 0), 0, dtype=dt.int64, device=targets.device)
