"""The OpenCL kernels against numpy float64: the paths the conformance suite's small cases do
not reach (strided views, multi-pass reductions, bitonic padding, tiled matmul edges)."""

from __future__ import annotations

import ember
import numpy as np
import pytest
from conftest import check
from ember._apply import apply
from ember.ops import elementwise as ew
from ember.testing import _reference as reference

RNG = np.random.default_rng(0)


def _t(a: np.ndarray, dev: object) -> ember.Tensor:
    return ember.tensor(a, device=dev)


def test_binary_op_broadcasts_over_transposed_views(cl_device: object) -> None:
    a = RNG.standard_normal((5, 7)).astype(np.float32)
    b = RNG.standard_normal((7,)).astype(np.float32)
    x = _t(a, cl_device).permute(1, 0)  # a strided view, no copy
    check(x * _t(b, cl_device).reshape(7, 1) + 1.0, a.T.astype(np.float64) * b[:, None] + 1)


def test_flipped_and_stepped_slices_read_the_right_elements(cl_device: object) -> None:
    a = np.arange(60, dtype=np.int64).reshape(3, 4, 5)
    x = _t(a, cl_device)
    check(x[::-1, 1::2, ::-2], a[::-1, 1::2, ::-2])
    check(x.flip(1).sum(dim=2), a[:, ::-1].sum(axis=2))


@pytest.mark.parametrize("shape,dims", [((300_000,), (0,)), ((3, 70_000), (1,)),
                                        ((50, 40, 30), (0, 2)), ((2000, 3), (0,))])
def test_sum_mean_max_match_numpy_on_every_reduction_path(cl_device: object, shape: tuple,
                                                          dims: tuple) -> None:
    a = RNG.standard_normal(shape).astype(np.float32)
    x, a64 = _t(a, cl_device), a.astype(np.float64)
    for got, want, atol in ((x.sum(dim=dims), a64.sum(axis=dims), 1e-3),
                            (x.mean(dim=dims), a64.mean(axis=dims), 1e-6),
                            (x.amax(dim=dims), a64.max(axis=dims), 1e-6)):
        check(got, want, rtol=1e-5, atol=atol)


def test_argmax_of_long_row_picks_the_first_maximum(cl_device: object) -> None:
    a = np.zeros(200_000, np.float32)
    a[[7, 150_000]] = 3.0
    assert ember.tensor(a, device=cl_device).argmax().item() == 7
    a[99_999] = np.nan  # nan wins, as in numpy and PyTorch
    assert ember.tensor(a, device=cl_device).argmax().item() == 99_999


def test_max_propagates_nan(cl_device: object) -> None:
    a = np.array([[1.0, np.nan, 3.0], [1.0, 2.0, 0.0]], np.float32)
    check(_t(a, cl_device).amax(dim=1), np.array([np.nan, 2.0]))


def test_sort_is_stable_with_nan_last_for_non_power_of_two_rows(cl_device: object) -> None:
    a = RNG.integers(0, 5, (4, 37)).astype(np.float32)
    a[1, 3] = np.nan
    v, i = ember.sort(_t(a, cl_device), dim=1, stable=True)
    idx = np.argsort(a, axis=1, kind="stable")
    check(i, idx)
    check(v, np.take_along_axis(a, idx, axis=1).astype(np.float64))


def test_descending_sort_keeps_ties_in_index_order(cl_device: object) -> None:
    a = np.array([2, 1, 2, 3, 1], np.int32)
    _, i = ember.sort(_t(a, cl_device), descending=True, stable=True)
    check(i, np.array([3, 0, 2, 1, 4]))


def test_topk_along_first_axis(cl_device: object) -> None:
    a = RNG.standard_normal((9, 4)).astype(np.float32)
    v, i = ember.topk(_t(a, cl_device), 3, dim=0)
    idx = np.argsort(-a, axis=0, kind="stable")[:3]
    check(i, idx)
    check(v, np.take_along_axis(a, idx, axis=0).astype(np.float64))


