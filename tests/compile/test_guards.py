"""`ember.compile`'s guards and host links: what retraces, what replays with new values, and
what breaks a trace.  Every compiled run is compared with an eager run on an identical copy."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ember
from ember import functional as F, nn, optim
from ember._trace import TraceBreak

DEV = "autodiff<cpu>"
TOL = {"rtol": 2e-5, "atol": 2e-6}


def _model(seed: int = 0, dropout: float = 0.0) -> nn.Module:
    ember.manual_seed(seed)
    layers: list[nn.Module] = [nn.Linear(5, 7), nn.Tanh()]
    if dropout:
        layers.append(nn.Dropout(dropout))
    layers.append(nn.Linear(7, 3))
    return nn.Sequential(*layers).to(DEV)


def _batch(n: int, seed: int) -> tuple[ember.Tensor, ember.Tensor]:
    rng = np.random.default_rng(seed)
    x = ember.tensor(rng.standard_normal((n, 5)), dtype=ember.float32, device=DEV)
    y = ember.tensor(rng.integers(0, 3, n), dtype=ember.int64, device=DEV)
    return x, y


def _stepper(model: nn.Module, opt: optim.Optimizer) -> Callable[..., ember.Tensor]:
    def step(x: ember.Tensor, y: ember.Tensor) -> ember.Tensor:
        loss = F.cross_entropy(model(x), y)
        opt.step(loss.backward())
        return loss
    return step


def _params(model: nn.Module) -> list[np.ndarray]:
    return [p.numpy().copy() for p in model.parameters()]


def _assert_same_params(a: nn.Module, b: nn.Module, what: str = "") -> None:
    for i, (pa, pb) in enumerate(zip(_params(a), _params(b), strict=True)):
        np.testing.assert_allclose(pb, pa, **TOL, err_msg=f"parameter {i} {what}")


def _pair(make_opt: Callable[[Any], optim.Optimizer], **model_kw: Any) -> tuple[Any, ...]:
    """An eager (model, optimizer, step) and an identical compiled one."""
    ea, ca = _model(**model_kw), _model(**model_kw)
    eo, co = make_opt(ea.parameters()), make_opt(ca.parameters())
    return ea, eo, _stepper(ea, eo), ca, co, ember.compile(_stepper(ca, co))


# -- shapes -----------------------------------------------------------------------------------

def test_new_batch_size_retraces_and_the_old_one_still_replays() -> None:
    ea, _, estep, ca, _, cstep = _pair(lambda p: optim.SGD(p, lr=0.1))
    for i, n in enumerate([4, 4, 2, 4, 2, 2]):
        x, y = _batch(n, i)
        np.testing.assert_allclose(cstep(x, y).numpy(), estep(x, y).numpy(), **TOL)
        _assert_same_params(ea, ca, f"after call {i}")
    assert (cstep.stats.traces, cstep.stats.replays) == (2, 4), cstep.stats
    assert "(4, 5)" in cstep.stats.reasons[1] and "(2, 5)" in cstep.stats.reasons[1]


def test_cache_is_bounded_and_evicts_the_least_recently_used() -> None:
    f = ember.compile(lambda x: (x * 2).exp().sum(dim=0), cache_size=2)
    for n in (1, 2, 3):
        f(ember.ones(n, 2, device=DEV))
    assert (f.stats.traces, f.stats.evictions) == (3, 1), f.stats
    assert len(list(f.programs())) == 2
    x = ember.full((3, 2), 0.5, device=DEV)
    np.testing.assert_allclose(f(x).numpy(), np.full(2, 3 * np.exp(1.0)), rtol=1e-6)
    assert (f.stats.traces, f.stats.replays) == (3, 1), f.stats  # shape 3: still cached
    f(ember.ones(1, 2, device=DEV))  # shape 1 was evicted: traces again, evicting shape 2
    assert (f.stats.traces, f.stats.evictions) == (4, 2), f.stats
    with pytest.raises(ValueError, match="cache_size"):
        ember.compile(lambda x: x, cache_size=0)


# -- learning rates ---------------------------------------------------------------------------

OPTIMIZERS: dict[str, Callable[[Any], optim.Optimizer]] = {
    "SGD": lambda p: optim.SGD(p, lr=0.1, momentum=0.9),
    "Adam": lambda p: optim.Adam(p, lr=0.05),
    "AdamW": lambda p: optim.AdamW(p, lr=0.05, weight_decay=0.1),
    "RMSprop": lambda p: optim.RMSprop(p, lr=0.01),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_learning_rate_set_by_hand_takes_effect_on_the_next_replay(name: str) -> None:
    ea, eo, estep, ca, co, cstep = _pair(OPTIMIZERS[name])
    for i in range(3):  # warm-up trace, trace, replay
        cstep(*_batch(4, i))
        estep(*_batch(4, i))
    traces = cstep.stats.traces
    for i, lr in enumerate([0.0, 0.02, 0.3]):
        for opt in (eo, co):
            for g in opt.param_groups:
                g["lr"] = lr
        before = _params(ca)
        cstep(*_batch(4, 10 + i))
        estep(*_batch(4, 10 + i))
        _assert_same_params(ea, ca, f"with lr {lr}")
        if lr == 0.0 and name != "AdamW":  # a step of size 0 changes nothing
            for b, a in zip(before, _params(ca), strict=True):
                np.testing.assert_array_equal(a, b)
        elif lr > 0:
            assert any(not np.allclose(a, b) for a, b in zip(before, _params(ca), strict=True))
    assert cstep.stats.traces == traces, f"an lr change must not retrace: {cstep.stats}"
    assert cstep.stats.replays >= 4


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_learning_rate_from_a_scheduler_takes_effect_on_the_next_replay(name: str) -> None:
    ea, eo, estep, ca, co, cstep = _pair(OPTIMIZERS[name])
    es = optim.lr_scheduler.StepLR(eo, step_size=1, gamma=0.3)
    cs = optim.lr_scheduler.StepLR(co, step_size=1, gamma=0.3)
    for i in range(6):
        np.testing.assert_allclose(cstep(*_batch(4, i)).numpy(), estep(*_batch(4, i)).numpy(),
                                   **TOL)
        _assert_same_params(ea, ca, f"at step {i}")
        es.step()
        cs.step()
        assert co.param_groups[0]["lr"] == pytest.approx(eo.param_groups[0]["lr"])
    assert cstep.stats.replays >= 3, cstep.stats


def test_optimizer_options_other_than_lr_retrace() -> None:
    ea, eo, estep, ca, co, cstep = _pair(lambda p: optim.SGD(p, lr=0.1))
    for i in range(2):
        cstep(*_batch(4, i))
        estep(*_batch(4, i))
    for opt in (eo, co):
        opt.param_groups[0]["weight_decay"] = 0.5
    cstep(*_batch(4, 5))
    estep(*_batch(4, 5))
    _assert_same_params(ea, ca)
    assert cstep.stats.traces == 2 and "optimizer options" in cstep.stats.reasons[-1]


# -- host reads -------------------------------------------------------------------------------

def _line_of(fn: Callable[..., Any], needle: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if needle in line)


def _reads_item(x: ember.Tensor) -> ember.Tensor:
    s = (x * 2).sum()
    if s.item() > 0:  # host read
        return x
    return -x


def _reads_numpy(x: ember.Tensor) -> Any:
    y = x + 1
    return np.asarray(y.numpy())  # host read


def _prints(x: ember.Tensor) -> ember.Tensor:
    y = x.exp()
    print(y)  # host read
    return y


@pytest.mark.parametrize("fn", [_reads_item, _reads_numpy, _prints], ids=lambda f: f.__name__)
def test_host_read_inside_raises_trace_break_naming_the_line(fn: Callable[..., Any],
                                                             capsys: Any) -> None:
    f = ember.compile(fn)
    with pytest.raises(TraceBreak) as info:
        f(ember.ones(3, device=DEV))
    assert f"{__file__}:{_line_of(fn, '# host read')}" in str(info.value)
    assert capsys.readouterr().out == ""
    # the failed trace left nothing behind: the function still runs eagerly, and compile of
    # a clean function works afterwards
    g = ember.compile(lambda x: x * 3)
    np.testing.assert_array_equal(g(ember.ones(2, device=DEV)).numpy(), [3.0, 3.0])
    assert len(list(f.programs())) == 0


# -- modules ----------------------------------------------------------------------------------

def test_eval_train_switch_retraces() -> None:
    m = _model(dropout=0.5)
    f = ember.compile(lambda x: m(x))
    x, _ = _batch(8, 0)
    f(x)
    m.eval()
    got = f(x)
    assert f.stats.traces == 2 and "module train/eval mode" in f.stats.reasons[-1]
    with ember.no_grad():
        want = m(x)
    np.testing.assert_allclose(got.numpy(), want.numpy(), **TOL)
    m.train()
    f(x)  # back in training mode: the first recording replays
    assert (f.stats.traces, f.stats.replays) == (2, 1), f.stats


def test_parameters_loaded_between_calls_are_used() -> None:
    m, other = _model(seed=0), _model(seed=1)
    f = ember.compile(lambda x: m(x))
    x, _ = _batch(4, 0)
    f(x)
    f(x)
    m.load_state_dict(other.state_dict())
    np.testing.assert_allclose(f(x).numpy(), other(x).numpy(), **TOL)


def test_loaded_parameters_train_on_in_a_compiled_step() -> None:
    ea, _, estep, ca, _, cstep = _pair(lambda p: optim.Adam(p, lr=0.05))
    for i in range(3):
        cstep(*_batch(4, i))
        estep(*_batch(4, i))
    fresh = _model(seed=7).state_dict()
    ea.load_state_dict(fresh)
    ca.load_state_dict(fresh)
    for i in range(3, 6):
        cstep(*_batch(4, i))
        estep(*_batch(4, i))
        _assert_same_params(ea, ca, f"at step {i}")


def test_state_dict_after_replays_shows_the_trained_values() -> None:
    ea, eo, estep, ca, co, cstep = _pair(lambda p: optim.AdamW(p, lr=0.05))
    start = _params(ca)
    for i in range(5):
        cstep(*_batch(4, i))
        estep(*_batch(4, i))
    assert cstep.stats.replays == 3, cstep.stats
    got, want = ca.state_dict(), ea.state_dict()
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_allclose(got[k].numpy(), want[k].numpy(), **TOL, err_msg=k)
    assert not np.allclose(got["0.weight"].numpy(), start[0])
    og, ow = co.state_dict()["state"], eo.state_dict()["state"]
    for k in ow:
        for name in ("exp_avg", "exp_avg_sq"):
            np.testing.assert_allclose(og[k][name].numpy(), ow[k][name].numpy(), **TOL)


# -- random ops -------------------------------------------------------------------------------

def test_dropout_draws_fresh_numbers_each_replay_and_matches_eager() -> None:
    ge, gc = ember.Generator(3), ember.Generator(3)

    def drop(g: ember.Generator) -> Callable[[ember.Tensor], ember.Tensor]:
        return lambda x: F.dropout(x * 1.0, 0.5, generator=g)

    eager, compiled = drop(ge), ember.compile(drop(gc))
    x = ember.ones(64, device=DEV)
    masks = []
    for _ in range(4):
        got = compiled(x).numpy()
        np.testing.assert_array_equal(got, eager(x).numpy())
        masks.append(got)
    assert compiled.stats.replays == 3, compiled.stats
    assert all(not np.array_equal(masks[i], masks[j]) for i in range(4) for j in range(i))
    assert {float(v) for m in masks for v in np.unique(m)} == {0.0, 2.0}


def test_dropout_in_a_training_step_matches_eager_under_the_same_seed() -> None:
    ea, _, estep, ca, _, cstep = _pair(lambda p: optim.SGD(p, lr=0.1), dropout=0.3)
    for i in range(5):
        ember.manual_seed(100 + i)  # the global generator: re-read at every replay
        got = cstep(*_batch(6, i)).numpy()
        ember.manual_seed(100 + i)
        want = estep(*_batch(6, i)).numpy()
        np.testing.assert_allclose(got, want, **TOL)
        _assert_same_params(ea, ca, f"at step {i}")
    assert cstep.stats.replays >= 3, cstep.stats


def _untied(seed: int) -> nn.Module:
    """Two Linear layers whose weights start as one payload: the second's weight is
    ``first.weight.detach().clone()`` (a clone shares its source's payload until either is
    given a new value), then each trains on its own."""
    ember.manual_seed(seed)
    model = nn.Sequential(nn.Linear(5, 5), nn.Tanh(), nn.Linear(5, 5), nn.Tanh(),
                          nn.Linear(5, 3)).to(DEV)
    model[2].weight = nn.Parameter(model[0].weight.detach().clone())
    return model


@pytest.mark.parametrize("make_opt", [lambda ps: optim.SGD(ps, lr=0.5),
                                      lambda ps: optim.AdamW(ps, lr=0.05)],
                         ids=["sgd", "adamw"])
def test_parameters_that_shared_a_payload_train_apart_in_replays(
        make_opt: Callable[[Any], optim.Optimizer]) -> None:
    ea, ca = _untied(3), _untied(3)
    eo, co = make_opt(ea.parameters()), make_opt(ca.parameters())
    eager, compiled = _stepper(ea, eo), ember.compile(_stepper(ca, co))
    for i in range(6):
        x, y = _batch(8, i % 3)
        want, got = float(eager(x, y).item()), float(compiled(x, y).item())
        assert got == pytest.approx(want, rel=2e-5, abs=2e-6), f"step {i}"
    _assert_same_params(ea, ca, "after 6 steps")
    assert compiled.stats.replays >= 3, compiled.stats
    assert any("shared one payload" in r for r in compiled.stats.reasons) or \
        compiled.stats.warmups >= 1, compiled.stats
