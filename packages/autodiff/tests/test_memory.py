"""Memory: graphs are freed by reference counting, loops stay flat, checkpointing saves."""

from __future__ import annotations

import gc
import os
import tracemalloc
import weakref

import ember
import ember.functional as F
import numpy as np

AD = "autodiff<cpu>"


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_graph_is_freed_by_reference_counting_alone() -> None:
    gc.disable()
    try:
        x = ember.randn(64, 64, dtype=ember.float64, device=AD, requires_grad=True)
        h = (x * 2.0).tanh()
        saved = weakref.ref(h.payload.value)  # the inner value, saved by the tanh and sum nodes
        y = (h * h).sum()
        del h
        assert saved() is not None
        y.backward()
        del y
        assert saved() is None
    finally:
        gc.enable()


def test_mlp_training_loop_keeps_process_memory_flat() -> None:
    rng = np.random.default_rng(0)
    params = [ember.tensor(rng.normal(size=s) * 0.1, dtype=ember.float32, device=AD,
                           requires_grad=True) for s in ((32, 64), (32,), (10, 32), (10,))]
    x = ember.tensor(rng.normal(size=(16, 64)), dtype=ember.float32, device=AD)
    y = ember.tensor(rng.integers(0, 10, 16), device=AD)
    wrap = ember.device(AD).backend.wrap

    def step() -> None:
        h = F.linear(x, params[0], params[1]).relu()
        grads = F.cross_entropy(F.linear(h, params[2], params[3]), y).backward()
        for i, p in enumerate(params):  # an SGD step makes fresh leaves every time
            params[i] = wrap(p.inner - grads[p] * 0.01).requires_grad_()

    for _ in range(100):
        step()
    before = _rss_bytes()
    for _ in range(1000):
        step()
    growth = _rss_bytes() - before
    assert growth < 2 * 2**20, f"RSS grew by {growth / 2**20:.2f} MiB over 1000 steps"


def _chain_peak(device: str) -> tuple[int, np.ndarray]:
    x = ember.tensor(np.linspace(-1, 1, 2**15), dtype=ember.float64, device=device,
                     requires_grad=True)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        y = x
        for _ in range(32):
            y = (y * 1.1).sin()
        grads = y.sum().backward()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, grads[x].numpy()


def test_checkpointing_lowers_peak_memory_and_keeps_gradients() -> None:
    plain_peak, plain = _chain_peak(AD)
    ckpt_peak, ckpt = _chain_peak("autodiff<cpu,checkpointing=true>")
    np.testing.assert_array_equal(ckpt, plain)
    # 64 ops on 256 KiB arrays: plain keeps the 32 inputs of sin (a product with a constant
    # saves nothing of its other input), checkpointing one value in 8 plus one segment being
    # recomputed
    assert ckpt_peak < 0.6 * plain_peak, (ckpt_peak, plain_peak)


def test_checkpointing_recomputes_through_leaves_and_constants() -> None:
    d = "autodiff<cpu,checkpointing=true,checkpoint_segment=3>"
    x = ember.tensor([0.5, -1.0, 2.0], dtype=ember.float64, device=d, requires_grad=True)
    c = ember.tensor([2.0, 3.0, 4.0], dtype=ember.float64, device=d)
    y = x
    for _ in range(7):
        y = (y * c).sin() + x
    got = y.sum().backward()[x].numpy()
    xp = ember.tensor([0.5, -1.0, 2.0], dtype=ember.float64, device=AD, requires_grad=True)
    cp = ember.tensor([2.0, 3.0, 4.0], dtype=ember.float64, device=AD)
    yp = xp
    for _ in range(7):
        yp = (yp * cp).sin() + xp
    np.testing.assert_array_equal(got, yp.sum().backward()[xp].numpy())
