"""SequentialLR, ReduceLROnPlateau and CosineAnnealingWarmRestarts give PyTorch's learning rates
over many steps, and their state dicts resume them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ember
from ember import optim
from ember.optim import lr_scheduler as S

torch = pytest.importorskip("torch")
TS = torch.optim.lr_scheduler


def _opts(groups: int = 1) -> tuple[optim.Optimizer, Any]:
    ps = [{"params": [ember.zeros(1)], "lr": 0.1 * (i + 1)} for i in range(groups)]
    tps = [{"params": [torch.zeros(1, requires_grad=True)], "lr": 0.1 * (i + 1)}
           for i in range(groups)]
    return optim.SGD(ps, lr=0.1, momentum=0.9), torch.optim.SGD(tps, lr=0.1, momentum=0.9)


def _rates(opt: Any) -> list[float]:
    return [g["lr"] for g in opt.param_groups]


SEQUENCES: dict[str, Callable[[Any, Any], Any]] = {
    "linear_warmup_then_cosine": lambda m, o: m.SequentialLR(
        o, [m.LinearLR(o, start_factor=0.1, total_iters=5), m.CosineAnnealingLR(o, T_max=20)],
        milestones=[5]),
    "constant_step_exponential": lambda m, o: m.SequentialLR(
        o, [m.LinearLR(o, start_factor=0.5, end_factor=0.5, total_iters=4),
            m.StepLR(o, step_size=3, gamma=0.5), m.ExponentialLR(o, gamma=0.9)],
        milestones=[4, 13]),
    "warm_restarts_after_warmup": lambda m, o: m.SequentialLR(
        o, [m.LinearLR(o, start_factor=0.2, total_iters=3),
            m.CosineAnnealingWarmRestarts(o, T_0=4, T_mult=2, eta_min=0.001)],
        milestones=[3]),
    "multistep_then_lambda": lambda m, o: m.SequentialLR(
        o, [m.MultiStepLR(o, [2, 4], gamma=0.3), m.LambdaLR(o, lambda s: 1 / (s + 1))],
        milestones=[6]),
}


@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_sequential_lr_matches_pytorch_over_40_steps(name: str) -> None:
    opt, topt = _opts(groups=2)
    sched, tsched = SEQUENCES[name](S, opt), SEQUENCES[name](TS, topt)
    for step in range(40):
        np.testing.assert_allclose(_rates(opt), _rates(topt), rtol=1e-12, atol=1e-15,
                                   err_msg=f"{name}: step {step}")
        assert sched.get_last_lr() == _rates(opt)
        topt.step()
        sched.step()
        tsched.step()


def test_sequential_lr_state_dict_resumes_every_inner_scheduler() -> None:
    def make(opt: Any) -> Any:
        return SEQUENCES["linear_warmup_then_cosine"](S, opt)

    opt, _ = _opts()
    sched = make(opt)
    for _ in range(8):
        sched.step()
    state = sched.state_dict()
    assert [s["last_epoch"] for s in state["_schedulers"]] == [4, 3]
    opt2, _ = _opts()
    sched2 = make(opt2)
    sched2.load_state_dict(state)
    for _ in range(10):
        sched.step()
        sched2.step()
        assert _rates(opt2) == pytest.approx(_rates(opt), rel=1e-14)


def test_sequential_lr_refuses_mismatched_arguments() -> None:
    opt, _ = _opts()
    other, _ = _opts()
    with pytest.raises(ValueError, match="milestone"):
        S.SequentialLR(opt, [S.StepLR(opt, 2), S.StepLR(opt, 3)], milestones=[])
    with pytest.raises(ValueError, match="same optimizer"):
        S.SequentialLR(opt, [S.StepLR(opt, 2), S.StepLR(other, 3)], milestones=[2])
    with pytest.raises(ValueError, match="ReduceLROnPlateau"):
        S.SequentialLR(opt, [S.StepLR(opt, 2), S.ReduceLROnPlateau(opt)], milestones=[2])


# -- ReduceLROnPlateau --------------------------------------------------------------------------

def _metric_script(n: int, seed: int) -> list[float]:
    """Improving, then plateaus with noise, small improvements under the threshold, and
    occasional real improvements."""
    rng = np.random.default_rng(seed)
    out, v = [], 10.0
    for i in range(n):
        phase = (i // 13) % 3
        if phase == 0:
            v *= 0.8
        elif phase == 1:
            v *= 1 - 1e-6  # an improvement smaller than the default relative threshold
        out.append(v + (rng.uniform(-0.05, 0.05) * v if phase == 2 else 0.0))
    return out


PLATEAUS: dict[str, dict[str, Any]] = {
    "defaults": dict(),
    "patience_2_factor_half": dict(patience=2, factor=0.5),
    "cooldown_min_lr": dict(patience=1, factor=0.3, cooldown=3, min_lr=[0.002, 0.01]),
    "abs_threshold": dict(patience=2, threshold=0.05, threshold_mode="abs"),
    "max_mode": dict(mode="max", patience=1, factor=0.7, threshold=1e-3),
    "max_mode_abs": dict(mode="max", patience=0, threshold=0.01, threshold_mode="abs",
                         min_lr=1e-3),
    "eps_blocks_tiny_reductions": dict(patience=0, factor=0.9, eps=5e-3),
}


@pytest.mark.parametrize("name", sorted(PLATEAUS))
def test_reduce_on_plateau_matches_pytorch_on_a_scripted_metric(name: str) -> None:
    opt, topt = _opts(groups=2)
    kw = PLATEAUS[name]
    sched, tsched = S.ReduceLROnPlateau(opt, **kw), TS.ReduceLROnPlateau(topt, **kw)
    metrics = _metric_script(120, seed=len(name))
    if kw.get("mode") == "max":
        metrics = [-m for m in metrics]
    changes = 0
    for i, m in enumerate(metrics):
        before = _rates(opt)
        metric: Any = ember.tensor(m, dtype=ember.float64) if i % 2 else m  # tensors too
        sched.step(metric)
        tsched.step(m)
        changes += _rates(opt) != before
        np.testing.assert_allclose(_rates(opt), _rates(topt), rtol=1e-15,
                                   err_msg=f"{name}: after metric {i}")
        assert (sched.num_bad_epochs, sched.cooldown_counter, sched.best) == \
            (tsched.num_bad_epochs, tsched.cooldown_counter, tsched.best)
    assert changes >= 1


def test_reduce_on_plateau_state_dict_resumes_and_needs_the_metric() -> None:
    opt, _ = _opts()
    sched = S.ReduceLROnPlateau(opt, patience=1, factor=0.5, mode="max")
    for m in [1.0, 2.0, 2.0]:
        sched.step(m)
    opt2, _ = _opts()
    sched2 = S.ReduceLROnPlateau(opt2)
    sched2.load_state_dict(sched.state_dict())
    opt2.param_groups[0]["lr"] = opt.param_groups[0]["lr"]
    for m in [2.0, 1.0, 3.0, 3.0, 3.0]:
        sched.step(m)
        sched2.step(m)
        assert _rates(opt2) == _rates(opt)
    assert _rates(opt) == [0.025]
    with pytest.raises(TypeError, match=r"step\(metrics\)"):
        sched.step()
    with pytest.raises(ValueError, match="Factor"):
        S.ReduceLROnPlateau(opt, factor=1.0)
    with pytest.raises(ValueError, match="unknown"):
        S.ReduceLROnPlateau(opt, mode="best")


# -- CosineAnnealingWarmRestarts --------------------------------------------------------------

@pytest.mark.parametrize("kw", [dict(T_0=5), dict(T_0=3, T_mult=2, eta_min=0.01),
                                dict(T_0=2, T_mult=3, eta_min=0.005)])
def test_warm_restarts_match_pytorch_over_60_steps(kw: dict[str, Any]) -> None:
    opt, topt = _opts(groups=2)
    sched, tsched = S.CosineAnnealingWarmRestarts(opt, **kw), TS.CosineAnnealingWarmRestarts(
        topt, **kw)
    for step in range(60):
        np.testing.assert_allclose(_rates(opt), _rates(topt), rtol=1e-12, atol=1e-15,
                                   err_msg=f"step {step}")
        topt.step()
        sched.step()
        tsched.step()


@pytest.mark.parametrize("t_mult", [1, 2])
def test_warm_restarts_with_fractional_epochs_match_pytorch(t_mult: int) -> None:
    opt, topt = _opts()
    sched = S.CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=t_mult, eta_min=0.001)
    tsched = TS.CosineAnnealingWarmRestarts(topt, T_0=3, T_mult=t_mult, eta_min=0.001)
    iters = 7
    for epoch in range(12):
        for i in range(iters):
            sched.step(epoch + i / iters)
            tsched.step(epoch + i / iters)
            np.testing.assert_allclose(_rates(opt), _rates(topt), rtol=1e-12,
                                       err_msg=f"epoch {epoch} + {i}/{iters}")
            assert (sched.T_i, sched.last_epoch) == (tsched.T_i, tsched.last_epoch)
            assert sched.T_cur == pytest.approx(tsched.T_cur, rel=1e-12)


def test_warm_restarts_state_dict_resumes_the_cycle() -> None:
    opt, _ = _opts()
    sched = S.CosineAnnealingWarmRestarts(opt, T_0=2, T_mult=2)
    for _ in range(5):
        sched.step()
    opt2, _ = _opts()
    sched2 = S.CosineAnnealingWarmRestarts(opt2, T_0=2, T_mult=2)
    sched2.load_state_dict(sched.state_dict())
    assert _rates(opt2) == _rates(opt)
    for _ in range(9):
        sched.step()
        sched2.step()
        assert _rates(opt2) == _rates(opt)
    with pytest.raises(ValueError, match="T_0"):
        S.CosineAnnealingWarmRestarts(opt, T_0=0)
