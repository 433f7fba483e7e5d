"""`ember.amp.GradScaler` against ``torch.amp.GradScaler`` on the CPU: the same scales, growth
trackers, skipped steps and parameters over steps with injected infs and nans; unscale_ and
clipping; state dicts; one host read per step; errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ember
from ember import functional as F, nn, optim

#: the injected infs and nans make numpy warn inside the cpu kernels
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

DEV = "autodiff<cpu>"
OPTIONS = [
    dict(init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2),
    dict(init_scale=1000.0, growth_factor=3.0, backoff_factor=0.3, growth_interval=3),
    dict(init_scale=3.0e38, growth_factor=2.0, backoff_factor=0.5, growth_interval=1),
]
#: steps whose input holds an inf (i) or a nan (n), the rest are clean
PATTERN = "..i...n..ii....i......"


def _data(step: int, bad: str) -> tuple[np.ndarray, np.ndarray]:
    r = np.random.default_rng(step)
    x = r.standard_normal((6, 4)).astype(np.float32)
    if bad == "i":
        x[1, 2] = np.inf
    elif bad == "n":
        x[3, 0] = np.nan
    return x, r.standard_normal((6, 3)).astype(np.float32)


def _models(torch: Any) -> tuple[nn.Module, Any]:
    ember.manual_seed(0)
    model = nn.Linear(4, 3).to(DEV)
    tmodel = torch.nn.Linear(4, 3)
    with torch.no_grad():
        tmodel.weight.copy_(torch.from_numpy(model.weight.numpy()))
        tmodel.bias.copy_(torch.from_numpy(model.bias.numpy()))
    return model, tmodel


@pytest.mark.parametrize("opts", OPTIONS, ids=["defaults-like", "odd-factors", "overflow"])
@pytest.mark.parametrize("clip", [False, True])
def test_matches_torch_over_steps_with_infs(opts: dict[str, Any], clip: bool) -> None:
    torch = pytest.importorskip("torch")
    model, tmodel = _models(torch)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    topt = torch.optim.SGD(tmodel.parameters(), lr=0.1, momentum=0.9)
    scaler = ember.amp.GradScaler("cpu", **opts)
    tscaler = torch.amp.GradScaler("cpu", **opts)
    skipped = 0
    for step, bad in enumerate(PATTERN):
        x, y = _data(step, bad)
        before = model.weight.numpy().copy()
        # ember: gradients are returned
        loss = F.mse_loss(model(ember.tensor(x, device=DEV)), ember.tensor(y, device=DEV))
        grads = scaler.scale(loss).backward()
        if clip:
            grads = scaler.unscale_(opt, grads)
            grads, _ = optim.clip_grad_norm(grads, 0.05)
        scaler.step(opt, grads)
        scaler.update()
        # torch
        topt.zero_grad()
        tloss = torch.nn.functional.mse_loss(tmodel(torch.from_numpy(x)), torch.from_numpy(y))
        tscaler.scale(tloss).backward()
        if clip:
            tscaler.unscale_(topt)
            torch.nn.utils.clip_grad_norm_(tmodel.parameters(), 0.05)
        tscaler.step(topt)
        tscaler.update()
        assert scaler.get_scale() == tscaler.get_scale(), step
        assert scaler.state_dict() == tscaler.state_dict(), step
        if bad != ".":
            np.testing.assert_array_equal(model.weight.numpy(), before)
            skipped += 1
        np.testing.assert_allclose(model.weight.numpy(), tmodel.weight.detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(model.bias.numpy(), tmodel.bias.detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
    assert skipped == PATTERN.count("i") + PATTERN.count("n")


def test_skipped_step_backs_off_and_clean_steps_grow() -> None:
    w = ember.tensor([1.0, 2.0], device=DEV, requires_grad=True)
    opt = optim.SGD([w], lr=0.5)
    scaler = ember.amp.GradScaler("cpu", init_scale=8.0, growth_interval=2)
    scaler.step(opt, {w: ember.tensor([1.0, float("inf")])})
    scaler.update()
    assert w.tolist() == [1.0, 2.0] and scaler.get_scale() == 4.0
    for expect in (4.0, 8.0, 8.0, 16.0):
        scaler.step(opt, {w: ember.tensor([4.0, 4.0])})  # scaled: 4 / 4 = 1, then 4 / 8
        scaler.update()
        assert scaler.get_scale() == expect
    np.testing.assert_allclose(w.tolist(), [1.0 - 0.5 * (1 + 1 + 0.5 + 0.5),
                                            2.0 - 0.5 * (1 + 1 + 0.5 + 0.5)])


def test_unscale_then_clip_then_step_matches_the_values() -> None:
    w = ember.zeros(2)
    opt = optim.SGD([w], lr=1.0)
    scaler = ember.amp.GradScaler("cpu", init_scale=4.0)
    grads = scaler.unscale_({w: ember.tensor([12.0, 16.0])})
    assert grads[w].tolist() == [3.0, 4.0]
    clipped, norm = optim.clip_grad_norm(grads, 1.0)
    assert norm.item() == 5.0
    scaler.step(opt, clipped)  # not unscaled again
    scaler.update()
    np.testing.assert_allclose(w.tolist(), [-0.6, -0.8], rtol=1e-5)


def test_one_host_read_per_step(monkeypatch: pytest.MonkeyPatch) -> None:
    model = nn.Linear(4, 3).to(DEV)
    opt = optim.SGD(model.parameters(), lr=0.1)
    scaler = ember.amp.GradScaler("cpu")
    x, y = _data(0, ".")
    grads = scaler.scale(F.mse_loss(model(ember.tensor(x, device=DEV)),
                                    ember.tensor(y, device=DEV))).backward()
    reads: list[int] = []
    real = ember.Tensor.item

    def counting(self: ember.Tensor) -> Any:
        reads.append(1)
        return real(self)

    monkeypatch.setattr(ember.Tensor, "item", counting)
    scaler.step(opt, grads)
    scaler.update()
    assert len(reads) == 1


def test_state_dict_round_trip_and_torch_state() -> None:
    torch = pytest.importorskip("torch")
    w = ember.zeros(2)
    opt = optim.SGD([w], lr=0.1)
    a = ember.amp.GradScaler("cpu", init_scale=1024.0, growth_factor=4.0, growth_interval=5)
    for g in ([1.0, 1.0], [1.0, 1.0], [float("nan"), 1.0], [1.0, 1.0]):
        a.step(opt, {w: ember.tensor(g)})
        a.update()
    state = a.state_dict()
    assert state == {"scale": 512.0, "growth_factor": 4.0, "backoff_factor": 0.5,
                     "growth_interval": 5, "_growth_tracker": 1}
    b = ember.amp.GradScaler("cpu")
    b.load_state_dict(state)
    assert b.state_dict() == state and b.get_scale() == 512.0
    t = torch.amp.GradScaler("cpu")
    t.load_state_dict(state)
    assert t.state_dict() == state
    c = ember.amp.GradScaler("cpu")
    c.load_state_dict(t.state_dict())
    assert c.state_dict() == state
    with pytest.raises(RuntimeError, match="state dict is empty"):
        c.load_state_dict({})
    with pytest.raises(KeyError, match="_growth_tracker"):
        c.load_state_dict({k: v for k, v in state.items() if k != "_growth_tracker"})


def test_disabled_is_a_pass_through() -> None:
    w = ember.tensor([1.0], device=DEV, requires_grad=True)
    opt = optim.SGD([w], lr=1.0)
    s = ember.amp.GradScaler("cpu", enabled=False)
    loss = (w * 3).sum()
    assert s.scale(loss) is loss and s.get_scale() == 1.0 and s.state_dict() == {}
    s.step(opt, loss.backward())
    s.update()
    assert w.tolist() == [-2.0]


def test_unavailable_device_warns_and_disables() -> None:
    if any(d.name.startswith("cuda") and d.available for d in ember.devices()):
        pytest.skip("a CUDA device is available here")
    with pytest.warns(UserWarning, match="unavailable"):
        s = ember.amp.GradScaler("cuda")
    assert not s.is_enabled()


def test_errors() -> None:
    w = ember.zeros(2)
    opt = optim.SGD([w], lr=0.1)
    s = ember.amp.GradScaler("cpu")
    g = {w: ember.ones(2)}
    with pytest.raises(RuntimeError, match="no inf checks were recorded"):
        s.update()
    s.unscale_(opt, g)
    with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called"):
        s.unscale_(opt, g)
    s.step(opt, g)
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
        s.step(opt, g)
    with pytest.raises(RuntimeError, match="after step"):
        s.unscale_(opt, g)
    s.update()
    with pytest.raises(TypeError, match="optimizers hold no gradients"):
        s.unscale_(opt)
    with pytest.raises(TypeError, match="expected gradients"):
        s.step(opt, ember.ones(2))
    with pytest.raises(TypeError, match="tensor or a list/tuple"):
        s.scale(3.0)
    for bad in (dict(growth_factor=1.0), dict(backoff_factor=1.5), dict(growth_interval=0),
                dict(init_scale=float("inf"))):
        with pytest.raises(ValueError, match="GradScaler"):
            ember.amp.GradScaler("cpu", **bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown device type"):
        ember.amp.GradScaler("cdua")
