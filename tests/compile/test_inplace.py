"""Compiled programs write a dying intermediate's ufunc result in place, never a live one."""

from __future__ import annotations

import numpy as np

import ember


def test_a_chain_reuses_its_dying_intermediates_and_stays_exact() -> None:
    @ember.compile
    def f(x):
        return ((x * 2.0 + 1.0) * x - 3.0).abs()

    rng = np.random.default_rng(0)
    for _ in range(3):
        a = rng.standard_normal((64, 32)).astype(np.float32)
        got = f(ember.tensor(a)).numpy()
        np.testing.assert_array_equal(got, np.abs((a * 2.0 + 1.0) * a - 3.0))
    prog = next(f.programs())
    assert prog.inplace >= 2, prog.source
    assert "out=" in prog.source


def test_a_value_still_seen_through_a_view_is_never_overwritten() -> None:
    @ember.compile
    def f(x):
        y = x * 2.0
        view = y.reshape(-1)[::2]  # alive after y's last use below
        z = y + 1.0  # y dies here, but its memory is still read through `view`
        return z * 3.0, view

    for seed in range(3):
        a = np.random.default_rng(seed).standard_normal((8, 6)).astype(np.float32)
        z, view = f(ember.tensor(a))
        np.testing.assert_array_equal(view.numpy(), (a * 2.0).reshape(-1)[::2])
        np.testing.assert_array_equal(z.numpy(), (a * 2.0 + 1.0) * 3.0)


def test_arguments_and_parameters_are_never_written() -> None:
    w = ember.tensor(np.ones((4, 4), np.float32))

    @ember.compile
    def f(x):
        return (x + w) * 2.0

    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    x = ember.tensor(a)
    for _ in range(3):
        np.testing.assert_array_equal(f(x).numpy(), (a + 1.0) * 2.0)
    np.testing.assert_array_equal(x.numpy(), a)
    np.testing.assert_array_equal(w.numpy(), np.ones((4, 4), np.float32))
