"""The suite itself: a backend with wrong kernels fails it, declared skips are reported with
their reason and counted, and every op of core is covered by some case."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import ember
from ember.testing import all_cases, assert_close

pytest_plugins = ["pytester"]

_BROKEN_PLUGIN = textwrap.dedent('''
    import numpy as np
    import ember
    from ember import ops
    from ember._device import DeviceSpec
    from ember._plugins import register_plugin
    from ember_cpu import CpuBackend

    def _factory(index):
        b = CpuBackend()
        add = b.kernels[ops.add]
        b.kernels[ops.add] = lambda x, y: add(add(x, y), np.ones((), x.dtype))  # off by one
        b.kernels[ops.exp] = lambda x: np.exp(x) * x.dtype.type(1.01)  # 1% off
        return b

    class Plugin:
        @ember.hookimpl
        def ember_devices_register(self):
            return [DeviceSpec(name="broken", factory=_factory, indexed=False)]

        @ember.hookimpl
        def ember_conformance_skips(self, device):
            if device == "broken":
                return {"sum-*": "sums are not written yet"}
            return None

    register_plugin(Plugin(), name="broken-test-plugin")
''')


def test_a_wrong_kernel_fails_its_cases_and_skips_are_counted(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(brokenplugin=_BROKEN_PLUGIN)
    pytester.syspathinsert()
    result = pytester.runpytest_subprocess(
        "-p", "brokenplugin", "--pyargs", "ember.testing.suite", "--ember-device=broken",
        "-k", "add-basic-float32 or add-basic-int8 or exp-basic-float32 or sum-all-float32 "
              "or mul-basic-float32", "-rs")
    result.stdout.fnmatch_lines([
        "*add-basic-float32*",
        "ember conformance on broken: 1 passed, 1 skipped (declared), 0 skipped "
        "(unsupported dtype), 5 failed",
        "*declared by the backend (sum-[*]): sums are not written yet*",
    ])
    assert "differ from the numpy oracle" in result.stdout.str()
    # logsumexp- and logaddexp-basic-float32 match -k too, and fail through the broken exp
    result.assert_outcomes(passed=1, failed=5, skipped=1)


def test_assert_close_rejects_wrong_values_shapes_dtypes_and_nans() -> None:
    t = ember.tensor([1.0, float("nan")], dtype=ember.float32)
    assert_close(t, np.array([1.0, np.nan]), ember.float32)
    for expected, dtype in ((np.array([1.001, np.nan]), ember.float32),
                            (np.array([1.0, 2.0]), ember.float32),
                            (np.array([[1.0, np.nan]]), ember.float32),
                            (np.array([1.0, np.nan]), ember.float64)):
        with pytest.raises(AssertionError):
            assert_close(t, expected, dtype)


def test_every_primitive_and_composite_has_cases() -> None:
    ids = [c.id for c in all_cases()]
    names = {p.name for p in ember.ops.primitives()}
    composites = {"softmax", "log_softmax", "logsumexp", "relu", "gelu", "gelu-tanh", "silu",
                  "leaky_relu", "elu", "softplus", "mish", "layer_norm", "rms_norm", "linear",
                  "conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "max_pool2d",
                  "avg_pool2d", "adaptive_avg_pool2d", "embedding", "interpolate", "dropout",
                  "one_hot", "nll_loss", "cross_entropy", "mse_loss", "getitem", "setitem",
                  "arange", "linspace", "eye", "full", "zeros_like", "ones_like", "full_like",
                  "rand", "randn", "randint", "promote", "error"}
    # primitives reached through another name in the suite
    alias = {"slice": "getitem", "contiguous": "contiguous", "cast": "cast",
             "full": "full", "expand": "expand"}
    missing = sorted(n for n in names | composites
                     if not any(i.startswith(alias.get(n, n) + "-") for i in ids))
    assert not missing, f"no conformance cases for: {missing}"
    assert len(ids) == len(set(ids))


def test_check_grads_catches_a_wrong_backward_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    rules = pytest.importorskip("ember_autodiff.rules")
    from ember.testing import check_grads

    case = next(c for c in all_cases() if c.id == "exp-basic-float64")
    device = ember.device("autodiff<cpu>")
    check_grads(case, device)
    monkeypatch.setitem(rules.RULES, ember.ops.exp, lambda g, out, x: (g * out * 1.001,))
    with pytest.raises(AssertionError, match="gradient of input 0"):
        check_grads(case, device)


def test_the_documented_command_runs_the_suite_and_prints_the_summary(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ember.testing", "--device", "cpu", "-k", "add-basic-float32"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("ember conformance on cpu: 1 passed, 0 skipped (declared), 0 skipped "
            "(unsupported dtype)") in proc.stdout
