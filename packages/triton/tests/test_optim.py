"""The fused Adam / AdamW update (`adam_steps`, `adam_step_capturable`): one kernel for all
parameters of a step (one per parameter when capturable), the same numbers as Adam written out
in numpy (float64)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import ember
import numpy as np
import pytest


def _adam_numpy(p: np.ndarray, grads: list[np.ndarray], lr: float, b1: float, b2: float,
                eps: float, wd: float, decoupled: bool, maximize: bool) -> np.ndarray:
    m, v = np.zeros_like(p), np.zeros_like(p)
    for t, g in enumerate(grads, 1):
        g = -g if maximize else g
        if wd and decoupled:
            p = p * (1 - lr * wd)
        elif wd:
            g = g + wd * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        mhat, vhat = m / (1 - b1 ** t), v / (1 - b2 ** t)
        p = p - lr * mhat / (np.sqrt(vhat) + eps)
    return p


@pytest.mark.parametrize("capturable", [False, True])
@pytest.mark.parametrize(("cls", "options"), [
    (ember.optim.Adam, {}),
    (ember.optim.Adam, {"weight_decay": 0.1, "maximize": True}),
    (ember.optim.AdamW, {"weight_decay": 0.05}),
])
def test_fused_adam_is_one_kernel_per_step(dev: ember.Device, monkeypatch: pytest.MonkeyPatch,
                                                cls: Any, options: dict[str, Any],
                                                capturable: bool) -> None:
    rng = np.random.default_rng(5)
    shapes = [(3, 4), (5,), (2, 1, 3)]
    values = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(3)]
    params = [ember.tensor(v, device=dev) for v in values]
    opt = cls(params, lr=0.01, capturable=capturable, **options)
    seen: Counter[str] = Counter()
    real = dev.backend.launch

    def counting(kernel: Any, grid: Any, *args: Any, **meta: Any) -> None:
        seen[kernel.fn.__name__ if hasattr(kernel, "fn") else kernel.__name__] += 1
        real(kernel, grid, *args, **meta)

    monkeypatch.setattr(dev.backend, "launch", counting)
    for step in grads:
        opt.step({p: ember.tensor(g, device=dev) for p, g in zip(params, step, strict=True)})
    # one update kernel per step for all parameters, plus the zero moments made at the first
    # step; capturable: the same, reading the step count all the parameters share from the
    # device (one more small kernel a step counts it, and one makes it at the first step; the
    # constant 1 it adds is made once per process, here or in an earlier test)
    if capturable:
        assert seen["adam_step_capturable3"] == 3
        assert seen["ember_ew"] - 2 * len(shapes) - 1 - 3 in (0, 1)
        assert set(seen) == {"adam_step_capturable3", "ember_ew"}
        steps = {id(opt.state[id(p)]["step"]) for p in params}
        assert len(steps) == 1 and float(opt.state[id(params[0])]["step"].item()) == 3.0
    else:
        assert seen == Counter(adam_steps3=3, ember_ew=2 * len(shapes))
        # the moments of all parameters share one allocation, each on a 256-byte boundary
        moments = [opt.state[id(p)][k].payload for p in params for k in ("exp_avg", "exp_avg_sq")]
        assert len({id(a.storage) for a in moments}) == 1
        assert all(a.offset * a.dtype.itemsize % 256 == 0 for a in moments)
        assert len({a.offset for a in moments}) == len(moments)
    wd = options.get("weight_decay", 0.01 if cls is ember.optim.AdamW else 0.0)
    for p, v, i in zip(params, values, range(len(shapes)), strict=True):
        want = _adam_numpy(v.astype(np.float64), [g[i].astype(np.float64) for g in grads],
                           0.01, 0.9, 0.999, 1e-8, wd, cls is ember.optim.AdamW,
                           options.get("maximize", False))
        np.testing.assert_allclose(p.numpy(), want, rtol=1e-5, atol=1e-6)


def test_amsgrad_and_float64_keep_the_op_by_op_update(dev: ember.Device) -> None:
    rng = np.random.default_rng(6)
    for dtype, amsgrad in ((ember.float64, False), (ember.float32, True)):
        w = ember.tensor(rng.standard_normal(4), dtype=dtype, device=dev)
        ref = ember.tensor(w.numpy(), dtype=dtype)
        g = rng.standard_normal(4)
        for p in (w, ref):
            opt = ember.optim.Adam([p], lr=0.1, amsgrad=amsgrad)
            opt.step({p: ember.tensor(g, dtype=dtype, device=p.device)})
        np.testing.assert_allclose(w.numpy(), ref.numpy(), rtol=1e-6)


def test_many_parameters_of_mixed_dtypes_and_step_counts(dev: ember.Device,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """More parameters than one launch takes, float32 / float16 / empty ones, and a parameter
    that misses a step (its step count differs, so it is updated in a batch of its own)."""
    from ember_triton.optim import MAX_TENSORS

    rng = np.random.default_rng(7)
    specs = [((i % 5 + 1, 3), ember.float16 if i % 4 == 3 else ember.float32)
             for i in range(MAX_TENSORS + 4)] + [((0, 2), ember.float32)]
    values = [rng.standard_normal(s).astype(np.float32) for s, _ in specs]
    params = [ember.tensor(v, dtype=d, device=dev) for v, (_, d) in zip(values, specs,
                                                                      strict=True)]
    opt = ember.optim.AdamW(params, lr=0.02, weight_decay=0.1)
    steps = [[rng.standard_normal(s).astype(np.float32) for s, _ in specs] for _ in range(3)]
    skipped = 2  # parameter 2 gets no gradient at the first step
    launches: Counter[str] = Counter()
    real = dev.backend.launch

    def counting(kernel: Any, grid: Any, *args: Any, **meta: Any) -> None:
        name = kernel.fn.__name__ if hasattr(kernel, "fn") else kernel.__name__
        if name.startswith("adam"):
            launches[name] += 1
        real(kernel, grid, *args, **meta)

    monkeypatch.setattr(dev.backend, "launch", counting)
    for k, step in enumerate(steps):
        grads = {p: ember.tensor(g, dtype=p.dtype, device=dev)
                 for j, (p, g) in enumerate(zip(params, step, strict=True))
                 if not (k == 0 and j == skipped)}
        opt.step(grads)
    live = len(specs) - 1  # the empty parameter launches nothing
    # step 1: all live but one in batches of MAX_TENSORS; steps 2 and 3: the skipped parameter
    # alone (one step behind, through adam_step), the others batched again
    assert sum(launches.values()) == 3 * -(-(live - 1) // MAX_TENSORS) + 2
    for j, ((_, d), v) in enumerate(zip(specs, values, strict=True)):
        grads = [s[j].astype(np.float64) for s in steps][1 if j == skipped else 0:]
        if d is ember.float16:
            v = v.astype(np.float16)
            grads = [g.astype(np.float16).astype(np.float64) for g in grads]
        want = _adam_numpy(v.astype(np.float64), grads, 0.02, 0.9, 0.999, 1e-8, 0.1, True,
                           False)
        tol = 2e-3 if d is ember.float16 else 1e-5
        np.testing.assert_allclose(params[j].numpy().astype(np.float64), want, rtol=tol,
                                   atol=tol)
