"""`Backend.dispatch_binary`: a backend's optional fast path for eager binary ops.  Core
offers it two float tensors of one dtype and device (after checking broadcasting) and falls
back to `dispatch` when it returns ``None``; integer operands and decorators never reach it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ember
from ember import ops
from ember._device import Device
from ember_cpu import CpuBackend


class FastCpu(CpuBackend):
    """``cpu`` whose fast path answers ``mul`` itself (computing ``a * b`` in numpy, float64
    then cast), declines everything else, and counts what it saw."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def dispatch_binary(self, op: Any, a: Any, b: Any) -> Any:
        self.seen.append(op.name)
        if op is not ops.elementwise.mul:
            return None
        t = object.__new__(self.device.tensor_type)
        t._data = (a._data.astype(np.float64) * b._data).astype(a._data.dtype)
        t._device, t._dtype = self.device, a._dtype
        return t


@pytest.fixture
def fast() -> tuple[FastCpu, Device]:
    be = FastCpu()
    return be, Device("fast-cpu", None, None, be)


def test_the_fast_path_answers_or_declines(fast: tuple[FastCpu, Device]) -> None:
    be, dev = fast
    x, y = np.arange(6.0).reshape(2, 3), np.full((2, 3), 1.5)
    a, b = ember.tensor(x, device=dev), ember.tensor(y, device=dev)
    np.testing.assert_array_equal((a * b).numpy(), x * y)   # answered
    np.testing.assert_array_equal((a + b).numpy(), x + y)   # declined: dispatch ran it
    assert be.seen == ["mul", "add"]
    row = ember.tensor(np.array([1.0, 2.0, 3.0]), device=dev)
    np.testing.assert_array_equal((a * row).numpy(), x * [1.0, 2.0, 3.0])  # broadcasting
    with pytest.raises(ValueError, match="broadcast"):
        a * ember.tensor(np.ones(4), device=dev)  # checked before the fast path is asked
    assert be.seen == ["mul", "add", "mul"]


def test_integers_and_decorators_do_not_reach_it(fast: tuple[FastCpu, Device]) -> None:
    be, dev = fast
    i = ember.tensor(np.arange(3), device=dev)
    np.testing.assert_array_equal((i * i).numpy(), np.arange(3) ** 2)
    assert be.seen == []
    assert ember.device("cpu").dispatch_binary is None  # the default: plain dispatch
    assert ember.device("autodiff<cpu>").dispatch_binary is None


def test_a_trace_records_what_the_fast_path_would_answer(fast: tuple[FastCpu, Device]) -> None:
    """While `ember.compile` records, core does not ask the fast path (its answer would run
    unrecorded and replays would read the traced call's result); eager calls ask it again."""
    be, dev = fast
    rng = np.random.default_rng(0)
    xs = [(rng.standard_normal((2, 3)), rng.standard_normal((2, 3))) for _ in range(3)]

    def f(a: Any, b: Any) -> Any:
        return a * b + b

    compiled = ember.compile(f)
    for x, y in xs:
        before = list(be.seen)
        got = compiled(ember.tensor(x, device=dev), ember.tensor(y, device=dev)).numpy()
        np.testing.assert_allclose(got, x * y + y, rtol=1e-12)
        assert be.seen == before  # neither the trace nor the replays asked it
    assert compiled.stats.traces == 1 and compiled.stats.replays == 2
    f(ember.tensor(xs[0][0], device=dev), ember.tensor(xs[0][1], device=dev))
    assert be.seen[-2:] == ["mul", "add"]
