# Lambdas with default arguments bind loop variables; mypy cannot infer their types.
# mypy: disable-error-code="misc"
"""Losses of ``ember.nn.functional`` built from primitives: margin ranking, triplet margin and
CTC (the forward algorithm), against float64 references written out here."""

from __future__ import annotations

from typing import Any

import numpy as np

import ember.nn.functional as NF

from ... import _dtype as dt
from .._case import Arg, rng_for, sample
from ._build import case

_DTYPES = (dt.float32, dt.float64)


def _dist(a: Any, b: Any, p: float, eps: float = 1e-6) -> Any:
    return (np.abs(a - b + eps) ** p).sum(-1) ** (1 / p)


def _log_softmax(x: Any) -> Any:
    s = x - x.max(-1, keepdims=True)
    return s - np.log(np.exp(s).sum(-1, keepdims=True))


def _ctc_ref(x: Any, targets: Any, in_lens: list[int], tg_lens: list[int]) -> Any:
    """Per-sample CTC losses by the forward algorithm in probability space, in float64."""
    probs = np.exp(_log_softmax(x))
    out = []
    for i, (t_len, s_len) in enumerate(zip(in_lens, tg_lens, strict=True)):
        ext = [0]
        for label in targets[i, :s_len]:
            ext += [int(label), 0]
        alpha = np.zeros(len(ext))
        alpha[0] = probs[0, i, ext[0]]
        if len(ext) > 1:
            alpha[1] = probs[0, i, ext[1]]
        for t in range(1, t_len):
            prev = alpha.copy()
            for s in range(len(ext)):
                a = prev[s] + (prev[s - 1] if s >= 1 else 0.0)
                if s >= 2 and ext[s] != 0 and ext[s] != ext[s - 2]:
                    a += prev[s - 2]
                alpha[s] = a * probs[t, i, ext[s]]
        out.append(-np.log(alpha[-1] + (alpha[-2] if len(ext) > 1 else 0.0)))
    return np.array(out)


_IN_LENS, _TG_LENS = [6, 5, 6], [3, 2, 0]

for _d in _DTYPES:
    cid = f"margin_ranking_loss-{_d.name}"
    rng = rng_for(cid)
    signs = np.where(rng.random(7) < 0.5, -1.0, 1.0)
    args = [Arg(np.asarray(sample((7,), _d, rng)), "", (), _d),
            Arg(np.asarray(sample((7,), _d, rng)), "", (), _d), Arg(signs, "", (), _d)]
    case(cid, "functional", lambda a, b, y: NF.margin_ranking_loss(a, b, y, 0.2),
         lambda a, b, y: np.maximum(-y * (a - b) + 0.2, 0).mean(), args, _d, grad=(0, 1))
    for _v, (p, swap, red) in {"p2-mean": (2.0, False, "mean"),
                               "p1-swap-none": (1.0, True, "none")}.items():
        cid = f"triplet_margin_loss-{_v}-{_d.name}"
        rng = rng_for(cid)
        args = [Arg(np.asarray(sample((4, 5), _d, rng)), "", (), _d) for _ in range(3)]

        def _triplet_ref(a: Any, q: Any, n: Any, p: float = p, swap: bool = swap,
                         red: str = red) -> Any:
            d_neg = _dist(a, n, p)
            if swap:
                d_neg = np.minimum(d_neg, _dist(q, n, p))
            loss = np.maximum(_dist(a, q, p) - d_neg + 0.5, 0)
            return loss.mean() if red == "mean" else loss

        case(cid, "functional",
             lambda a, q, n, p=p, swap=swap, red=red: NF.triplet_margin_loss(
                 a, q, n, 0.5, p, swap=swap, reduction=red),
             _triplet_ref, args, _d)
    cid = f"ctc_loss-{_d.name}"
    rng = rng_for(cid)
    targets = np.array([[1, 2, 2], [3, 1, 0], [0, 0, 0]], dtype=np.int64)
    args = [Arg(np.asarray(sample((6, 3, 4), _d, rng)), "", (), _d),
            Arg(targets, "", (), dt.int64)]
    case(cid, "functional",
         lambda x, y: NF.ctc_loss(x.log_softmax(-1), y, _IN_LENS, _TG_LENS, reduction="none"),
         lambda x, y: _ctc_ref(x, y, _IN_LENS, _TG_LENS), args, _d, grad=(0,))
