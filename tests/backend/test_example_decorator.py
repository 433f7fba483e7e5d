"""The example decorator (``examples/call-counter``, ``count<inner>``) written against the
public decorator contract only: it counts what runs, computes what its inner device computes,
and passes the conformance suite stacked over cpu and under autodiff (a sample here; the whole
suite: ``pytest tests/conformance --ember-plugin=ember_callcount.plugin
--ember-device='count<cpu>,autodiff<count<cpu>>'`` with ``examples/call-counter/src`` on the
path)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import ember

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "examples" / "call-counter" / "src"


@pytest.fixture(scope="module")
def counting() -> Iterator[None]:
    sys.path.insert(0, str(SRC))
    from ember._plugins import plugin_manager, register_plugin

    plugin = importlib.import_module("ember_callcount.plugin")  # on the path from here on
    if plugin_manager().get_plugin("callcount-test") is None:
        register_plugin(plugin, name="callcount-test")
    yield
    sys.path.remove(str(SRC))


def test_count_runs_each_op_on_the_inner_device_and_counts_it_by_name(counting: None) -> None:
    d = ember.device("count<cpu>")
    d.backend.reset()  # type: ignore[attr-defined]  # a CountingBackend
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = ember.tensor(a, device=d)
    y = (x * x + x).sum(dim=1)
    assert str(y.device) == "count<cpu>" and y.dtype is ember.float32
    np.testing.assert_allclose(y.numpy(), (a * a + a).sum(axis=1))
    calls = d.backend.reset()  # type: ignore[attr-defined]
    assert (calls["mul"], calls["add"], calls["sum"]) == (1, 1, 1)
    assert d.backend.calls == Counter()  # type: ignore[attr-defined]


def test_composites_run_whole_or_decompose_as_the_option_says(counting: None) -> None:
    a = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    want = np.exp(a - a.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    for spec, whole in (("count<cpu>", True), ("count<cpu,composites=false>", False)):
        d = ember.device(spec)
        d.backend.reset()  # type: ignore[attr-defined]
        got = ember.tensor(a, device=d).softmax(-1).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6)
        calls = d.backend.calls  # type: ignore[attr-defined]
        assert (calls["softmax"] == 1) is whole, (spec, calls)
        assert (calls["exp"] >= 1) is not whole, (spec, calls)


def test_gradients_flow_through_count_under_autodiff(counting: None) -> None:
    d = ember.device("autodiff<count<cpu>>")
    a = np.array([[1.0, -2.0, 0.5]], dtype=np.float64)
    w = ember.tensor(a, device=d, requires_grad=True)
    grads = (w * w * 3.0).sum().backward()
    np.testing.assert_allclose(grads[w].numpy(), 6 * a)
    assert str(grads[w].device) == "count<cpu>"


def test_a_compiled_step_through_count_reads_a_rebound_parameter_at_each_replay(
        counting: None) -> None:
    """The counter does nothing about `ember.compile`: core shows the trace the tensors a
    decorator device sees (`Decorator.dispatch_noting`), so the program reads ``w`` from ``w``
    at each replay, and a new value given to it (as an optimizer step gives one) is used."""
    from ember.backend import set_payload

    d = ember.device("count<cpu>")
    w = ember.tensor([1.0, 2.0], device=d)
    step = ember.compile(lambda x: (x * w).sum())
    x = ember.tensor([3.0, 4.0], device=d)
    assert step(x).item() == step(x).item() == 11.0
    set_payload(w, ember.tensor([10.0, 20.0], device=d).payload)
    assert step(x).item() == 110.0
    assert step.stats.traces == 1 and step.stats.replays == 2


def test_count_passes_a_sample_of_the_conformance_suite_over_cpu_and_under_autodiff() -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/conformance",
         "--ember-plugin=ember_callcount.plugin", "--ember-device=count<cpu>,autodiff<count<cpu>>",
         "--ember-sample=12"], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    tail = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    assert "ember conformance on count<cpu>:" in proc.stdout, tail
    assert "ember conformance on autodiff<count<cpu>>:" in proc.stdout, tail
