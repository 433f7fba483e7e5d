"""Each optimizer, trained 20 steps on the same problem as PyTorch, ends at the same parameters."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ember
from ember import nn, optim

torch = pytest.importorskip("torch")

AD = "autodiff<cpu>"
STEPS = 20


def _models() -> tuple[nn.Module, Any]:
    model = nn.Sequential(nn.Linear(6, 8, generator=ember.Generator(0)), nn.Tanh(),
                          nn.Linear(8, 2, generator=ember.Generator(1)))
    tmodel = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    tmodel.load_state_dict({k: torch.from_numpy(v.numpy().copy())
                            for k, v in model.state_dict().items()})
    return model.to(AD), tmodel


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.standard_normal((16, 6)).astype(np.float32),
            rng.standard_normal((16, 2)).astype(np.float32))


OPTIMIZERS: dict[str, tuple[Callable[..., Any], Callable[..., Any], dict[str, Any]]] = {
    "sgd": (optim.SGD, torch.optim.SGD, dict(lr=0.1)),
    "sgd_momentum_dampening_wd": (optim.SGD, torch.optim.SGD,
                                  dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    "sgd_nesterov": (optim.SGD, torch.optim.SGD,
                     dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3)),
    "adam": (optim.Adam, torch.optim.Adam, dict(lr=1e-2)),
    "adam_wd_amsgrad": (optim.Adam, torch.optim.Adam,
                        dict(lr=1e-2, betas=(0.8, 0.99), weight_decay=0.1, amsgrad=True)),
    "adamw": (optim.AdamW, torch.optim.AdamW, dict(lr=1e-2)),
    "adamw_amsgrad": (optim.AdamW, torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.3,
                                                           amsgrad=True)),
    "rmsprop": (optim.RMSprop, torch.optim.RMSprop, dict(lr=1e-2)),
    "rmsprop_centered_momentum": (optim.RMSProp, torch.optim.RMSprop,
                                  dict(lr=1e-3, momentum=0.9, centered=True, weight_decay=0.01)),
    "adagrad": (optim.Adagrad, torch.optim.Adagrad, dict(lr=0.1)),
    "adamax": (optim.Adamax, torch.optim.Adamax, dict(lr=1e-2, weight_decay=0.01)),
    "nadam": (optim.NAdam, torch.optim.NAdam, dict(lr=1e-2, weight_decay=0.01)),
    "nadam_decoupled": (optim.NAdam, torch.optim.NAdam,
                        dict(lr=1e-2, weight_decay=0.1, decoupled_weight_decay=True)),
    "adagrad_decay": (optim.AdaGrad, torch.optim.Adagrad,
                      dict(lr=0.1, lr_decay=0.01, weight_decay=0.01,
                           initial_accumulator_value=0.1)),
}


def _train(name: str, groups: bool = False,
           scheduler: Callable[[Any, Any], tuple[Any, Any]] | None = None,
           **ember_only: Any) -> None:
    ecls, tcls, kw = OPTIMIZERS[name]
    model, tmodel = _models()
    if groups:  # the second layer gets its own learning rate
        eparams: Any = [{"params": list(model[0].parameters())},
                        {"params": list(model[2].parameters()), "lr": kw["lr"] / 3}]
        tparams: Any = [{"params": list(tmodel[0].parameters())},
                        {"params": list(tmodel[2].parameters()), "lr": kw["lr"] / 3}]
    else:
        eparams, tparams = model.parameters(), tmodel.parameters()
    opt, topt = ecls(eparams, **kw, **ember_only), tcls(tparams, **kw)
    sched = scheduler(opt, topt) if scheduler else None
    x, y = _data()
    ex, ey = ember.tensor(x, device=AD), ember.tensor(y, device=AD)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(STEPS):
        loss = ((model(ex) - ey) ** 2).mean()
        opt.step(loss.backward())
        topt.zero_grad()
        tloss = ((tmodel(tx) - ty) ** 2).mean()
        tloss.backward()
        topt.step()
        if sched:
            sched[0].step()
            sched[1].step()
    tstate = tmodel.state_dict()
    for k, v in model.state_dict().items():
        np.testing.assert_allclose(v.numpy(), tstate[k].numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=f"{name}: parameter {k}")


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_parameters_after_20_steps_match_pytorch(name: str) -> None:
    _train(name)


@pytest.mark.parametrize("name", ["adam", "adam_wd_amsgrad", "adamw", "adamw_amsgrad"])
def test_capturable_adam_keeps_the_step_on_the_device_and_matches_pytorch(name: str) -> None:
    # the bias corrections come from a device tensor (what a replayed CUDA graph needs)
    _train(name, capturable=True)


@pytest.mark.parametrize("name", ["sgd_nesterov", "adam", "rmsprop"])
def test_parameter_groups_with_their_own_lr_match_pytorch(name: str) -> None:
    _train(name, groups=True)


def test_training_actually_moves_the_parameters() -> None:
    model, _ = _models()
    before = model[0].weight.numpy().copy()
    opt = optim.Adam(model.parameters(), lr=1e-2)
    x, y = _data()
    losses = []
    for _ in range(STEPS):
        loss = ((model(ember.tensor(x, device=AD)) - ember.tensor(y, device=AD)) ** 2).mean()
        losses.append(loss.item())
        opt.step(loss.backward())
    assert losses[-1] < 0.8 * losses[0]
    assert not np.allclose(before, model[0].weight.numpy())


def test_frozen_parameters_are_left_alone() -> None:
    model, _ = _models()
    model[2].freeze()
    frozen = model[2].weight.numpy().copy()
    opt = optim.SGD(model.parameters(), lr=0.1)
    x, _ = _data()
    opt.step(model(ember.tensor(x, device=AD)).sum().backward())
    np.testing.assert_array_equal(model[2].weight.numpy(), frozen)


def test_step_keeps_parameter_objects_so_the_next_gradients_find_them() -> None:
    model, _ = _models()
    params = list(model.parameters())
    opt = optim.SGD(model.parameters(), lr=0.1)
    x, _ = _data()
    for _ in range(2):
        grads = model(ember.tensor(x, device=AD)).sum().backward()
        assert all(p in grads for p in params)
        opt.step(grads)
    assert list(model.parameters()) == params or all(
        a is b for a, b in zip(model.parameters(), params, strict=True))
    assert all(p.requires_grad for p in params)


def test_optimizer_works_the_same_through_a_deeper_decorator_stack() -> None:
    stack = "autodiff<fusion<cpu>>"
    try:
        ember.device(stack)
    except Exception as exc:  # the fusion plugin is optional
        pytest.skip(f"{stack} is not available: {exc}")
    x, y = _data()
    results = []
    for dev in (AD, stack):
        model = nn.Sequential(nn.Linear(6, 8, generator=ember.Generator(0)), nn.Tanh(),
                              nn.Linear(8, 2, generator=ember.Generator(1))).to(dev)
        opt = optim.Adam(model.parameters(), lr=1e-2)
        for _ in range(5):
            loss = ((model(ember.tensor(x, device=dev)) - ember.tensor(y, device=dev)) ** 2)
            opt.step(loss.mean().backward())
        assert all(str(p.device) == dev and p.requires_grad for p in model.parameters())
        results.append(model.state_dict())
    for k, v in results[0].items():
        np.testing.assert_allclose(results[1][k].numpy(), v.numpy(), rtol=1e-5, atol=1e-6)
