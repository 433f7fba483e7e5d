"""`ember.compile` on ``wgpu:0`` replaying recorded dispatches (`ember_wgpu.replay`): the same
numbers as the program run as Python, bit for bit, and as eager execution; results that the
next replay does not overwrite; new inputs, a changed learning rate, random ops."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from ember_wgpu.replay import ProgramReplay

import ember

RNG = np.random.default_rng(5)
X = RNG.standard_normal((48, 12)).astype(np.float32)
Y = RNG.integers(0, 4, 48)


def _train(device: str, compiled: bool, steps: int, lr_at: dict[int, float] | None = None
           ) -> tuple[list[float], list[np.ndarray], Any]:
    ember.manual_seed(3)
    model = ember.nn.Sequential(ember.nn.Linear(12, 16), ember.nn.Tanh(),
                                ember.nn.Linear(16, 4)).to(device)
    opt = ember.optim.Adam(model.parameters(), lr=1e-2)

    def step(x: Any, y: Any) -> Any:
        loss = ember.nn.functional.cross_entropy(model(x), y)
        opt.step(loss.backward())
        return loss

    fn = ember.compile(step) if compiled else step
    x, y = ember.tensor(X, device=device), ember.tensor(Y, device=device)
    losses = []
    for i in range(steps):
        if lr_at and i in lr_at:
            for group in opt.param_groups:
                group["lr"] = lr_at[i]
        losses.append(float(fn(x, y).item()))
    return losses, [p.numpy() for p in model.parameters()], fn


def _replays(fn: Any) -> list[ProgramReplay]:
    return [p.runner for p in fn.programs() if isinstance(p.runner, ProgramReplay)]


@pytest.mark.parametrize("device", ["autodiff<wgpu:0>", "autodiff<fusion<wgpu:0>>"])
def test_a_replayed_training_step_matches_the_python_program_bit_for_bit(
        wg_device: object, device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    losses, params, fn = _train(device, True, 12)
    (replay,) = _replays(fn)
    assert replay.records == 1 and replay.replays >= 9
    monkeypatch.setenv("EMBER_COMPILE_REPLAY", "0")
    plain_losses, plain_params, plain_fn = _train(device, True, 12)
    assert not _replays(plain_fn)
    assert losses == plain_losses
    for a, b in zip(params, plain_params, strict=True):
        np.testing.assert_array_equal(a, b)
    # and eager execution, to float32 rounding (the loss falls)
    eager_losses, eager_params, _ = _train(device, False, 12)
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-4, atol=1e-5)
    for a, b in zip(params, eager_params, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert losses[-1] < losses[0]


def test_a_changed_learning_rate_records_again(wg_device: object,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    lr_at = {6: 3e-3}
    losses, params, fn = _train("autodiff<wgpu:0>", True, 10, lr_at)
    (replay,) = _replays(fn)
    assert replay.records == 2
    monkeypatch.setenv("EMBER_COMPILE_REPLAY", "0")
    plain_losses, plain_params, _ = _train("autodiff<wgpu:0>", True, 10, lr_at)
    assert losses == plain_losses
    for a, b in zip(params, plain_params, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_learning_rate_changed_at_every_step_stops_the_recording(
        wg_device: object, monkeypatch: pytest.MonkeyPatch) -> None:
    lr_at = {i: 1e-2 / (1 + i) for i in range(1, 12)}
    losses, params, fn = _train("autodiff<wgpu:0>", True, 12, lr_at)
    assert not _replays(fn)  # runs as Python after three recordings that paid nothing back
    monkeypatch.setenv("EMBER_COMPILE_REPLAY", "0")
    plain_losses, plain_params, _ = _train("autodiff<wgpu:0>", True, 12, lr_at)
    assert losses == plain_losses
    for a, b in zip(params, plain_params, strict=True):
        np.testing.assert_array_equal(a, b)


def test_results_outlive_the_next_replay_and_new_inputs_are_read(wg_device: Any) -> None:
    w = ember.tensor(RNG.standard_normal((5, 3)).astype(np.float32), device=wg_device)
    f = ember.compile(lambda x: ((x @ w).relu() * 2.0 + 1.0, x.sum(0)))
    rt = wg_device._backend.runtime
    inputs = [RNG.standard_normal((4, 5)).astype(np.float32) for _ in range(6)]
    outs = [f(ember.tensor(a, device=wg_device)) for a in inputs]
    (replay,) = _replays(f)
    assert replay.replays >= 3
    steps = len(replay.recorded.steps) if replay.recorded else 0
    before = rt.dispatches
    f(ember.tensor(inputs[0], device=wg_device))[0].numpy()
    # one copy in, the recorded dispatches, two copies out: no kernel ran as Python
    assert rt.dispatches - before == steps + 3
    w64 = w.numpy().astype(np.float64)
    for a, (y, s) in zip(inputs, outs, strict=True):  # read after all the replays ran
        np.testing.assert_allclose(y.numpy(), np.maximum(a @ w64, 0) * 2 + 1, rtol=1e-5,
                                   atol=1e-6)
        np.testing.assert_allclose(s.numpy(), a.astype(np.float64).sum(0), rtol=1e-5,
                                   atol=1e-6)


def test_an_argument_is_never_written_by_a_replay(wg_device: Any) -> None:
    f = ember.compile(lambda x: x * 3.0 + 1.0)
    a = RNG.standard_normal(7).astype(np.float32)
    xs = [ember.tensor(a + i, device=wg_device) for i in range(5)]
    ys = [f(x) for x in xs]
    assert _replays(f)
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        np.testing.assert_array_equal(x.numpy(), a + i)
        np.testing.assert_allclose(y.numpy(), (a + i) * 3.0 + 1.0, rtol=1e-6)


def test_programs_with_random_ops_run_as_python(wg_device: Any) -> None:
    f = ember.compile(lambda x: x + ember.rand(3, device=wg_device))
    x = ember.zeros(3, device=wg_device)
    draws = [f(x).numpy() for _ in range(4)]
    assert not _replays(f)
    assert len({d.tobytes() for d in draws}) == 4  # each call draws new numbers


def test_a_recording_reuses_the_buffers_its_program_is_done_with(wg_device: Any) -> None:
    import gc

    def chain(x: Any) -> Any:
        for i in range(40):
            x = (x * 1.5 + i).tanh()
        return x

    f = ember.compile(chain)
    a = RNG.standard_normal(1000).astype(np.float32)
    want = a.astype(np.float64)
    for i in range(40):
        want = np.tanh(want * 1.5 + i)
    for _ in range(4):
        np.testing.assert_allclose(f(ember.tensor(a, device=wg_device)).numpy(), want,
                                   rtol=1e-5, atol=1e-6)
    (replay,) = _replays(f)
    assert replay.recorded is not None and len(replay.recorded.steps) >= 80
    # 80+ kernels; the input's buffer, a few intermediates in turn, the result's
    assert replay.recorded.buffers <= 10, replay.recorded.buffers
    rt = wg_device._backend.runtime
    reserved = sum(len(v) for v in replay.recorded.pool.values())
    free_before = sum(len(v) for v in rt._pool.values())
    del f, replay
    gc.collect()
    assert sum(len(v) for v in rt._pool.values()) >= free_before + reserved


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_data_a_kernel_uploads_while_recorded_survives_the_replays(wg_device: Any,
                                                                   dtype: str) -> None:
    # bilinear interpolation uploads its indices and weights inside the kernel: written once,
    # while recorded, into buffers the recording's earlier kernels never write (with float16
    # the weights once landed in a freed intermediate's buffer and were overwritten)
    F = ember.nn.functional

    def up(x: Any) -> Any:
        return F.interpolate(x, size=(4, 6), mode="bilinear", align_corners=True)

    f = ember.compile(up)
    for _ in range(4):
        a = RNG.standard_normal((1, 2, 3, 4)).astype(dtype)
        x = ember.tensor(a, device=wg_device)
        np.testing.assert_array_equal(f(x).numpy(), up(x).numpy())
    (replay,) = _replays(f)
    assert replay.replays >= 2 and replay.recorded is not None
    assert len(replay.recorded.uploaded) == 6
