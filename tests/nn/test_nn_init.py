"""Initialisers: PyTorch's bounds and variances, seeded, in place on any device."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ember
from ember.nn import init

G = ember.Generator


def _big(*shape: int) -> ember.Tensor:
    return ember.empty(*shape)


def test_uniform_and_normal_have_the_asked_moments() -> None:
    u = init.uniform_(_big(200, 100), -2.0, 4.0, generator=G(0)).numpy()
    assert u.min() >= -2.0 and u.max() < 4.0 and abs(u.mean() - 1.0) < 0.05
    n = init.normal_(_big(200, 100), 3.0, 0.5, generator=G(1)).numpy()
    assert abs(n.mean() - 3.0) < 0.01 and abs(n.std() - 0.5) < 0.01


def test_xavier_and_kaiming_use_pytorchs_fans_and_gains() -> None:
    fan_in, fan_out = 3 * 5 * 5, 16 * 5 * 5
    w = init.xavier_uniform_(_big(16, 3, 5, 5), gain=2.0, generator=G(2)).numpy()
    bound = 2.0 * math.sqrt(6 / (fan_in + fan_out))
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    k = init.kaiming_normal_(_big(400, 300), mode="fan_out", nonlinearity="relu",
                             generator=G(3)).numpy()
    assert abs(k.std() - math.sqrt(2 / 400)) < 0.02 * math.sqrt(2 / 400)
    assert init.calculate_gain("leaky_relu", 0.2) == pytest.approx(math.sqrt(2 / 1.04))
    assert init.calculate_gain("tanh") == pytest.approx(5 / 3)


def test_trunc_normal_stays_in_range_with_the_truncated_moments() -> None:
    t = init.trunc_normal_(_big(300, 300), mean=0.0, std=1.0, a=-1.0, b=2.0,
                           generator=G(4)).numpy()
    assert t.min() >= -1.0 and t.max() <= 2.0
    # moments of N(0, 1) truncated to [-1, 2]
    phi = lambda x: math.exp(-x * x / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    cdf = lambda x: (1 + math.erf(x / math.sqrt(2))) / 2  # noqa: E731
    z = cdf(2.0) - cdf(-1.0)
    mean = (phi(-1.0) - phi(2.0)) / z
    assert abs(t.mean() - mean) < 0.01


@pytest.mark.parametrize("shape", [(6, 6), (4, 9), (9, 4), (4, 2, 3)])
def test_orthogonal_rows_or_columns_are_orthonormal(shape: tuple[int, ...]) -> None:
    q = init.orthogonal_(ember.empty(*shape), gain=1.5, generator=G(5)).numpy()
    q = q.reshape(shape[0], -1) / 1.5
    gram = q @ q.T if q.shape[0] <= q.shape[1] else q.T @ q
    np.testing.assert_allclose(gram, np.eye(gram.shape[0]), atol=1e-5)


def test_initialisers_rebind_in_place_and_keep_autodiff_parameters_trainable() -> None:
    w = ember.zeros(3, 4, device="autodiff<cpu>", requires_grad=True)
    same = init.kaiming_uniform_(w, a=math.sqrt(5), generator=G(6))
    assert same is w and w.requires_grad and str(w.device) == "autodiff<cpu>"
    assert np.abs(w.numpy()).max() > 0
    init.constant_(w, 0.5)
    assert w.tolist() == [[0.5] * 4] * 3
    init.eye_(w)
    np.testing.assert_array_equal(w.numpy(), np.eye(3, 4))


def test_same_generator_seed_gives_the_same_values() -> None:
    a = init.xavier_normal_(ember.empty(5, 5), generator=G(9)).numpy()
    b = init.xavier_normal_(ember.empty(5, 5), generator=G(9)).numpy()
    np.testing.assert_array_equal(a, b)
