"""The fused Adam / AdamW update (`adam_step`): one kernel per parameter, same numbers as the
op-by-op update and as Adam written out in numpy (float64)."""

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
def test_fused_adam_is_one_kernel_per_parameter(dev: ember.Device, monkeypatch: pytest.MonkeyPatch,
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
    # one update kernel per parameter and step, plus the zero moments made at the first step;
    # capturable: the update reads the step count from the device (one more small kernel
    # counts it, and one makes it at the first step; the constant 1 it adds is made once per
    # process, here or in an earlier test)
    if capturable:
        assert seen["adam_step_capturable"] == 3 * len(shapes)
        assert seen["ember_ew"] - 3 * len(shapes) - 3 * len(shapes) in (0, 1)
        assert set(seen) == {"adam_step_capturable", "ember_ew"}
    else:
        assert seen == Counter(adam_step=3 * len(shapes), ember_ew=2 * len(shapes))
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
