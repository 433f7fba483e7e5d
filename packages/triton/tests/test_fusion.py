"""The Triton fusion compiler on the interpreter: kernel counts and values against numpy float64.

Counts are Triton launches (``compiler.launches``), not only Fusion's groups: a group that
needed a second kernel (a combine pass, a matmul head run by the backend) counts twice.
"""

from __future__ import annotations

import ember
import ember_fusion
import numpy as np
import pytest
from ember_fusion.testing import (
    chain,
    chain_oracle,
    check_adam_is_one_kernel,
    check_matmul_epilogue,
)

DEV = "fusion<triton-interpret>"


@pytest.fixture
def fdev() -> ember.Device:
    d = ember.device(DEV)
    d.synchronize()  # leave nothing other tests recorded in this thread's stream
    return d


def _launches(d: ember.Device) -> int:
    return int(d.backend.compiler.launches)


def _rng() -> np.random.Generator:
    return np.random.default_rng(7)


@pytest.mark.parametrize("n", [1000, 70_000])
def test_seven_op_chain_is_one_kernel(fdev: ember.Device, n: int) -> None:
    a = _rng().standard_normal(n).astype(np.float32)
    x = ember.tensor(a, device=fdev)
    fdev.synchronize()
    ember_fusion.reset_stats(fdev)
    before = _launches(fdev)
    got = chain(x).numpy()
    s = ember_fusion.stats(fdev)
    assert s.kernels_launched == 1 and _launches(fdev) - before == 1
    assert s.last_groups == ("rows[mul+add+clamp+mul+sub+sigmoid+mul]",)
    np.testing.assert_allclose(got, chain_oracle(a), rtol=2e-6, atol=1e-6)


def test_seven_op_chain_matches_unfused_bit_for_bit(fdev: ember.Device) -> None:
    a = _rng().standard_normal((30, 17)).astype(np.float32)
    fused = chain(ember.tensor(a, device=fdev)).numpy()
    plain = chain(ember.tensor(a, device="triton-interpret")).numpy()
    np.testing.assert_array_equal(fused, plain)


@pytest.mark.parametrize("shape", [(37, 11), (3, 40_000)])
def test_row_softmax_is_at_most_two_kernels(fdev: ember.Device, shape: tuple[int, int]) -> None:
    a = _rng().standard_normal(shape) * 3
    x = ember.tensor(a, device=fdev)
    fdev.synchronize()
    before = _launches(fdev)
    got = x.softmax(dim=-1).numpy()
    assert _launches(fdev) - before <= 2
    e = np.exp(a - a.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=1e-12, atol=1e-300)


def test_adam_update_of_one_parameter_is_one_kernel(fdev: ember.Device) -> None:
    check_adam_is_one_kernel(fdev, _rng(), launches=lambda: _launches(fdev))


def test_matmul_with_bias_and_relu_epilogue_is_one_kernel(fdev: ember.Device) -> None:
    check_matmul_epilogue(fdev, _rng(), launches=lambda: _launches(fdev))


def test_float32_matmul_epilogue_with_log_softmax(fdev: ember.Device) -> None:
    rng = _rng()
    a = rng.standard_normal((50, 24)).astype(np.float32)
    w = rng.standard_normal((24, 10)).astype(np.float32)
    x, wt = ember.tensor(a, device=fdev), ember.tensor(w, device=fdev)
    fdev.synchronize()
    before = _launches(fdev)
    got = (x @ wt).log_softmax(-1).numpy()
    assert _launches(fdev) - before == 1
    z = a.astype(np.float64) @ w.astype(np.float64)
    want = z - z.max(1, keepdims=True)
    want = want - np.log(np.exp(want).sum(1, keepdims=True))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_mse_loss_reduces_across_rows_in_one_kernel(fdev: ember.Device) -> None:
    rng = _rng()
    a, b = rng.standard_normal((50, 8)), rng.standard_normal((50, 8))
    x, y = ember.tensor(a, device=fdev), ember.tensor(b, device=fdev)
    fdev.synchronize()
    before = _launches(fdev)
    got = ((x - y) ** 2).mean().item()
    assert _launches(fdev) - before == 1
    assert got == pytest.approx(np.mean((a - b) ** 2), rel=1e-12)


