"""Adamax, NAdam and LBFGS against PyTorch: the same parameters after the same gradients (float64),
state dicts that load into the other framework and continue identically, compiled steps equal
to eager ones, and LBFGS's iterates on the Rosenbrock function."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import ember
from ember import _capture, functional as F, nn, optim

torch = pytest.importorskip("torch")

AD = "autodiff<cpu>"
SHAPES = [(3, 4), (4,), (2, 2, 2)]


@pytest.fixture(autouse=True)
def _torch_float64_scalars() -> Iterator[None]:
    # PyTorch keeps NAdam's mu_product (and the step) in its default dtype: float64, as ember
    # keeps them (host floats), so the comparison can be tight
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


def _problem(steps: int, seed: int = 0) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal(s) for s in SHAPES]
    grads = [[rng.standard_normal(s) * rng.uniform(0.1, 3.0) for s in SHAPES]
             for _ in range(steps)]
    return init, grads


OPTIMIZERS: dict[str, tuple[Callable[..., Any], Callable[..., Any], dict[str, Any]]] = {
    "adamax": (optim.Adamax, torch.optim.Adamax, dict(lr=0.05)),
    "adamax_wd_maximize": (optim.Adamax, torch.optim.Adamax,
                           dict(lr=0.03, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1,
                                maximize=True)),
    "nadam": (optim.NAdam, torch.optim.NAdam, dict(lr=0.05)),
    "nadam_wd_momentum_decay": (optim.NAdam, torch.optim.NAdam,
                                dict(lr=0.02, betas=(0.85, 0.98), weight_decay=0.05,
                                     momentum_decay=0.02)),
    "nadam_decoupled_maximize": (optim.NAdam, torch.optim.NAdam,
                                 dict(lr=0.02, weight_decay=0.2, decoupled_weight_decay=True,
                                      maximize=True)),
}


def _pair(name: str, init: list[np.ndarray],
          **ember_only: Any) -> tuple[list[ember.Tensor], Any, list[Any], Any]:
    ecls, tcls, kw = OPTIMIZERS[name]
    params = [ember.tensor(a, dtype=ember.float64) for a in init]
    tparams = [torch.tensor(a, requires_grad=True) for a in init]
    return params, ecls(params, **kw, **ember_only), tparams, tcls(tparams, **kw)


def _step_both(params: list[ember.Tensor], opt: Any, tparams: list[Any], topt: Any,
               grads: list[np.ndarray]) -> None:
    opt.step({p: ember.tensor(g, dtype=ember.float64) for p, g in zip(params, grads,
                                                                      strict=True)})
    for tp, g in zip(tparams, grads, strict=True):
        tp.grad = torch.tensor(g)
    topt.step()


def _assert_same(params: list[ember.Tensor], tparams: list[Any], what: str,
                 rtol: float = 1e-12) -> None:
    for i, (p, tp) in enumerate(zip(params, tparams, strict=True)):
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=rtol, atol=1e-14,
                                   err_msg=f"{what}: parameter {i}")


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_parameters_after_30_steps_match_pytorch_in_float64(name: str) -> None:
    init, grads = _problem(30)
    params, opt, tparams, topt = _pair(name, init)
    for i, g in enumerate(grads):
        _step_both(params, opt, tparams, topt, g)
        _assert_same(params, tparams, f"{name} step {i}")
    assert not np.allclose(params[0].numpy(), init[0])


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_capturable_keeps_the_counts_on_the_device_and_matches_pytorch(name: str) -> None:
    init, grads = _problem(15)
    params, opt, tparams, topt = _pair(name, init, capturable=True)
    for g in grads:
        _step_both(params, opt, tparams, topt, g)
    state = opt.state[id(params[0])]
    assert isinstance(state["step"], ember.Tensor) and state["step"].item() == 15.0
    # float32 counts on the device (PyTorch's capturable layout)
    _assert_same(params, tparams, name, rtol=1e-6)


def _to_torch(state: dict[str, Any]) -> dict[str, Any]:
    """An ember optimizer state dict as PyTorch holds it: tensors for tensors, and the
    scalars ember keeps as host numbers (``step``, ``mu_product``) as 0-d tensors."""
    def conv(k: str, v: Any) -> Any:
        if isinstance(v, ember.Tensor):
            return torch.from_numpy(v.numpy().copy())
        if isinstance(v, list):
            return [conv(k, x) for x in v]
        if k in ("step", "mu_product"):
            return torch.tensor(float(v))
        return v
    return {"state": {i: {k: conv(k, v) for k, v in s.items()}
                      for i, s in state["state"].items()},
            "param_groups": state["param_groups"]}


def _to_ember(state: dict[str, Any]) -> dict[str, Any]:
    def conv(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return ember.tensor(v.detach().numpy().copy())
        if isinstance(v, list):
            return [conv(x) for x in v]
        return v
    return {"state": {i: {k: conv(v) for k, v in s.items()} for i, s in state["state"].items()},
            "param_groups": [dict(g) for g in state["param_groups"]]}


@pytest.mark.parametrize("name", ["adamax", "nadam_wd_momentum_decay"])
def test_state_dict_has_pytorchs_layout_and_round_trips_both_ways(name: str) -> None:
    init, grads = _problem(20)
    params, opt, tparams, topt = _pair(name, init)
    for g in grads[:8]:
        _step_both(params, opt, tparams, topt, g)
    mine, theirs = opt.state_dict(), topt.state_dict()
    assert mine["state"].keys() == theirs["state"].keys()
    for i in theirs["state"]:
        assert mine["state"][i].keys() == theirs["state"][i].keys()
    for g_mine, g_theirs in zip(mine["param_groups"], theirs["param_groups"], strict=True):
        assert set(g_theirs) - {"decoupled_weight_decay"} <= set(g_mine) | {"differentiable"}

    # ember -> PyTorch: a fresh PyTorch optimizer continues where ember's left off
    at = [p.numpy().copy() for p in params]
    t2 = [torch.tensor(a, requires_grad=True) for a in at]
    topt2 = OPTIMIZERS[name][1](t2, **OPTIMIZERS[name][2])
    topt2.load_state_dict(_to_torch(mine))
    # PyTorch -> ember: a fresh ember optimizer continues where PyTorch's left off
    e2 = [ember.tensor(tp.detach().numpy().copy()) for tp in tparams]
    opt2 = OPTIMIZERS[name][0](e2, lr=123.0)  # options come from the state dict
    opt2.load_state_dict(_to_ember(theirs))
    assert opt2.param_groups[0]["lr"] == OPTIMIZERS[name][2]["lr"]
    assert isinstance(opt2.state[id(e2[0])]["step"], int)
    for g in grads[8:]:
        _step_both(params, opt, t2, topt2, g)
        _step_both(e2, opt2, tparams, topt, g)
    _assert_same(params, t2, "ember state in PyTorch")
    _assert_same(e2, tparams, "PyTorch state in ember")


# -- under ember.compile ----------------------------------------------------------------------

def _model() -> nn.Module:
    ember.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)).to(AD)


def _batch(i: int) -> tuple[ember.Tensor, ember.Tensor]:
    rng = np.random.default_rng(i)
    return (ember.tensor(rng.standard_normal((4, 5)), dtype=ember.float32, device=AD),
            ember.tensor(rng.integers(0, 3, 4), dtype=ember.int64, device=AD))


COMPILED: dict[str, Callable[[Any], optim.Optimizer]] = {
    "Adamax": lambda p: optim.Adamax(p, lr=0.05, weight_decay=0.01),
    "NAdam": lambda p: optim.NAdam(p, lr=0.05, weight_decay=0.01),
    "NAdamW": lambda p: optim.NAdam(p, lr=0.05, weight_decay=0.1, decoupled_weight_decay=True),
}


@pytest.mark.parametrize("name", sorted(COMPILED))
def test_compiled_steps_equal_eager_steps_and_follow_the_scheduler(name: str) -> None:
    models, opts, scheds, steps = [], [], [], []
    for compiled in (False, True):
        model = _model()
        opt = COMPILED[name](model.parameters())

        def step(x: ember.Tensor, y: ember.Tensor, model: Any = model, opt: Any = opt) -> Any:
            loss = F.cross_entropy(model(x), y)
            opt.step(loss.backward())
            return loss

        models.append(model)
        opts.append(opt)
        scheds.append(optim.lr_scheduler.ExponentialLR(opt, gamma=0.7))
        steps.append(ember.compile(step) if compiled else step)
    for i in range(7):
        losses = [s(*_batch(i)).numpy() for s in steps]
        np.testing.assert_allclose(losses[1], losses[0], rtol=2e-5, atol=2e-6)
        for pe, pc in zip(models[0].parameters(), models[1].parameters(), strict=True):
            np.testing.assert_allclose(pc.numpy(), pe.numpy(), rtol=2e-5, atol=2e-6,
                                       err_msg=f"{name}: after step {i}")
        for s in scheds:
            s.step()
    stats = steps[1].stats  # type: ignore[attr-defined]
    assert stats.replays >= 4, stats
    for pe, pc in zip(models[0].parameters(), models[1].parameters(), strict=True):
        se, sc = opts[0].state[id(pe)], opts[1].state[id(pc)]
        assert se["step"] == sc["step"] == 7  # the host count advanced with every replay
        if "mu_product" in se:
            assert sc["mu_product"] == pytest.approx(se["mu_product"], rel=1e-12)


@pytest.mark.parametrize("cls", [optim.Adamax, optim.NAdam])
def test_host_counts_are_refused_by_a_graph_capture_and_capturable_is_accepted(
        cls: Any) -> None:
    class Notes:
        def note_replace(self, t: Any) -> None:
            pass

    for capturable in (False, True):
        w = ember.tensor([1.0, 2.0])
        opt = cls([w], lr=0.1, capturable=capturable)
        opt.step({w: ember.tensor([1.0, -1.0])})
        state = dict(opt.state[id(w)])
        with _capture.capturing(Notes()):  # type: ignore[arg-type]  # only note_replace is needed
            if capturable:
                opt.step({w: ember.tensor([1.0, -1.0])})
                assert all(opt.state[id(w)][k] is v for k, v in state.items())
            else:
                with pytest.raises(_capture.CaptureError, match=r"'step'.*capturable=True"):
                    opt.step({w: ember.tensor([1.0, -1.0])})


# -- LBFGS ------------------------------------------------------------------------------------

def _rosenbrock(v: Any) -> Any:
    return (100 * (v[1:] - v[:-1] ** 2) ** 2 + (1 - v[:-1]) ** 2).sum()


def _lbfgs_pair(x0: np.ndarray, **kw: Any) -> tuple[Any, Any, Any, Any, Any, Any]:
    x = ember.tensor(x0, dtype=ember.float64, device=AD, requires_grad=True)
    tx = torch.tensor(x0, requires_grad=True)
    opt, topt = optim.LBFGS([x], **kw), torch.optim.LBFGS([tx], **kw)

    def closure() -> tuple[Any, Any]:
        loss = _rosenbrock(x)
        return loss, loss.backward()

    def tclosure() -> Any:
        topt.zero_grad()
        loss = _rosenbrock(tx)
        loss.backward()
        return loss

    return x, opt, closure, tx, topt, tclosure


LBFGS_CASES: dict[str, dict[str, Any]] = {
    "fixed_steps": dict(lr=0.5, max_iter=10),
    "strong_wolfe": dict(line_search_fn="strong_wolfe"),
    "strong_wolfe_short_history": dict(line_search_fn="strong_wolfe", history_size=3,
                                       max_iter=7),
    "tolerances": dict(line_search_fn="strong_wolfe", tolerance_grad=1e-3,
                       tolerance_change=1e-4),
}


@pytest.mark.parametrize("case", sorted(LBFGS_CASES))
def test_lbfgs_reaches_pytorchs_iterates_on_rosenbrock(case: str) -> None:
    x, opt, closure, tx, topt, tclosure = _lbfgs_pair(np.array([-1.2, 1.0, -0.5, 0.8]),
                                                      **LBFGS_CASES[case])
    for i in range(6):
        loss, tloss = opt.step(closure), topt.step(tclosure)
        # the same decisions (evaluations, iterations); the last bits of the dot products
        # differ (summation order) and Rosenbrock's valley amplifies them to ~1e-9
        assert loss.item() == pytest.approx(tloss.item(), rel=1e-7, abs=1e-12)
        np.testing.assert_allclose(x.numpy(), tx.detach().numpy(), rtol=1e-8, atol=1e-10,
                                   err_msg=f"{case}: after step {i}")
        s, ts = opt.state[id(x)], topt.state[tx]
        assert (s["func_evals"], s["n_iter"]) == (ts["func_evals"], ts["n_iter"])
    assert loss.item() < 1.0


def test_lbfgs_with_line_search_finds_the_minimum_of_2d_rosenbrock() -> None:
    x, opt, closure, tx, topt, tclosure = _lbfgs_pair(np.array([-1.5, 2.0]),
                                                      line_search_fn="strong_wolfe")
    for _ in range(3):
        opt.step(closure)
        topt.step(tclosure)
    np.testing.assert_allclose(x.numpy(), [1.0, 1.0], atol=1e-5)
    np.testing.assert_allclose(x.numpy(), tx.detach().numpy(), rtol=1e-10)


def test_lbfgs_closure_may_return_only_the_loss_and_may_be_compiled() -> None:
    x0 = np.array([-1.2, 1.0, 0.3])
    runs = []
    for form in ("pair", "loss", "compiled"):
        x = ember.tensor(x0, dtype=ember.float64, device=AD, requires_grad=True)
        opt = optim.LBFGS([x], line_search_fn="strong_wolfe", max_iter=8)

        def pair(x: Any = x) -> Any:
            loss = _rosenbrock(x)
            return loss, {x: loss.backward()[x]}  # a dict: what a compiled function returns

        closure: Any = {"pair": pair, "loss": lambda x=x: _rosenbrock(x),
                        "compiled": ember.compile(pair)}[form]
        for _ in range(3):
            opt.step(closure)
        runs.append(x.numpy())
        if form == "compiled":
            assert closure.stats.replays > 5, closure.stats
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-12)
    np.testing.assert_allclose(runs[2], runs[0], rtol=1e-12)


def test_lbfgs_state_dict_round_trips_with_pytorch() -> None:
    x0 = np.array([-1.2, 1.0, -0.5, 0.8])
    kw = dict(line_search_fn="strong_wolfe", max_iter=4, history_size=5)
    x, opt, closure, tx, topt, tclosure = _lbfgs_pair(x0, **kw)
    for _ in range(2):
        opt.step(closure)
        topt.step(tclosure)
    mine, theirs = opt.state_dict(), topt.state_dict()
    assert mine["state"][0].keys() == theirs["state"][0].keys()
    assert mine["param_groups"][0].keys() == theirs["param_groups"][0].keys()
    # ember -> PyTorch and PyTorch -> ember, each continued for two more steps
    x2, opt2, closure2, tx2, topt2, tclosure2 = _lbfgs_pair(x.numpy().copy(), **kw)
    topt2.load_state_dict(_to_torch(mine))
    opt2.load_state_dict(_to_ember(theirs))
    for _ in range(2):
        opt.step(closure)
        topt2.step(tclosure2)
        opt2.step(closure2)
        topt.step(tclosure)
    np.testing.assert_allclose(tx2.detach().numpy(), x.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(x2.numpy(), tx.detach().numpy(), rtol=1e-9, atol=1e-12)


def test_lbfgs_refuses_gradients_groups_and_compiled_steps() -> None:
    x = ember.tensor([1.0, 2.0], device=AD, requires_grad=True)
    opt = optim.LBFGS([x])
    with pytest.raises(TypeError, match=r"closure.*\(loss, grads\)"):
        opt.step()
    with pytest.raises(TypeError, match="closure"):
        opt.step((x * x).sum().backward())
    with pytest.raises(TypeError, match=r"return \(loss, grads\)"):
        opt.step(lambda: 3.0)
    with pytest.raises(ValueError, match="parameter groups"):
        optim.LBFGS([{"params": [x]}, {"params": [ember.zeros(1)]}])
    with pytest.raises(ValueError, match="strong_wolfe"):
        optim.LBFGS([x], line_search_fn="backtracking")

    @ember.compile
    def step() -> Any:
        return opt.step(lambda: (x * x).sum())

    with pytest.raises(Exception, match="compile the closure instead"):
        step()


# -- the errors that point at ember's form ----------------------------------------------------

@pytest.mark.parametrize("cls", [optim.SGD, optim.Adam, optim.Adamax, optim.NAdam])
def test_step_without_gradients_shows_the_ember_form(cls: Any) -> None:
    w = ember.tensor([1.0], device=AD, requires_grad=True)
    with pytest.raises(TypeError, match=r"opt\.step\(loss\.backward\(\)\)"):
        cls([w], lr=0.1).step()


def test_reading_grad_shows_the_ember_form() -> None:
    w = ember.tensor([1.0], device=AD, requires_grad=True)
    with pytest.raises(AttributeError, match=r"grads = loss\.backward\(\).*opt\.step\(grads\)"):
        _ = w.grad
    assert getattr(ember.zeros(1), "grad", None) is None


def test_step_with_a_closure_returns_its_loss_as_pytorch() -> None:
    w = ember.tensor([1.0, -2.0], device=AD, requires_grad=True)
    opt = optim.SGD([w], lr=0.25)
    with ember.no_grad():  # the closure runs with grad mode on, as PyTorch's step does
        loss = opt.step(lambda: (w * w).sum())
    assert loss.item() == 5.0
    np.testing.assert_allclose(w.numpy(), [0.5, -1.0])
