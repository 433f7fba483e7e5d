"""``fusion<opencl:0>``: kernel counts of the issue's programs against numpy float64 oracles, and
random op programs fused against unfused ``opencl:0``."""

from __future__ import annotations

from typing import Any

import ember
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

ember_fusion = pytest.importorskip("ember_fusion")
from ember_fusion import testing as programs  # noqa: E402  (after the importorskip)
from ember_fusion.testing import chain, chain_oracle  # noqa: E402

FUSED = "fusion<opencl:0>"
#: every group through the generator, lone ops included
GENERATED = "fusion<opencl:0,min_nodes=1>"




@pytest.fixture
def fused(cl_device: Any) -> ember.Device:
    dev = ember.device(FUSED)
    dev.synchronize()  # leave nothing other tests recorded in this thread's stream
    ember_fusion.reset_stats(dev)
    return dev


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def test_seven_op_chain_is_one_kernel(fused: ember.Device, rng: np.random.Generator) -> None:
    a = rng.standard_normal(1000).astype(np.float32)
    x = ember.tensor(a, device=fused)
    ember_fusion.reset_stats(fused)
    got = chain(x).numpy()
    s = ember_fusion.stats(fused)
    assert s.kernels_launched == 1
    assert s.last_groups == ("rows[mul+add+clamp+mul+sub+sigmoid+mul]",)
    source = next(k.source for k in fused.backend.kernel_cache.values())
    assert source.count("__kernel") == 1 and source.count("out0[") == 1  # one store
    np.testing.assert_allclose(got, chain_oracle(a), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("shape", [(37, 11), (6, 300)])  # a work-item / a work-group per row
def test_row_softmax_is_at_most_two_kernels(fused: ember.Device, rng: np.random.Generator,
                                            shape: tuple[int, int]) -> None:
    a = rng.standard_normal(shape) * 3
    x = ember.tensor(a, device=fused)
    ember_fusion.reset_stats(fused)
    got = x.softmax(dim=-1).numpy()
    assert ember_fusion.stats(fused).kernels_launched <= 2
    e = np.exp(a - a.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=1e-12, atol=1e-15)


def test_adam_update_of_one_parameter_is_one_kernel(fused: ember.Device,
                                                    rng: np.random.Generator) -> None:
    programs.check_adam_is_one_kernel(fused, rng)


def test_layer_norm_and_mse_loss_are_one_kernel_each(fused: ember.Device,
                                                     rng: np.random.Generator) -> None:
    a, b = rng.standard_normal((50, 70)), rng.standard_normal((50, 70))
    x, y = ember.tensor(a, device=fused), ember.tensor(b, device=fused)
    ember_fusion.reset_stats(fused)
    got = ember.nn.functional.layer_norm(x, (70,)).numpy()
    stats = ember_fusion.stats(fused)  # opencl's own layer_norm kernel, run eagerly
    assert (stats.kernels_launched, stats.eager_ops) == (0, 1)
    want = (a - a.mean(1, keepdims=True)) / np.sqrt(a.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    ember_fusion.reset_stats(fused)
    assert ((x - y) ** 2).mean().item() == pytest.approx(np.mean((a - b) ** 2), rel=1e-12)
    assert ember_fusion.stats(fused).kernels_launched == 1


def test_matmul_epilogue_and_reductions_over_rows(fused: ember.Device,
                                                  rng: np.random.Generator) -> None:
    stats = programs.check_matmul_epilogue(fused, rng, column_sum=True)
    assert stats.last_groups[0].startswith("rows[matmul+add+clamp")


def test_arg_reductions_and_int_chains_match_the_oracle(rng: np.random.Generator,
                                                        cl_device: Any) -> None:
    a = rng.integers(-50, 50, (9, 130)).astype(np.int32)
    x = ember.tensor(a, device=GENERATED)
    np.testing.assert_array_equal(((x * 3) % 7 - x // 4).argmax(dim=1).numpy(),
                                  ((a * 3) % 7 - a // 4).argmax(1))
    np.testing.assert_array_equal(((x > 0) & (x < 20)).any(dim=1, keepdim=True).numpy(),
                                  ((a > 0) & (a < 20)).any(1, keepdims=True))
    f = ember.tensor(a.astype(np.float32), device=GENERATED)
    np.testing.assert_array_equal((f.abs() - 3).argmin().numpy(), np.argmin(np.abs(a) - 3))


# 80 (was 200): test_fusion_layers.py's 500 layer programs cover reductions, rows and
# matmul epilogues; these cover free elementwise compositions over broadcast shapes
@settings(max_examples=80, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(case=programs.random_program([FUSED, GENERATED], max_steps=8, max_keep=2))
def test_random_programs_agree_fused_and_unfused(cl_device: Any,
                                                 case: programs.RandomProgram) -> None:
    programs.check_random_program(case, "opencl:0")
