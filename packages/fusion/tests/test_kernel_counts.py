"""Kernel counts of the fused programs the issue names, checked against numpy oracles."""

from __future__ import annotations

import ember
import numpy as np
import pytest

import ember_fusion
from ember_fusion.testing import (
    chain,
    chain_oracle,
    check_adam_is_one_kernel,
    check_matmul_epilogue,
)


@pytest.mark.parametrize("device", ["fusion<cpu,eager=0>", "fusion<cpu,chunk=7,threads=2>"])
def test_seven_op_chain_is_one_kernel(device: str, rng: np.random.Generator) -> None:
    a = rng.standard_normal(1000).astype(np.float32)
    x = ember.tensor(a, device=device)
    x.device.synchronize()  # leave nothing other tests recorded in this thread's stream
    ember_fusion.reset_stats(device)
    got = chain(x).numpy()
    s = ember_fusion.stats(device)
    assert s.kernels_launched == 1
    assert s.ops_recorded == 7
    assert s.last_groups == ("rows[mul+add+clamp+mul+sub+sigmoid+mul]",)
    np.testing.assert_allclose(got, chain_oracle(a), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("device", ["fusion<cpu,eager=0>", "fusion<cpu,chunk=7,threads=2>"])
def test_row_softmax_is_at_most_two_kernels(device: str, rng: np.random.Generator) -> None:
    a = rng.standard_normal((37, 11)) * 3
    x = ember.tensor(a, device=device)
    ember_fusion.reset_stats(device)
    got = x.softmax(dim=-1).numpy()
    assert ember_fusion.stats(device).kernels_launched <= 2
    e = np.exp(a - a.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=1e-12)


@pytest.mark.parametrize("device", ["fusion<cpu,eager=0>", "fusion<cpu,chunk=7,threads=2>"])
def test_adam_update_of_one_parameter_is_one_kernel(device: str,
                                                    rng: np.random.Generator) -> None:
    check_adam_is_one_kernel(ember.device(device), rng)


def test_mse_loss_reduces_in_the_kernel_of_its_prologue(blocked: ember.Device,
                                                        rng: np.random.Generator) -> None:
    a, b = rng.standard_normal((50, 8)), rng.standard_normal((50, 8))
    x, y = ember.tensor(a, device=blocked), ember.tensor(b, device=blocked)
    ember_fusion.reset_stats(blocked)
    got = ((x - y) ** 2).mean().item()
    assert ember_fusion.stats(blocked).kernels_launched == 1
    assert got == pytest.approx(np.mean((a - b) ** 2), rel=1e-12)


def test_matmul_with_bias_and_relu_epilogue_is_one_kernel(blocked: ember.Device,
                                                          rng: np.random.Generator) -> None:
    s = check_matmul_epilogue(blocked, rng)
    assert s.kernels_launched == 1
    assert s.last_groups[0].startswith("rows[matmul+add+clamp")


@pytest.mark.parametrize("inner", ["cpu,eager=0", "cpu,chunk=7,threads=2", "triton-interpret"])
def test_loss_and_its_gradient_are_two_kernels(inner: str, rng: np.random.Generator) -> None:
    """``(x ** 2).mean()`` and its gradient: the power rule's scalar bookkeeping (``1/N``,
    ``exponent - 1``, ``exponent != 0``) and the broadcast of the loss's gradient run before the
    row kernel instead of cutting it into eight kernels (a transformer step's loss)."""
    device = f"autodiff<fusion<{inner}>>"
    fused = f"fusion<{inner}>"
    a = rng.standard_normal((6, 5, 4)).astype(np.float32)
    x = ember.tensor(a, device=device, requires_grad=True)
    x.device.synchronize()
    ember_fusion.reset_stats(fused)
    loss = (x ** 2).mean()
    grads = loss.backward()
    got = grads[x].numpy()
    s = ember_fusion.stats(fused)
    # (on cpu with blocks of 7 the scalar ops are small enough to run eagerly: one kernel)
    assert s.kernels_launched <= 2 and s.flushes == 1, s.last_groups
    # (pow's gradient selects 0 where the base is 0: the last node is a where)
    assert s.last_groups[-1] == "rows[pow+mean+mul+pow+mul+where]"
    np.testing.assert_allclose(loss.item(), np.mean(a.astype(np.float64) ** 2), rtol=1e-6)
    np.testing.assert_allclose(got, 2 * a.astype(np.float64) / a.size, rtol=1e-6, atol=1e-9)


def test_decided_binary_ops_take_the_inner_fast_path(rng: np.random.Generator) -> None:
    """On an inner device with a fast path of eager binary ops (the Triton backends), a binary
    op on computed inputs that Fusion decided to run eagerly goes through it: right values, a
    tensor of the fusion device, nothing recorded; a pending input is still recorded."""
    device = "fusion<triton-interpret>"
    dev = ember.device(device)
    assert dev.dispatch_binary is not None
    a, b = (rng.standard_normal((9, 7)).astype(np.float32) for _ in range(2))
    x, y = ember.tensor(a, device=device), ember.tensor(b, device=device)
    for _ in range(3):  # recorded alone once, then decided eager; the inner plan is made
        (x * y).numpy()
    calls = []
    inner_fast = dev.backend._inner_binary
    dev.backend._inner_binary = lambda op, p, q: calls.append(op.name) or inner_fast(op, p, q)
    try:
        ember_fusion.reset_stats(device)
        z = x * y
        assert calls == ["mul"] and z.device is dev
        assert ember_fusion.stats(device).ops_recorded == 0
        np.testing.assert_allclose(z.numpy(), a.astype(np.float64) * b, rtol=1e-6)
        w = (x + 1) * y  # x + 1 is pending: the product is recorded with it
        np.testing.assert_allclose(w.numpy(), (a.astype(np.float64) + 1) * b, rtol=1e-6)
        assert calls == ["mul"]
    finally:
        dev.backend._inner_binary = inner_fast
