"""Sampling from given distributions: ``multinomial``, ``bernoulli``, ``randperm``.

Checks by statistics with fixed seeds: chi-square of category counts against the weights at a
critical value a correct sampler exceeds with probability 1e-4, and reproducibility per seed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ember

from ... import _dtype as dt
from .._case import Case, register

# scipy.stats.chi2.ppf(1 - 1e-4, df) for df = 3
_CHI2_3 = 21.108


def _chi2(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def _multinomial_check(device: Any) -> None:
    w = np.array([[2.0, 0.0, 1.0, 4.0, 3.0], [1.0, 1.0, 0.0, 1.0, 1.0]], dtype=np.float32)
    t = ember.tensor(w, device=device)
    out = np.asarray(ember.multinomial(t, 6000, True, generator=ember.Generator(1)).numpy())
    assert out.shape == (2, 6000) and out.dtype == np.int64
    for row, weights in zip(out, w, strict=True):
        counts = np.bincount(row, minlength=5)
        assert not counts[weights == 0].any(), f"multinomial drew a zero-weight category: {counts}"
        nz = weights > 0
        chi2 = _chi2(counts[nz], weights[nz] / weights.sum())
        assert chi2 < _CHI2_3, f"multinomial counts {counts} for weights {weights}: chi2 {chi2}"
    few = ember.multinomial(t, 3, generator=ember.Generator(2)).numpy()
    assert all(len(set(r)) == 3 and 1 not in r for r in few[:1]), f"without replacement: {few}"
    again = ember.multinomial(t, 3, generator=ember.Generator(2)).numpy()
    assert (few == again).all(), "multinomial: the same seed gave different draws"


def _bernoulli_check(device: Any) -> None:
    p = ember.tensor(np.repeat([0.0, 0.3, 1.0], 6000).astype(np.float32), device=device)
    out = np.asarray(ember.bernoulli(p, generator=ember.Generator(3)).numpy()).reshape(3, 6000)
    means = out.mean(1)
    assert means[0] == 0.0 and means[2] == 1.0, f"bernoulli of 0 and 1 gave means {means}"
    assert abs(means[1] - 0.3) < 0.03, f"bernoulli(0.3) mean {means[1]:.4f}"


def _randperm_check(device: Any) -> None:
    for n in (0, 1, 9, 300):
        out = ember.randperm(n, generator=ember.Generator(n), device=device)
        assert out.dtype is dt.int64 and sorted(out.tolist()) == list(range(n)), (
            f"randperm({n}) is not a permutation: {out.tolist()}")
    a = ember.randperm(50, generator=ember.Generator(4), device=device).tolist()
    b = ember.randperm(50, generator=ember.Generator(4), device=device).tolist()
    assert a == b and a != sorted(a), "randperm: not reproducible per seed, or not shuffled"


register(Case(id="multinomial-chi-square", group="random", check=_multinomial_check,
              dtypes=(dt.float32, dt.int64)))
register(Case(id="bernoulli-means", group="random", check=_bernoulli_check,
              dtypes=(dt.float32,)))
register(Case(id="randperm-permutation", group="random", check=_randperm_check,
              dtypes=(dt.int64,)))
