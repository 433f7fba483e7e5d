"""GELU kernels (``ember_triton.activation``) on the interpreter: one launch per op, both forms
against numpy float64 (``scipy.special.erf``) in every float dtype, empty and ragged sizes,
strided inputs, gradients through autodiff against the analytic float64 derivative and finite
differences, and the Fusion stacks.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import ember
import ember.functional as F
import numpy as np
import pytest
from ember._apply import apply
from ember.ops import composite as cops
from ember_autodiff.testing import check_grads
from scipy.special import erf

from ember_triton import activation

AD = "autodiff<triton-interpret>"
FORMS = ["none", "tanh"]
DTYPES = ["float32", "float16", "bfloat16", "float64"]
#: (rtol, atol) against float64 on the dtype-rounded input: a few units in the last place for
#: float32 / float64; for the half types (computed in float32) the rounding of the result: half
#: a unit for float16, a whole one for bfloat16 (Triton's interpreter truncates float32 to
#: bfloat16, where a GPU rounds to nearest)
TOL = {"float64": (1e-13, 1e-14), "float32": (1e-6, 1e-6), "float16": (4.9e-4, 1e-6),
       "bfloat16": (7.9e-3, 1e-6)}
_K = math.sqrt(2.0 / math.pi)

rng = np.random.default_rng(11)


def gelu_oracle(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(_K * (x + 0.044715 * x ** 3)))  # type: ignore[no-any-return]
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))  # type: ignore[no-any-return]


def gelu_grad_oracle(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        t = np.tanh(_K * (x + 0.044715 * x ** 3))
        return (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * _K  # type: ignore[no-any-return]
                * (1.0 + 3 * 0.044715 * x * x))
    cdf = 0.5 * (1.0 + erf(x / math.sqrt(2.0)))
    return cdf + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)  # type: ignore[no-any-return]


def _tensor(x: np.ndarray, dtype: str, device: Any) -> tuple[ember.Tensor, np.ndarray]:
    """``x`` in ``dtype`` on ``device``, and its rounded values in float64 (the oracle's input)."""
    t = ember.tensor(x, dtype=getattr(ember, dtype), device=device)
    return t, t.to(dtype=ember.float64).numpy()


def _close(got: ember.Tensor, want: np.ndarray, dtype: str) -> None:
    assert got.dtype is getattr(ember, dtype)
    assert tuple(got.shape) == want.shape
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(got.to(dtype=ember.float64).numpy(), want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("approximate", FORMS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_and_backward_kernels_match_float64(dev: ember.Device, launches: Counter[str],
                                                    dtype: str, approximate: str) -> None:
    # from the far negative tail (1 + erf cancels) to past the tanh form's saturation
    x = np.concatenate([rng.standard_normal(300) * 3, np.linspace(-12, 12, 97), [0.0, -0.0]])
    xt, xs = _tensor(x, dtype, dev)
    gt, gs = _tensor(rng.standard_normal(x.shape), dtype, dev)
    launches.clear()
    y = F.gelu(xt, approximate)
    assert launches == Counter(gelu=1)
    dx = F.gelu_backward(gt, xt, approximate, y)
    assert launches == Counter(gelu=1, gelu_backward=1)
    _close(y, gelu_oracle(xs, approximate), dtype)
    _close(dx, gs * gelu_grad_oracle(xs, approximate), dtype)


@pytest.mark.parametrize("shape", [(0,), (3, 0, 5), (1,), (), (7, 11, 13)])
@pytest.mark.parametrize("approximate", FORMS)
def test_any_rank_and_empty_tensors(dev: ember.Device, shape: tuple[int, ...],
                                    approximate: str) -> None:
    x = rng.standard_normal(shape) * 2
    y = F.gelu(ember.tensor(x, device=dev), approximate)
    assert tuple(y.shape) == shape
    np.testing.assert_allclose(y.numpy(), gelu_oracle(x, approximate), rtol=1e-13, atol=1e-14)
    g = rng.standard_normal(shape)
    dx = F.gelu_backward(ember.tensor(g, device=dev), ember.tensor(x, device=dev), approximate)
    np.testing.assert_allclose(dx.numpy(), g * gelu_grad_oracle(x, approximate), rtol=1e-13,
                               atol=1e-14)


@pytest.mark.parametrize("approximate", FORMS)
def test_sizes_that_are_not_multiples_of_the_block(dev: ember.Device, launches: Counter[str],
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   approximate: str) -> None:
    monkeypatch.setitem(activation.BLOCK, "interpret", 256)
    x = rng.standard_normal(1000).astype(np.float32) * 3  # 4 programs, the last one partial
    xt, ones = ember.tensor(x, device=dev), ember.ones(1000, device=dev)
    launches.clear()
    y = F.gelu(xt, approximate)
    dx = F.gelu_backward(ones, xt, approximate, y)
    assert launches == Counter(gelu=1, gelu_backward=1)
    xs = x.astype(np.float64)
    np.testing.assert_allclose(y.numpy(), gelu_oracle(xs, approximate), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dx.numpy(), gelu_grad_oracle(xs, approximate), rtol=1e-6,
                               atol=1e-6)


@pytest.mark.parametrize("approximate", FORMS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_strided_inputs_are_copied_once(dev: ember.Device, launches: Counter[str], dtype: str,
                                        approximate: str) -> None:
    base, _ = _tensor(rng.standard_normal((4, 6, 10)) * 3, dtype, dev)
    for view in (base.permute(2, 0, 1), base[:, ::2, 1:], base.transpose(0, 1)):
        launches.clear()
        y = F.gelu(view, approximate)
        assert launches["gelu"] == 1 and sum(launches.values()) == 2  # one copy, one gelu
        _close(y, gelu_oracle(view.to(dtype=ember.float64).numpy(), approximate), dtype)
        g = view * 0.5
        dx = F.gelu_backward(g, view, approximate)
        want = g.to(dtype=ember.float64).numpy() * gelu_grad_oracle(
            view.to(dtype=ember.float64).numpy(), approximate)
        _close(dx, want, dtype)


def test_special_values_follow_the_formula(dev: ember.Device) -> None:
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e30, -1e30])
    for form in FORMS:
        got = F.gelu(ember.tensor(x, device=dev), form).numpy()
        with np.errstate(all="ignore"):
            want = gelu_oracle(x, form)
        np.testing.assert_array_equal(got, want)  # inf, nan (-inf * 0), nan, zeros, +-1e30 / 0
        for d in ("float32", "float16", "bfloat16"):
            xt = ember.tensor(x[:5], dtype=getattr(ember, d), device=dev)
            np.testing.assert_array_equal(F.gelu(xt, form).to(dtype=ember.float64).numpy(),
                                          want[:5])


@pytest.mark.parametrize("approximate", FORMS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_autodiff_runs_both_kernels(dev: ember.Device, launches: Counter[str], dtype: str,
                                    approximate: str) -> None:
    xt, xs = _tensor(rng.standard_normal((5, 9)) * 3, dtype, AD)
    xt.requires_grad_(True)
    launches.clear()
    grads = F.gelu(xt, approximate).sum().backward()
    assert launches["gelu"] == 1 and launches["gelu_backward"] == 1
    _close(grads[xt], gelu_grad_oracle(xs, approximate), dtype)


@pytest.mark.parametrize("approximate", FORMS)
def test_gradients_match_finite_differences(dev: ember.Device, approximate: str) -> None:
    assert ember.device(AD).implements(cops.gelu)
    x = rng.standard_normal((3, 7)) * 2
    check_grads(lambda t: F.gelu(t, approximate), [x], device=AD)
    # second derivatives: the backward op itself is differentiated through the decomposition
    check_grads(lambda t: F.gelu_backward(t * 0 + 1.5, t, approximate), [x], device=AD)


@pytest.mark.parametrize("approximate", FORMS)
@pytest.mark.parametrize("stack", ["fusion<triton-interpret>",
                                   "autodiff<fusion<triton-interpret>>"])
def test_fusion_stacks_run_the_kernel(dev: ember.Device, launches: Counter[str], stack: str,
                                      approximate: str) -> None:
    # Fusion runs a composite its inner device implements as that kernel (`implements`), not
    # as a fused decomposition
    d = ember.device(stack)
    assert d.implements(cops.gelu)
    x = rng.standard_normal((6, 5)) * 3
    xt = ember.tensor(x, device=d)
    if "autodiff" in stack:
        xt.requires_grad_(True)
    y = F.gelu(xt * 2.0, approximate) + 1.0
    np.testing.assert_allclose(y.numpy(), gelu_oracle(2 * x, approximate) + 1.0, rtol=1e-13,
                               atol=1e-14)
    assert launches["gelu"] == 1
    if "autodiff" in stack:
        grads = (F.gelu(xt * 2.0, approximate) * 3.0).sum().backward()
        np.testing.assert_allclose(grads[xt].numpy(), 6.0 * gelu_grad_oracle(2 * x, approximate),
                                   rtol=1e-12, atol=1e-13)
        assert launches["gelu_backward"] == 1


def test_unknown_forms_and_mismatched_operands_are_rejected(dev: ember.Device) -> None:
    be = dev.backend
    x = be.memory.from_numpy(np.ones(3))
    with pytest.raises(ValueError, match="gelu: approximate must be 'none' or 'tanh'"):
        be.kernels[cops.gelu](x, approximate="sigmoid")
    with pytest.raises(ValueError, match=r"gelu_backward: g \(2,\) float64, x \(3,\)"):
        be.kernels[cops.gelu_backward](be.memory.from_numpy(np.ones(2)), x, x)
    with pytest.raises(ValueError, match="gelu_backward: approximate must be"):
        be.kernels[cops.gelu_backward](x, x, x, approximate="erf")
    y = apply(cops.gelu, ember.tensor(np.ones(3), device=dev), approximate="tanh")
    np.testing.assert_allclose(y.numpy(), gelu_oracle(np.ones(3), "tanh"), rtol=1e-14)
