"""`ember_cuda.graph`: a recorded training step replays exactly what the eager step computes.

Needs a GPU (skipped without one: CI has none).  On the H200:
``python benchmarks/gpu/with_env.py python -m pytest packages/backend-cuda/tests``.
The oracle is the same step run eagerly on ``autodiff<cuda:0>`` from the same initial weights
and batches: a replay must reproduce it, replay after replay.
"""

from __future__ import annotations

from typing import Any

import ember
import numpy as np
import pytest

from ember_cuda import CaptureError, graph, probe

pytestmark = pytest.mark.skipif(not probe()[0], reason="needs a CUDA GPU")

AD = "autodiff<cuda:0>"


def _batches(n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(1)
    return [(rng.standard_normal((16, 20)).astype(np.float32),
             rng.integers(0, 5, 16).astype(np.int64)) for _ in range(n)]


def _setup(capturable: bool = True) -> tuple[Any, Any, Any, Any]:
    """A small classifier, its optimizer, and input tensors holding batch 0."""
    nn = ember.nn
    g = ember.Generator(0)
    model = nn.Sequential(nn.Linear(20, 32, generator=g), nn.ReLU(),
                          nn.Linear(32, 5, generator=g)).to(AD)
    opt = ember.optim.Adam(model.parameters(), lr=1e-2, capturable=capturable)
    xb, yb = _batches(1)[0]
    return model, opt, ember.tensor(xb, device=AD), ember.tensor(yb, device=AD)


def _step_fn(model: Any, opt: Any, x: Any, y: Any) -> Any:
    def step() -> Any:
        loss = ember.nn.functional.cross_entropy(model(x), y)
        opt.step(loss.backward())
        return loss
    return step


def _weights(model: Any) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in model.state_dict().items()}


def test_replays_match_eager_steps_batch_after_batch() -> None:
    data = _batches(8)
    # eager: 3 warm-up steps on batch 0, then one step per later batch
    model, opt, _, _ = _setup()
    eager_losses = []
    for i, (xb, yb) in enumerate([data[0]] * 3 + data[1:]):
        xe, ye = ember.tensor(xb, device=AD), ember.tensor(yb, device=AD)
        loss = ember.nn.functional.cross_entropy(model(xe), ye)
        opt.step(loss.backward())
        if i >= 3:
            eager_losses.append(loss.item())
    want = _weights(model)

    model, opt, x, y = _setup()
    g = graph(_step_fn(model, opt, x, y), device=AD, warmup=3)  # warm-up on batch 0
    losses = []
    for xb, yb in data[1:]:
        g.load(x, xb)
        g.load(y, yb)
        losses.append(float(g.replay().item()))
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5, atol=1e-6)
    got = _weights(model)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_host_step_count_is_refused_and_nothing_is_lost() -> None:
    model, opt, x, y = _setup(capturable=False)
    step = _step_fn(model, opt, x, y)
    with pytest.raises(CaptureError, match="capturable=True"):
        graph(step, device=AD, warmup=2)
    after_warmup = _weights(model)
    # the failed recording changed nothing: one more eager step still works from there
    step()
    assert not all(np.array_equal(after_warmup[k], v) for k, v in _weights(model).items())


def test_reading_a_value_back_inside_the_step_is_refused() -> None:
    model, opt, x, y = _setup()
    inner = _step_fn(model, opt, x, y)

    def step() -> Any:
        loss = inner()
        print(loss.item())
        return loss

    with pytest.raises(CaptureError, match="could not be recorded"):
        graph(step, device=AD, warmup=1)
    # the parameters still hold their own payloads: eager steps go on from the warm-up
    after_warmup = _weights(model)
    inner()
    assert not all(np.array_equal(after_warmup[k], v) for k, v in _weights(model).items())


def test_load_checks_shapes() -> None:
    model, opt, x, y = _setup()
    g = graph(_step_fn(model, opt, x, y), device=AD, warmup=1)
    with pytest.raises(ValueError, match=r"\[3, 20\].*\[16, 20\]"):
        g.load(x, np.zeros((3, 20), np.float32))


def test_compiled_steps_replay_as_graphs_match_eager_over_cycled_batches() -> None:
    """``ember.compile`` on cuda records one graph and replays it: AdamW (host step count),
    batches cycled as a training loop does (each batch tensor comes back), weights and
    losses as the eager steps give them, and the callers' batch tensors left untouched."""
    data = _batches(4)
    order = [i % len(data) for i in range(10)]

    def run(compiled: bool) -> tuple[list[float], dict[str, np.ndarray], list[Any], Any]:
        nn = ember.nn
        gen = ember.Generator(0)
        model = nn.Sequential(nn.Linear(20, 32, generator=gen), nn.GELU(),
                              nn.Linear(32, 5, generator=gen)).to(AD)
        opt = ember.optim.AdamW(model.parameters(), lr=1e-2)
        batches = [(ember.tensor(xb, device=AD), ember.tensor(yb, device=AD))
                   for xb, yb in data]

        def step(x: Any, y: Any) -> Any:
            loss = ember.nn.functional.cross_entropy(model(x), y)
            opt.step(loss.backward())
            return loss

        fn = ember.compile(step) if compiled else step
        losses = [float(fn(*batches[i]).item()) for i in order]
        return losses, _weights(model), batches, fn

    want, want_w, _, _ = run(False)
    got, got_w, batches, fn = run(True)
    runners = [type(p.runner).__name__ for p in fn.programs()]
    assert "ProgramGraph" in runners, runners
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for k in want_w:
        np.testing.assert_allclose(got_w[k], want_w[k], rtol=1e-5, atol=1e-6, err_msg=k)
    for (x, y), (xb, yb) in zip(batches, data, strict=True):
        np.testing.assert_array_equal(x.numpy(), xb)
        np.testing.assert_array_equal(y.numpy(), yb)
