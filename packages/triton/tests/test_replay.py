"""Recorded launches replayed without the per-call analysis (matmul, reduction and Adam plans)
must pass the arguments a first launch passes, with the new operands' addresses in the same
places.  Only a GPU records compiled entries, so here `launch` is wrapped to record its
arguments and hand back an entry that logs its replays."""

from __future__ import annotations

from typing import Any

import ember
import numpy as np
import pytest

from ember_triton._array import DeviceArray


class _Entry:
    def __init__(self, log: list[tuple[str, tuple[int, ...], list[Any]]]) -> None:
        self.log = log

    def __call__(self, grid: tuple[int, ...], stream: int, raw: list[Any]) -> None:
        self.log.append(("replay", tuple(grid), list(raw)))


@pytest.fixture
def log(dev: ember.Device, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every launch from now on as ``("launch", grid, raw arguments)`` (it also runs), and
    every replay of one as ``("replay", grid, raw arguments)``."""
    be = dev.backend
    monkeypatch.setattr(be, "_planned", {})
    monkeypatch.setattr(be, "matmul_plans", {})
    monkeypatch.setattr(be, "reduce_plans", {})
    monkeypatch.setattr(be, "adam_plans", {})
    entries: list[Any] = []
    real = be.launch

    def launch(kernel: Any, grid: Any, *args: Any, **meta: Any) -> _Entry:
        real(kernel, grid, *args, **meta)
        entries.append(("launch", tuple(grid),
                        [a.ptr if isinstance(a, DeviceArray) else a for a in args]))
        return _Entry(entries)

    monkeypatch.setattr(be, "launch", launch)
    return entries


def _moved(first: list[Any], old: list[DeviceArray], new: list[DeviceArray]) -> list[Any]:
    """``first``'s arguments with each address of ``old`` replaced by the one of ``new``."""
    where = {o.ptr: n.ptr for o, n in zip(old, new, strict=True)}
    return [where.get(a, a) if type(a) is int else a for a in first]


def _t(dev: ember.Device, shape: tuple[int, ...], seed: int) -> ember.Tensor:
    return ember.tensor(np.random.default_rng(seed).standard_normal(shape), dtype=ember.float32,
                        device=dev)


@pytest.mark.parametrize("bias", [False, True])
def test_matmul_replays_its_launch(dev: ember.Device, log: list[Any], bias: bool) -> None:
    def run(seed: int) -> list[ember.Tensor]:
        x, w, b = _t(dev, (6, 5), seed), _t(dev, (7, 5), seed + 1), _t(dev, (7,), seed + 2)
        return [x, w, b, ember.nn.functional.linear(x, w, b) if bias else x @ w.T]

    first = run(0)
    x, w, b, out = (t.numpy().astype(np.float64) for t in first)
    np.testing.assert_allclose(out, x @ w.T + (b if bias else 0), rtol=1e-5, atol=1e-5)
    second = run(10)
    assert dev.backend.matmul_plans
    assert [e[0] for e in log] == ["launch", "replay"]
    assert log[1][1] == log[0][1]
    assert log[1][2] == _moved(log[0][2], [t.payload for t in first], [t.payload for t in second])
    # an operand off the 16-byte grid (a view one row in) launches through the JIT again
    xs = _t(dev, (7, 5), 20)[1:]
    got = ember.nn.functional.linear(xs, first[1], first[2]) if bias else xs @ first[1].T
    assert log[-1][0] == "launch"
    np.testing.assert_allclose(got.numpy(), xs.numpy().astype(np.float64) @ w.T
                               + (b if bias else 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dims", [(2,), (0,), (0, 2)])  # reductions that read x as it is
def test_reduction_replays_its_launch(dev: ember.Device, log: list[Any],
                                      dims: tuple[int, ...]) -> None:
    def run(seed: int) -> list[DeviceArray]:
        x = _t(dev, (4, 6, 3), seed)
        s = x.sum(dim=dims)
        return [x.payload, s.payload]

    first = run(0)
    second = run(1)
    assert dev.backend.reduce_plans
    launches = [e for e in log if e[0] == "launch"]
    assert [e[0] for e in log][-1] == "replay" and len(launches) == 1
    assert log[-1][1] == launches[0][1]
    assert log[-1][2] == _moved(launches[0][2], first, second)


def test_adam_replays_its_launch(dev: ember.Device, log: list[Any]) -> None:
    params = [_t(dev, s, i) for i, s in enumerate([(3, 4), (5,), (2, 1, 3)])]
    opt = ember.optim.Adam(params, lr=0.01)

    def operands() -> list[DeviceArray]:
        out: list[DeviceArray] = []
        for p in params:
            st = opt.state[id(p)]
            out += [p.payload, st["exp_avg"].payload, st["exp_avg_sq"].payload]
        return out

    def step(seed: int) -> list[DeviceArray]:
        grads = {p: _t(dev, p.shape, seed + i) for i, p in enumerate(params)}
        opt.step(grads)
        return [g.payload for g in grads.values()]

    g1 = step(0)
    before = operands()  # what the second step reads ...
    g2 = step(10)
    after = operands()  # ... and writes
    assert dev.backend.adam_plans
    adam = [e for e in log if e[0] == "launch" and len(e[2]) > 20]
    assert len(adam) == 1 and log[-1][0] == "replay"
    raw, replay = adam[0][2], log[-1][2]
    assert len(raw) == len(replay) and log[-1][1] == adam[0][1]
    n = len(params)
    for i in range(n):
        p, m, v = before[3 * i:3 * i + 3]
        po, mo, vo = after[3 * i:3 * i + 3]
        assert replay[7 * i:7 * i + 7] == [po.ptr, mo.ptr, vo.ptr, p.ptr, g2[i].ptr, m.ptr,
                                           v.ptr]
    assert replay[7 * n:7 * n + 2 * n] == raw[7 * n:7 * n + 2 * n]  # sizes and block ends
    assert g1 != g2


def test_binary_ops_replay_straight_from_core(dev: ember.Device, log: list[Any],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """An arithmetic op whose operand layouts recur is answered by `dispatch_binary` (core's
    fast path): the recorded launch with the new addresses, without `dispatch`; comparisons
    and first sightings go through `dispatch`."""
    be = dev.backend
    monkeypatch.setattr(be, "elementwise_plans", {})
    dispatched: list[str] = []
    real = dev.dispatch

    def spy(op: Any, args: Any, params: Any) -> Any:
        dispatched.append(op.name)
        return real(op, args, params)

    monkeypatch.setattr(dev, "dispatch", spy)
    a, b = _t(dev, (4, 6), 0), _t(dev, (6,), 1)  # broadcast over rows
    first = a * b
    np.testing.assert_allclose(first.numpy(), a.numpy() * b.numpy(), rtol=1e-6)
    assert dispatched == ["mul"] and [e[0] for e in log] == ["launch"]
    c, d = _t(dev, (4, 6), 2), _t(dev, (6,), 3)
    out = c * d
    assert dispatched == ["mul"]  # not dispatched again
    assert [e[0] for e in log] == ["launch", "replay"] and log[1][1] == log[0][1]
    assert log[1][2] == _moved(log[0][2], [first.payload, a.payload, b.payload],
                               [out.payload, c.payload, d.payload])
    assert out.shape == (4, 6) and out.dtype == ember.float32 and out.device is dev
    assert be.dispatch_binary(ember.ops.elementwise.eq, c, d) is None  # bool result: dispatch
    assert be.dispatch_binary(ember.ops.elementwise.sub, c, d) is None  # no launch recorded
    c == d  # noqa: B015  # a comparison: through dispatch
    assert dispatched == ["mul", "eq"]
