"""``ember.nn.utils.clip_grad_norm_`` / ``clip_grad_value_``: PyTorch's functions on ember's
gradients (the mapping ``backward()`` returns), clipped in place, against PyTorch."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import ember
from ember import functional as F, nn, optim

torch = pytest.importorskip("torch")
AD = "autodiff<cpu>"


def _model_pair() -> tuple[nn.Module, Any, ember.Tensor, ember.Tensor, Any, Any]:
    model = nn.Sequential(nn.Linear(6, 8, generator=ember.Generator(0)), nn.Tanh(),
                          nn.Linear(8, 3, generator=ember.Generator(1)))
    tmodel = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    tmodel.load_state_dict({k: torch.from_numpy(v.numpy().copy())
                            for k, v in model.state_dict().items()})
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 6)).astype(np.float32) * 4
    y = rng.integers(0, 3, 16)
    return (model.to(AD), tmodel, ember.tensor(x, device=AD),
            ember.tensor(y, dtype=ember.int64, device=AD), torch.from_numpy(x),
            torch.from_numpy(y))


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.05, 100.0])
def test_clip_grad_norm_in_place_matches_pytorch(norm_type: float, max_norm: float) -> None:
    model, tmodel, x, y, tx, ty = _model_pair()
    grads = F.cross_entropy(model(x), y).backward()
    torch.nn.functional.cross_entropy(tmodel(tx), ty).backward()
    total = nn.utils.clip_grad_norm_(grads, max_norm, norm_type)
    ttotal = torch.nn.utils.clip_grad_norm_(tmodel.parameters(), max_norm, norm_type)
    assert total.item() == pytest.approx(ttotal.item(), rel=1e-5)
    for p, tp in zip(model.parameters(), tmodel.parameters(), strict=True):
        np.testing.assert_allclose(grads[p].numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_clipped_gradients_feed_the_step_as_in_pytorch() -> None:
    model, tmodel, x, y, tx, ty = _model_pair()
    opt, topt = optim.SGD(model.parameters(), lr=0.5), torch.optim.SGD(tmodel.parameters(),
                                                                       lr=0.5)
    for _ in range(5):
        grads = F.cross_entropy(model(x), y).backward()
        nn.utils.clip_grad_norm_(grads, 0.1)
        opt.step(grads)
        topt.zero_grad()
        torch.nn.functional.cross_entropy(tmodel(tx), ty).backward()
        torch.nn.utils.clip_grad_norm_(tmodel.parameters(), 0.1)
        topt.step()
    tstate = tmodel.state_dict()
    for k, v in model.state_dict().items():
        np.testing.assert_allclose(v.numpy(), tstate[k].numpy(), rtol=1e-5, atol=1e-6)


def test_clip_grad_value_in_place_matches_pytorch() -> None:
    model, tmodel, x, y, tx, ty = _model_pair()
    grads = F.cross_entropy(model(x), y).backward()
    torch.nn.functional.cross_entropy(tmodel(tx), ty).backward()
    assert nn.utils.clip_grad_value_(grads, 0.02) is None
    torch.nn.utils.clip_grad_value_(tmodel.parameters(), 0.02)
    clipped = 0
    for p, tp in zip(model.parameters(), tmodel.parameters(), strict=True):
        np.testing.assert_allclose(grads[p].numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-7)
        clipped += int((np.abs(grads[p].numpy()) == np.float32(0.02)).sum())
    assert clipped > 0


def test_only_the_given_parameters_are_clipped_and_counted() -> None:
    a, b = ember.zeros(2), ember.zeros(2)
    grads = {a: ember.tensor([3.0, 4.0]), b: ember.tensor([30.0, 40.0])}
    total = nn.utils.clip_grad_norm_(grads, 1.0, parameters=[a])
    assert total.item() == pytest.approx(5.0)
    np.testing.assert_allclose(grads[a].numpy(), [0.6, 0.8], rtol=1e-6)
    np.testing.assert_array_equal(grads[b].numpy(), [30.0, 40.0])


def test_nonfinite_norm_raises_when_asked_and_no_gradients_give_zero() -> None:
    a = ember.zeros(2)
    with pytest.raises(RuntimeError, match="non-finite"):
        nn.utils.clip_grad_norm_({a: ember.tensor([math.inf, 1.0])}, 1.0,
                                 error_if_nonfinite=True)
    assert nn.utils.clip_grad_norm_({}, 1.0).item() == 0.0


def test_passing_parameters_instead_of_gradients_shows_the_ember_form() -> None:
    model, *_ = _model_pair()
    for wrong in (model.parameters(), model[0].weight):
        with pytest.raises(TypeError, match=r"grads = loss\.backward\(\).*clip_grad_norm_"):
            nn.utils.clip_grad_norm_(wrong, 1.0)
        with pytest.raises(TypeError, match="not the parameters"):
            nn.utils.clip_grad_value_(wrong, 1.0)


def test_clip_grad_norm_in_a_compiled_step_equals_the_eager_step() -> None:
    runs = []
    for compiled in (False, True):
        model, _, x, y, _, _ = _model_pair()
        opt = optim.Adam(model.parameters(), lr=0.05)

        def step(x: ember.Tensor, y: ember.Tensor, model: Any = model, opt: Any = opt) -> Any:
            grads = F.cross_entropy(model(x), y).backward()
            norm = nn.utils.clip_grad_norm_(grads, 0.5)
            opt.step(grads)
            return norm

        fn = ember.compile(step) if compiled else step
        norms = [fn(x * (1 + i / 10), y).item() for i in range(5)]
        runs.append((norms, [p.numpy() for p in model.parameters()]))
        if compiled:
            assert fn.stats.replays >= 3, fn.stats  # type: ignore[attr-defined]
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=2e-5)
    for a, b in zip(runs[0][1], runs[1][1], strict=True):
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-6)