def test_column_sums_over_many_programs_combine_partials(fdev: ember.Device) -> None:
    a = _rng().standard_normal((3000, 7))
    x = ember.tensor(a, device=fdev)
    fdev.synchronize()
    before = _launches(fdev)
    s, mx = (x * 2).sum(dim=0), (x * 2).amax(dim=0)
    got_s, got_mx = s.numpy(), mx.numpy()
    assert _launches(fdev) - before == 3  # the block kernel and one combine per reduction
    np.testing.assert_allclose(got_s, (2 * a).sum(axis=0), rtol=1e-12)
    np.testing.assert_array_equal(got_mx, (2 * a).max(axis=0))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_many_partials_are_reduced_by_the_split_column_kernel(
        dtype: type, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hundreds of programs' partials (a bias gradient's column sum on a GPU) are summed by the
    eager reduction, split down the columns, before the combine kernel finishes the mean."""
    d = ember.device("fusion<triton-interpret,limit=4>")
    d.synchronize()
    monkeypatch.setattr(d.backend.inner.backend, "split_reductions", True)
    monkeypatch.setattr(d.backend.inner.backend, "reduce_chunk", 64)
    a = _rng().standard_normal((300, 3)).astype(dtype)
    x = ember.tensor(a, device=d)
    s, mean, mx = (x * 2).sum(dim=0), (x * 3).mean(dim=0), (x + 1).amax(dim=0)
    np.testing.assert_allclose(s.numpy(), (2 * a).sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(mean.numpy(), (3 * a).mean(axis=0), rtol=1e-5)
    np.testing.assert_array_equal(mx.numpy(), (a + 1).max(axis=0))


def test_layer_norm_of_long_rows_is_one_kernel(fdev: ember.Device) -> None:
    # written out in primitives (F.layer_norm itself is handed to the Triton backend's own
    # layer_norm kernel, which Fusion does not count): the fused group is one kernel
    a = _rng().standard_normal((2, 30_000))
    x = ember.tensor(a, device=fdev)
    fdev.synchronize()
    before = _launches(fdev)
    centred = x - x.mean(dim=-1, keepdim=True)
    got = (centred * ((centred * centred).mean(dim=-1, keepdim=True) + 1e-5).rsqrt()).numpy()
    assert _launches(fdev) - before == 1
    mu = a.mean(1, keepdims=True)
    var = ((a - mu) ** 2).mean(1, keepdims=True)
    np.testing.assert_allclose(got, (a - mu) / np.sqrt(var + 1e-5), rtol=1e-10, atol=1e-12)


def test_half_and_bool_values_stay_exact_in_registers(fdev: ember.Device) -> None:
    rng = _rng()
    a = rng.standard_normal((20, 6)).astype(np.float16)
    b = rng.standard_normal((20, 6)).astype(np.float16)

    def prog(x: ember.Tensor, y: ember.Tensor) -> ember.Tensor:
        m = (x > y) | (x < 0)
        return ember.where(m, x * y, (x + y).exp()) - 1

    plain = prog(ember.tensor(a, device="triton-interpret"),
                 ember.tensor(b, device="triton-interpret")).numpy()
    fused = prog(ember.tensor(a, device=fdev), ember.tensor(b, device=fdev)).numpy()
    np.testing.assert_array_equal(fused, plain)


def test_identical_sources_compile_once(fdev: ember.Device) -> None:
    lib = fdev.backend.compiler.be.library
    x = ember.tensor(_rng().standard_normal((9, 4)), device=fdev)
    (x * 3.0 - 1.0).numpy()
    count = len(lib._generated)
    y = ember.tensor(_rng().standard_normal((9, 4)), device=fdev)
    (y * 3.0 - 1.0).numpy()
    assert len(lib._generated) == count


def test_argmax_is_refused_and_runs_unfused(fdev: ember.Device) -> None:
    a = _rng().standard_normal((6, 5))
    x = ember.tensor(a, device=fdev)
    ember_fusion.reset_stats(fdev)
    got = (x * 2).argmax(dim=1).numpy()
    stats = ember_fusion.stats(fdev)
    # argmax is never recorded: it runs eagerly (and the product it reads with it, or before
    # it in a flush of its own)
    assert stats.eager_ops >= 1 and stats.kernels_launched <= 1
    assert stats.eager_ops + stats.ops_recorded == 2
    np.testing.assert_array_equal(got, a.argmax(axis=1))
