"""Learning-rate schedules and gradient clipping against PyTorch; optimizer state round trips."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ember
from ember import optim
from ember.optim import lr_scheduler as S

torch = pytest.importorskip("torch")
TS = torch.optim.lr_scheduler


def _lrs(make: Callable[[Any], Any], opt: Any, steps: int) -> list[float]:
    sched = make(opt)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step({}) if isinstance(opt, optim.Optimizer) else opt.step()
        sched.step()
    return out


SCHEDULES: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "step": (lambda o: S.StepLR(o, 3, gamma=0.5), lambda o: TS.StepLR(o, 3, gamma=0.5)),
    "multistep": (lambda o: S.MultiStepLR(o, [2, 5, 6], gamma=0.3),
                  lambda o: TS.MultiStepLR(o, [2, 5, 6], gamma=0.3)),
    "exponential": (lambda o: S.ExponentialLR(o, 0.9), lambda o: TS.ExponentialLR(o, 0.9)),
    "cosine": (lambda o: S.CosineAnnealingLR(o, 10, eta_min=0.01),
               lambda o: TS.CosineAnnealingLR(o, 10, eta_min=0.01)),
    "linear": (lambda o: S.LinearLR(o, 0.25, 1.0, total_iters=4),
               lambda o: TS.LinearLR(o, 0.25, 1.0, total_iters=4)),
    "lambda": (lambda o: S.LambdaLR(o, lambda s: 1 / (s + 1)),
               lambda o: TS.LambdaLR(o, lambda s: 1 / (s + 1))),
    "one_cycle": (lambda o: S.OneCycleLR(o, max_lr=0.5, total_steps=12),
                  lambda o: TS.OneCycleLR(o, max_lr=0.5, total_steps=12)),
    "one_cycle_linear_three_phase": (
        lambda o: S.OneCycleLR(o, max_lr=0.5, total_steps=12, anneal_strategy="linear",
                               three_phase=True),
        lambda o: TS.OneCycleLR(o, max_lr=0.5, total_steps=12, anneal_strategy="linear",
                                three_phase=True)),
}


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_schedule_matches_pytorch(name: str) -> None:
    make, tmake = SCHEDULES[name]
    mine = _lrs(make, optim.SGD([ember.zeros(1)], lr=0.1, momentum=0.9), 12)
    theirs = _lrs(tmake, torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1,
                                         momentum=0.9), 12)
    np.testing.assert_allclose(mine, theirs, rtol=1e-9, atol=1e-12)


def test_one_cycle_cycles_adams_beta1_like_pytorch() -> None:
    opt = optim.Adam([ember.zeros(1)], lr=0.1)
    topt = torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=0.1)
    sched, tsched = S.OneCycleLR(opt, 1.0, total_steps=10), TS.OneCycleLR(topt, 1.0,
                                                                          total_steps=10)
    for _ in range(9):
        assert opt.param_groups[0]["betas"][0] == pytest.approx(topt.param_groups[0]["betas"][0])
        topt.step()
        sched.step()
        tsched.step()


def test_cosine_warmup_rises_linearly_then_follows_half_a_cosine() -> None:
    opt = optim.SGD([ember.zeros(1)], lr=1.0)
    lrs = _lrs(lambda o: S.CosineWarmupLR(o, warmup_steps=4, total_steps=12, min_lr=0.1),
               opt, 13)
    assert lrs[:5] == [0.0, 0.25, 0.5, 0.75, 1.0]
    for step in range(4, 13):
        progress = (step - 4) / 8
        assert lrs[step] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def test_noam_schedule_peaks_at_the_end_of_warmup() -> None:
    opt = optim.Adam([ember.zeros(1)], lr=2.0)
    lrs = _lrs(lambda o: S.NoamLR(o, d_model=64, warmup_steps=10), opt, 30)
    peak = int(np.argmax(lrs))
    assert peak == 9
    assert lrs[peak] == pytest.approx(2.0 * 64 ** -0.5 * 10 ** -0.5)
    assert lrs[0] == pytest.approx(2.0 * 64 ** -0.5 * 10 ** -1.5)


def test_scheduler_state_dict_resumes_the_schedule() -> None:
    opt = optim.SGD([ember.zeros(1)], lr=1.0)
    sched = S.MultiStepLR(opt, [3, 6], gamma=0.1)
    for _ in range(4):
        sched.step()
    state = sched.state_dict()
    opt2 = optim.SGD([ember.zeros(1)], lr=1.0)
    sched2 = S.MultiStepLR(opt2, [100], gamma=0.5)
    sched2.load_state_dict(state)
    assert opt2.param_groups[0]["lr"] == pytest.approx(0.1)
    for _ in range(2):
        sched.step()
        sched2.step()
    assert opt2.param_groups[0]["lr"] == pytest.approx(opt.param_groups[0]["lr"]) == 0.01


def _grads() -> tuple[list[ember.Tensor], dict[ember.Tensor, ember.Tensor], list[Any]]:
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) * 3 for s in [(3, 4), (4,), (2,)]]
    params = [ember.zeros(a.shape) for a in arrays]
    tparams = [torch.zeros(a.shape, requires_grad=True) for a in arrays]
    for tp, a in zip(tparams, arrays, strict=True):
        tp.grad = torch.from_numpy(a.copy())
    return params, {p: ember.tensor(a) for p, a in zip(params, arrays, strict=True)}, tparams


@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf])
def test_clip_grad_norm_matches_pytorch(norm_type: float) -> None:
    params, grads, tparams = _grads()
    clipped, total = optim.clip_grad_norm(grads, 2.0, norm_type)
    ttotal = torch.nn.utils.clip_grad_norm_(tparams, 2.0, norm_type)
    assert total.item() == pytest.approx(ttotal.item(), rel=1e-6)
    for p, tp in zip(params, tparams, strict=True):
        np.testing.assert_allclose(clipped[p].numpy(), tp.grad.numpy(), rtol=1e-6)


def test_clip_grad_norm_leaves_small_gradients_alone() -> None:
    p = ember.zeros(2)
    clipped, total = optim.clip_grad_norm({p: ember.tensor([0.3, 0.4])}, 1.0)
    assert total.item() == pytest.approx(0.5)
    np.testing.assert_allclose(clipped[p].numpy(), [0.3, 0.4], rtol=1e-6)


def test_clip_grad_value_matches_pytorch() -> None:
    params, grads, tparams = _grads()
    clipped = optim.clip_grad_value(grads, 1.5)
    torch.nn.utils.clip_grad_value_(tparams, 1.5)
    for p, tp in zip(params, tparams, strict=True):
        np.testing.assert_array_equal(clipped[p].numpy(), tp.grad.numpy())


def test_clipping_works_on_autodiff_gradients_and_feeds_the_optimizer() -> None:
    w = ember.tensor([3.0, 4.0], device="autodiff<cpu>", requires_grad=True)
    grads = (w * w).sum().backward()  # gradient [6, 8], norm 10
    clipped, total = optim.clip_grad_norm(grads, 1.0)
    assert total.item() == pytest.approx(10.0)
    optim.SGD([w], lr=1.0).step(clipped)
    np.testing.assert_allclose(w.numpy(), [3.0 - 0.6, 4.0 - 0.8], rtol=1e-5)


def test_optimizer_state_dict_round_trips_in_memory() -> None:
    p = ember.tensor([1.0, 2.0])
    opt = optim.Adam([p], lr=0.1)
    opt.step({p: ember.tensor([1.0, -1.0])})
    state = opt.state_dict()
    assert state["state"][0]["step"] == 1 and state["param_groups"][0]["params"] == [0]
    q = ember.tensor(p.numpy())
    opt2 = optim.Adam([q], lr=0.5)
    opt2.load_state_dict(state)
    opt.step({p: ember.tensor([0.5, 0.5])})
    opt2.step({q: ember.tensor([0.5, 0.5])})
    assert p.tolist() == q.tolist()


def test_optimizer_rejects_bad_parameter_lists() -> None:
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)
    p = ember.zeros(1)
    with pytest.raises(ValueError, match="more than one parameter group"):
        optim.SGD([{"params": [p]}, {"params": [p]}], lr=0.1)
    with pytest.raises(TypeError, match="no option"):
        optim.SGD([{"params": [p], "betas": (0.9, 0.9)}], lr=0.1)
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD([p], lr=0.1, nesterov=True)
