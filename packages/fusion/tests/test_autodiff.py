"""``autodiff<fusion<cpu>>``: the intended stack; the backward pass is recorded through Fusion."""

from __future__ import annotations

import ember
import numpy as np

import ember_fusion

STACK = "autodiff<fusion<cpu,chunk=7,threads=2>>"


def test_gradients_through_fusion_match_numpy(rng: np.random.Generator) -> None:
    a, w0 = rng.standard_normal((12, 5)), rng.standard_normal((5, 3))
    x = ember.tensor(a, device=STACK)
    w = ember.tensor(w0, device=STACK, requires_grad=True)
    ember_fusion.reset_stats(STACK)
    h = (x @ w).relu()
    loss = (h * h).mean()
    grads = loss.backward()
    g = grads[w].numpy()
    # oracle by hand: d/dw mean(relu(xw)^2) = x^T (2 relu(xw) 1[xw>0]) / n
    z = a @ w0
    want = a.T @ (2 * np.maximum(z, 0) * (z > 0)) / z.size
    np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-14)
    assert abs(loss.item() - np.mean(np.maximum(z, 0) ** 2)) < 1e-12  # blocked sum order
    s = ember_fusion.stats(STACK)
    assert s.kernels_launched < s.ops_recorded  # the backward pass was fused too


def test_training_steps_agree_with_unfused_autodiff(rng: np.random.Generator) -> None:
    X = rng.standard_normal((32, 6)).astype(np.float32)
    Y = rng.integers(0, 3, 32)
    losses = {}
    for dev in ("autodiff<cpu>", STACK):
        ember.manual_seed(7)
        model = ember.nn.Sequential(ember.nn.Linear(6, 8), ember.nn.ReLU(),
                                    ember.nn.Linear(8, 3)).to(dev)
        opt = ember.optim.Adam(model.parameters(), lr=0.05)
        x, y = ember.tensor(X, device=dev), ember.tensor(Y, device=dev)
        out = []
        for _ in range(4):
            loss = ember.nn.functional.cross_entropy(model(x), y)
            opt.step(loss.backward())
            out.append(loss.item())
        losses[dev] = out
    np.testing.assert_allclose(losses[STACK], losses["autodiff<cpu>"], rtol=1e-5)
    assert losses[STACK][-1] < losses[STACK][0]
