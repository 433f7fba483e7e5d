"""`ember.compile` guards on the `ember.autocast` regions open in the thread: a function traced
outside autocast is not replayed inside it (nor the other way round), and a training step
traced inside autocast replays with the parameters' current values."""

from __future__ import annotations

import numpy as np

import ember
from ember import functional as F, nn, optim

DEV = "autodiff<cpu>"


def _f(x: ember.Tensor, w: ember.Tensor) -> ember.Tensor:
    return (x @ w).softmax(-1)


def test_traced_outside_is_not_replayed_inside_and_back() -> None:
    rng = np.random.default_rng(0)
    x = ember.tensor(rng.standard_normal((4, 8)), dtype=ember.float32)
    w = ember.tensor(rng.standard_normal((8, 8)), dtype=ember.float32)
    f = ember.compile(_f)
    outside = f(x, w)
    assert f(x, w).dtype is ember.float32 and f.stats.replays == 1
    with ember.autocast("cpu", dtype=ember.bfloat16):
        inside = f(x, w)
        eager = _f(x, w)
        again = f(x, w)
    assert f.stats.traces == 2 and "autocast regions" in f.stats.reasons[-1]
    assert f.stats.replays == 2
    # the product ran in bfloat16: different numbers from the float32 trace, equal to eager
    np.testing.assert_array_equal(inside.numpy(), eager.numpy())
    np.testing.assert_array_equal(again.numpy(), eager.numpy())
    assert not np.array_equal(inside.numpy(), outside.numpy())
    # leaving the region replays the float32 program again
    np.testing.assert_array_equal(f(x, w).numpy(), outside.numpy())
    assert f.stats.traces == 2
    # another dtype, a disabled region and another device are other signatures
    with ember.autocast("cpu", dtype=ember.float16):
        f(x, w)
    assert f.stats.traces == 3
    with ember.autocast("cpu", dtype=ember.bfloat16), ember.autocast("cpu", enabled=False):
        np.testing.assert_array_equal(f(x, w).numpy(), outside.numpy())
    assert f.stats.traces == 4


def test_training_step_traced_inside_autocast_follows_the_parameters() -> None:
    def make() -> tuple[nn.Module, optim.Optimizer]:
        ember.manual_seed(0)
        model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)).to(DEV)
        return model, optim.SGD(model.parameters(), lr=0.5)

    def stepper(model: nn.Module, opt: optim.Optimizer):  # type: ignore[no-untyped-def]
        def step(x: ember.Tensor, y: ember.Tensor) -> ember.Tensor:
            with ember.autocast("cpu", dtype=ember.bfloat16):
                loss = F.cross_entropy(model(x), y)
            opt.step(loss.backward())
            return loss

        return step

    rng = np.random.default_rng(1)
    batches = [(ember.tensor(rng.standard_normal((6, 5)), dtype=ember.float32, device=DEV),
                ember.tensor(rng.integers(0, 3, 6), dtype=ember.int64, device=DEV))
               for _ in range(4)]
    m1, o1 = make()
    m2, o2 = make()
    eager, compiled = stepper(m1, o1), ember.compile(stepper(m2, o2))
    for x, y in batches:
        le, lc = eager(x, y), compiled(x, y)
        assert lc.dtype is ember.float32
        np.testing.assert_allclose(lc.numpy(), le.numpy(), rtol=1e-6, atol=1e-6)
    assert compiled.stats.replays >= 2
    for p1, p2 in zip(m1.parameters(), m2.parameters(), strict=True):
        assert p2.dtype is ember.float32
        np.testing.assert_allclose(p2.numpy(), p1.numpy(), rtol=1e-6, atol=1e-6)
