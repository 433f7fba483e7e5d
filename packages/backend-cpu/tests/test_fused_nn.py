"""The fused nn kernels (GELU, attention, LSTM / GRU cells) against float64 numpy oracles,
finite differences, PyTorch, and core's decomposition on a device without the kernels."""

from __future__ import annotations

import math

import ember
import ember.functional as F
import numpy as np
import pytest
from ember import nn, ops
from ember_autodiff.testing import check_grads
from scipy.special import erf

from ember_cpu import CpuBackend

K = CpuBackend().kernels
AD = "autodiff<cpu>"
#: a device stack without the fused kernels: Fusion runs core's decompositions
DECOMPOSED = "autodiff<fusion<cpu>>"
FLOATS = ("float32", "float64", "float16", "bfloat16")
TOL = {"float64": (1e-12, 1e-12), "float32": (2e-6, 2e-6), "float16": (2e-3, 2e-3),
       "bfloat16": (2e-2, 2e-2)}


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _close(got: ember.Tensor | np.ndarray, want: np.ndarray, dtype: str, scale: float = 1.0
           ) -> None:
    """``got`` (any dtype) against a float64 oracle, within ``dtype``'s tolerance."""
    rtol, atol = TOL[dtype]
    g = got.numpy() if isinstance(got, ember.Tensor) else got
    np.testing.assert_allclose(np.asarray(g, dtype=np.float64), want, rtol=rtol * scale,
                               atol=atol * scale)


def _as(a: np.ndarray, dtype: str, device: str = "cpu", grad: bool = False) -> ember.Tensor:
    t = ember.tensor(a, dtype=getattr(ember, dtype), device=device)
    return t.requires_grad_(True) if grad else t


def _rounded(a: np.ndarray, dtype: str) -> np.ndarray:
    """``a`` rounded to ``dtype`` and back to float64: what the kernel really receives."""
    return ember.tensor(a, dtype=getattr(ember, dtype)).numpy().astype(np.float64)


# -- GELU ---------------------------------------------------------------------------------------

_K = math.sqrt(2 / math.pi)


def gelu_oracle(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(_K * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def gelu_grad_oracle(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        t = np.tanh(_K * (x + 0.044715 * x ** 3))
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _K * (1 + 3 * 0.044715 * x * x)
    return 0.5 * (1 + erf(x / math.sqrt(2))) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_gelu_kernel_and_its_gradient_match_the_float64_oracle(dtype: str,
                                                               approximate: str) -> None:
    x = _rounded(_rng().standard_normal((7, 33)) * 3, dtype)
    g = _rounded(_rng(1).standard_normal((7, 33)), dtype)
    y = K[ops.composite.gelu](_as(x, dtype)._data, approximate=approximate)
    assert y.dtype == _as(x, dtype)._data.dtype
    _close(y, gelu_oracle(x, approximate), dtype, 4)
    dx = K[ops.composite.gelu_backward](_as(g, dtype)._data, _as(x, dtype)._data,
                                        approximate=approximate)
    _close(dx, g * gelu_grad_oracle(x, approximate), dtype, 8)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_gradients_match_finite_differences(approximate: str) -> None:
    x = _rng().standard_normal((3, 4)) * 2
    assert ember.device(AD).implements(ops.composite.gelu)
    check_grads(lambda t: F.gelu(t, approximate), [x])


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_gelu_kernel_path_agrees_with_the_decomposition(dtype: str, approximate: str) -> None:
    x = _rng(2).standard_normal((5, 16)) * 3
    w = _rng(3).standard_normal((5, 16))
    res = []
    for device in (AD, DECOMPOSED):
        xt = _as(x, dtype, device, grad=True)
        y = F.gelu(xt, approximate)
        grads = (y * _as(w, dtype, device)).sum().backward()
        res.append((y.numpy().astype(np.float64), grads[xt].numpy().astype(np.float64)))
    assert not ember.device(DECOMPOSED).implements(ops.composite.gelu)
    rtol, atol = TOL[dtype]
    for a, b in zip(res[0], res[1], strict=True):
        np.testing.assert_allclose(a, b, rtol=8 * rtol, atol=8 * atol)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_gradients_match_pytorch(approximate: str) -> None:
    torch = pytest.importorskip("torch")
    x = _rng(4).standard_normal((6, 10)).astype(np.float32) * 3
    w = _rng(5).standard_normal((6, 10)).astype(np.float32)
    xt = ember.tensor(x, device=AD, requires_grad=True)
    y = nn.GELU(approximate)(xt)
    grads = (y * ember.tensor(w, device=AD)).sum().backward()
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.nn.functional.gelu(tx, approximate=approximate)
    (ty * torch.from_numpy(w)).sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(grads[xt].numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_gelu_rejects_an_unknown_approximation_by_name() -> None:
    with pytest.raises(ValueError, match="gelu: approximate must be"):
        F.gelu(ember.ones(2), "sigmoid")
    with pytest.raises(ValueError, match="gelu: approximate must be"):
        K[ops.composite.gelu](np.ones(2), approximate="sigmoid")
    with pytest.raises(ValueError, match=r"gelu_backward: g \(3,\)"):
        K[ops.composite.gelu_backward](np.ones(3), np.ones(2))