@pytest.mark.parametrize("shape", [(1, 1, 1), (33, 17, 65), (64, 128, 32)])
def test_matmul_matches_numpy_for_tile_edges(cl_device: object, shape: tuple[int, ...]) -> None:
    m, k, n = shape
    a, b = (RNG.standard_normal(s).astype(np.float32) for s in ((m, k), (k, n)))
    check(_t(a, cl_device) @ _t(b, cl_device), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_batched_matmul_of_transposed_and_broadcast_operands(cl_device: object) -> None:
    a = RNG.standard_normal((3, 1, 6, 5)).astype(np.float32)
    b = RNG.standard_normal((2, 6, 4)).astype(np.float32)
    x = _t(a, cl_device).transpose(-1, -2)  # [3, 1, 5, 6]
    out = x @ _t(b, cl_device)
    check(out, np.swapaxes(a, -1, -2).astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_integer_matmul_is_exact(cl_device: object) -> None:
    a = RNG.integers(-50, 50, (7, 9))
    b = RNG.integers(-50, 50, (9, 3))
    check(_t(a, cl_device) @ _t(b, cl_device), a @ b)


def test_conv2d_with_stride_padding_dilation_groups_matches_naive_loops(cl_device: object) -> None:
    import ember.functional as F

    x = RNG.standard_normal((2, 4, 9, 8)).astype(np.float32)
    w = RNG.standard_normal((6, 2, 3, 3)).astype(np.float32)
    out = F.conv2d(_t(x, cl_device), _t(w, cl_device), stride=2, padding=1, dilation=2, groups=2)
    check(out, reference.conv2d(x.astype(np.float64), w.astype(np.float64), (2, 2), (1, 1),
                                (2, 2), 2), rtol=1e-4, atol=1e-4)


def test_conv_transpose2d_is_the_adjoint_of_conv2d(cl_device: object) -> None:
    import ember.functional as F

    # <conv(x), y> == <x, conv_transpose(y)> for the same weight
    x = RNG.standard_normal((1, 3, 7, 7)).astype(np.float32)
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    cx = F.conv2d(_t(x, cl_device), _t(w, cl_device), stride=2, padding=1)
    y = RNG.standard_normal(cx.shape).astype(np.float32)
    ty = F.conv_transpose2d(_t(y, cl_device), _t(w, cl_device), stride=2, padding=1)
    assert ty.shape == x.shape
    lhs = float((cx.numpy().astype(np.float64) * y).sum())
    rhs = float((x.astype(np.float64) * ty.numpy()).sum())
    assert abs(lhs - rhs) < 1e-3 * max(1.0, abs(lhs))


def test_max_pool2d_returns_pytorch_flat_indices(cl_device: object) -> None:
    import ember.functional as F

    a = RNG.standard_normal((1, 1, 4, 4)).astype(np.float32)
    v, i = F.max_pool2d(_t(a, cl_device), 2, return_indices=True)
    blocks = a.reshape(2, 2, 2, 2).transpose(0, 2, 1, 3).reshape(2, 2, 4)
    check(v, blocks.max(axis=-1)[None, None].astype(np.float64))
    flat = a.reshape(-1)
    assert np.array_equal(flat[i.numpy().reshape(-1)], v.numpy().reshape(-1))


def test_scatter_add_sums_duplicate_indices(cl_device: object) -> None:
    x = np.zeros((2, 4), np.float32)
    idx = np.array([[0, 0, 3], [1, 1, 1]])
    src = np.ones((2, 3), np.float32)
    out = ember.scatter_add(_t(x, cl_device), 1, _t(idx, cl_device), _t(src, cl_device))
    check(out, np.array([[2.0, 0, 0, 1], [0, 3, 0, 0]]))


def test_same_seed_gives_same_numbers_and_uniform_moments(cl_device: object) -> None:
    a = ember.rand(100_000, generator=ember.Generator(3), device=cl_device).numpy()
    b = ember.rand(100_000, generator=ember.Generator(3), device=cl_device).numpy()
    assert np.array_equal(a, b)
    assert 0.0 <= a.min() and a.max() < 1.0
    assert abs(a.mean() - 0.5) < 0.01 and abs(a.var() - 1 / 12) < 0.005
    n = ember.randn(100_000, generator=ember.Generator(4), device=cl_device).numpy()
    assert abs(n.mean()) < 0.02 and abs(n.std() - 1.0) < 0.02


def test_two_draws_of_one_generator_differ(cl_device: object) -> None:
    g = ember.Generator(5)
    a = ember.randint(0, 1000, (64,), generator=g, device=cl_device).numpy()
    b = ember.randint(0, 1000, (64,), generator=g, device=cl_device).numpy()
    assert not np.array_equal(a, b) and a.min() >= 0 and a.max() < 1000


def test_integer_floordiv_and_remainder_follow_python(cl_device: object) -> None:
    a = np.array([7, -7, 7, -7, 5], np.int64)
    b = np.array([2, 2, -2, -2, 0], np.int64)
    x, y = _t(a, cl_device), _t(b, cl_device)
    # Note: the kernels give 0 for a zero divisor rather than trapping the device; ember's
    # `//` and `%` refuse one before launching them
    check(apply(ew.floordiv, x, y), np.array([3, -4, -4, 3, 0]))
    check(apply(ew.remainder, x, y), np.array([1, 1, -1, -1, 0]))
    check(x[:4] // y[:4], np.array([3, -4, -4, 3]))
    with pytest.raises(ember.DivisionByZeroError, match="floordiv"):
        x // y


def test_nonzero_lists_coordinates_in_c_order(cl_device: object) -> None:
    a = np.array([[0, 1, 0], [2, 0, 3]], np.int32)
    check(ember.nonzero(_t(a, cl_device)), np.argwhere(a))


def test_a_missing_device_index_lists_the_devices_that_exist() -> None:
    from ember_opencl import OpenCLBackend

    try:
        from ember_opencl.runtime import select_devices

        n = len(select_devices())
    except Exception:
        pytest.skip("no OpenCL platform")
    if n == 0:
        pytest.skip("no OpenCL device")
    with pytest.raises(IndexError, match=r"opencl:7.*opencl:0 = "):
        OpenCLBackend(7)


def test_ember_device_with_a_missing_index_names_the_existing_ones(cl_device: object) -> None:
    from ember._errors import DeviceUnavailableError

    with pytest.raises(DeviceUnavailableError, match=r"opencl:7.*opencl:0"):
        ember.device("opencl:7")


def test_vectorised_matmul_path_handles_batches_and_transposed_a(cl_device: object) -> None:
    a = RNG.standard_normal((3, 16, 8)).astype(np.float32)
    b = RNG.standard_normal((3, 16, 24)).astype(np.float32)
    out = _t(a, cl_device).transpose(-1, -2) @ _t(b, cl_device)  # M=8, N=24: float8 kernel
    check(out, np.swapaxes(a, -1, -2).astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_clamp_with_both_bounds_and_masked_fill_on_a_broadcast_mask(cl_device: object) -> None:
    a = RNG.standard_normal((4, 5)).astype(np.float32)
    x = _t(a, cl_device).permute(1, 0)  # the general (strided) elementwise kernel
    check(x.clamp(-0.5, 0.5), np.clip(a.T.astype(np.float64), -0.5, 0.5))
    mask = np.array([True, False, True, False])
    check(ember.masked_fill(x, _t(mask, cl_device), 7.0), np.where(mask, 7.0, a.T))
