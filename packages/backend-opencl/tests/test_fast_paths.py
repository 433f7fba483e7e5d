"""The register-blocked matmul, the vector row reductions and the 16-bit float storage against
independent oracles (numpy float64, numpy's float16, ml_dtypes' bfloat16)."""

from __future__ import annotations

import ember
import ml_dtypes
import numpy as np
import pytest
from conftest import check

RNG = np.random.default_rng(1)


def _t(a: np.ndarray, dev: object) -> ember.Tensor:
    return ember.tensor(a, device=dev)


# -- matmul: 8x16 blocks plus general-kernel edges --------------------------------------------

@pytest.mark.parametrize("m,k,n", [(8, 5, 16), (19, 33, 50), (64, 288, 3136), (9, 7, 15),
                                   (24, 1300, 40)])  # the last: K in three accumulated blocks
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_blocked_matmul_covers_edge_rows_and_columns(cl_device: object, m: int, k: int, n: int,
                                                     dtype: type) -> None:
    a = RNG.standard_normal((m, k)).astype(dtype)
    b = RNG.standard_normal((k, n)).astype(dtype)
    tol = 1e-4 if dtype == np.float32 else 1e-11
    check(_t(a, cl_device) @ _t(b, cl_device), a.astype(np.float64) @ b, rtol=tol, atol=tol)


@pytest.mark.parametrize("k", [12, 1100])
def test_blocked_matmul_of_transposed_b_and_broadcast_batch(cl_device: object, k: int) -> None:
    a = RNG.standard_normal((2, 1, 17, k)).astype(np.float32)
    w = RNG.standard_normal((3, 40, k)).astype(np.float32)  # [out, in] like Linear.weight
    out = _t(a, cl_device) @ _t(w, cl_device).transpose(-1, -2)
    check(out, a.astype(np.float64) @ np.swapaxes(w, -1, -2), rtol=1e-4, atol=1e-4)


def test_integer_matmul_on_blockable_shapes_is_exact(cl_device: object) -> None:
    a = RNG.integers(-1000, 1000, (16, 30))
    b = RNG.integers(-1000, 1000, (30, 32))
    check(_t(a, cl_device) @ _t(b, cl_device), a @ b)


# -- vector row reductions ----------------------------------------------------------------------

@pytest.mark.parametrize("shape,dims", [((1 << 20) + 3, (0,)), ((5, 100_003), (1,)),
                                        ((300, 777), (1,)), ((6, 4, 70), (1, 2))])
def test_vector_row_reductions_match_numpy(cl_device: object, shape: object,
                                           dims: tuple) -> None:
    a = RNG.standard_normal(shape).astype(np.float32)
    a.flat[11] = np.nan
    x = _t(a, cl_device)
    a64 = a.astype(np.float64)
    check(x.sum(dim=dims), a64.sum(axis=dims), rtol=1e-5, atol=1e-3)
    check(x.amax(dim=dims), a64.max(axis=dims))
    check(x.amin(dim=dims), a64.min(axis=dims))
    i = RNG.integers(-100, 100, shape)
    check(_t(i, cl_device).sum(dim=dims), i.sum(axis=dims))
    check(_t(i, cl_device).amax(dim=dims), i.max(axis=dims))


def test_long_float_sum_keeps_float32_accuracy(cl_device: object) -> None:
    a = np.full(1 << 22, 0.1, np.float32)  # naive float32 accumulation drifts by ~1e-2
    got = _t(a, cl_device).sum().item()
    assert abs(got - a.astype(np.float64).sum()) < 1e-6 * a.size * 0.1


# -- 16-bit floats: stored as bits, computed in float, rounded on store ---------------------------

HALF = [(ember.float16, np.float16), (ember.bfloat16, ml_dtypes.bfloat16)]


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint16)


@pytest.mark.parametrize("dt,npdt", HALF)
def test_16_bit_floats_round_trip_bit_exactly(cl_device: object, dt: object, npdt: type) -> None:
    bits = np.arange(1 << 16, dtype=np.uint16)
    a = bits.view(npdt)
    got = _t(a, cl_device).reshape(256, 256).permute(1, 0).contiguous().numpy()
    assert got.dtype == np.dtype(npdt)
    np.testing.assert_array_equal(_bits(got), bits.reshape(256, 256).T)


@pytest.mark.parametrize("dt,npdt", HALF)
def test_16_bit_float_arithmetic_rounds_to_nearest_even_once(cl_device: object, dt: object,
                                                              npdt: type) -> None:
    a = (RNG.standard_normal(4096) * 30).astype(npdt)
    b = (RNG.standard_normal(4096) * 30).astype(npdt)
    x, y = _t(a, cl_device), _t(b, cl_device)
    f32 = (a.astype(np.float32), b.astype(np.float32))
    for got, exact in [(x * y, f32[0] * f32[1]), (x + y, f32[0] + f32[1])]:
        np.testing.assert_array_equal(_bits(got.numpy()), _bits(exact.astype(npdt)))
    c = _t(RNG.standard_normal(4096).astype(np.float32), cl_device).to(dt)
    src = c.to(ember.float32).numpy()
    np.testing.assert_array_equal(_bits(c.numpy()), _bits(src.astype(npdt)))


@pytest.mark.parametrize("dt,npdt", HALF)
def test_16_bit_float_sums_accumulate_in_float(cl_device: object, dt: object,
                                               npdt: type) -> None:
    # in 16-bit accumulation 1 + 1 + ... stalls at 2048 (float16) or 256 (bfloat16)
    x = ember.ones((8192,), device=cl_device, dtype=dt)
    assert x.sum().item() == 8192.0
    assert x.cumsum(0).numpy().astype(np.float64)[-1] == 8192.0


@pytest.mark.parametrize("dt,npdt", HALF)
def test_16_bit_float_matmul_and_sort(cl_device: object, dt: object, npdt: type) -> None:
    a = RNG.standard_normal((20, 30)).astype(npdt)
    b = RNG.standard_normal((30, 17)).astype(npdt)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    got = (_t(a, cl_device) @ _t(b, cl_device)).numpy().astype(np.float64)
    assert np.allclose(got, exact, rtol=2e-2, atol=2e-2)
    v, i = ember.sort(_t(a, cl_device), dim=1, stable=True)
    np.testing.assert_array_equal(i.numpy(), np.argsort(a.astype(np.float32), axis=1,
                                                         kind="stable"))
    np.testing.assert_array_equal(_bits(v.numpy()), _bits(np.sort(a, axis=1)))


@pytest.mark.parametrize("shape,dims", [((4096, 37), (0,)), ((3, 500, 40), (1,)),
                                        ((1000, 16), (0,)), ((7, 5, 33), (0,))])
def test_column_reductions_match_numpy(cl_device: object, shape: tuple, dims: tuple) -> None:
    a = RNG.standard_normal(shape).astype(np.float32)
    a.flat[35] = np.nan
    x = _t(a, cl_device)
    a64 = a.astype(np.float64)
    check(x.sum(dim=dims), a64.sum(axis=dims), rtol=1e-5, atol=1e-4)
    check(x.mean(dim=dims), a64.mean(axis=dims), rtol=1e-5, atol=1e-5)
    check(x.amax(dim=dims), a64.max(axis=dims))
    check(x.amin(dim=dims), a64.min(axis=dims))
    i = RNG.integers(-100, 100, shape).astype(np.int32)
    check(_t(i, cl_device).sum(dim=dims), i.astype(np.int64).sum(axis=dims))
    check(_t(i, cl_device).amax(dim=dims), i.max(axis=dims))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.int16])
@pytest.mark.parametrize("shape", [(1 << 20) + 5, (37, 1000), (3, 17)])
def test_vector_arg_reductions_pick_the_first_extreme(cl_device: object, dtype: type,
                                                      shape: object) -> None:
    a = RNG.integers(-20, 20, shape).astype(dtype)  # many ties across lanes and chunks
    x = _t(a, cl_device)
    dim = a.ndim - 1
    check(x.argmax(dim=dim), a.argmax(axis=dim))
    check(x.argmin(dim=dim), a.argmin(axis=dim))
    if a.dtype.kind == "f":
        a.flat[[a.size // 2, a.size // 3]] = np.nan  # the first nan wins, as in numpy
        x = _t(a, cl_device)
        check(x.argmax(dim=dim), a.argmax(axis=dim))
        check(x.argmin(dim=dim), a.argmin(axis=dim))


@pytest.mark.parametrize("shape,dim", [((100_003,), 0), ((33, 1000), 1), ((300, 7), 0),
                                       ((5, 33), 1)])
@pytest.mark.parametrize("descending", [False, True])
def test_merge_sort_is_stable_and_orders_nan_like_pytorch(cl_device: object, shape: tuple,
                                                          dim: int, descending: bool) -> None:
    a = RNG.integers(-50, 50, shape).astype(np.float32)  # many ties
    a.flat[[1, a.size // 2]] = np.nan
    v, i = ember.sort(_t(a, cl_device), dim=dim, descending=descending, stable=True)
    # the oracle: numpy's stable argsort of a key with nan mapped past +-inf
    key = np.where(np.isnan(a), 1e300, a.astype(np.float64))
    idx = np.argsort(-key if descending else key, axis=dim, kind="stable")
    check(i, idx)
    check(v, np.take_along_axis(a, idx, axis=dim).astype(np.float64))
    ai = np.nan_to_num(a, nan=77).astype(np.int64)
    vi, ii = ember.sort(_t(ai, cl_device), dim=dim, descending=descending, stable=True)
    idx = np.argsort(-ai if descending else ai, axis=dim, kind="stable")
    check(ii, idx)
    check(vi, np.take_along_axis(ai, idx, axis=dim))


@pytest.mark.parametrize("shape,dim", [((300, 1000), 1), ((64, 3, 77), 2), ((100, 50), 1)])
@pytest.mark.parametrize("correction", [0, 1])
def test_row_variance_matches_numpy(cl_device: object, shape: tuple, dim: int,
                                    correction: int) -> None:
    a = (RNG.standard_normal(shape) * 3 + 1000).astype(np.float32)  # a large mean
    got = _t(a, cl_device).var(dim=dim, correction=correction)
    check(got, a.astype(np.float64).var(axis=dim, ddof=correction), rtol=1e-4, atol=1e-4)
    d = RNG.standard_normal(shape)
    check(_t(d, cl_device).var(dim=dim, correction=correction, keepdim=True),
          d.var(axis=dim, ddof=correction, keepdims=True), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("shape,dim", [((50, 40), 0), ((3, 20, 64), 1), ((6, 5, 4), 0)])
def test_index_select_of_rows_with_negative_and_repeated_indices(cl_device: object,
                                                                 shape: tuple,
                                                                 dim: int) -> None:
    a = RNG.standard_normal(shape).astype(np.float32)
    n = shape[dim]
    idx = np.array([0, n - 1, -1, 2, 2, -n], np.int64)
    got = _t(a, cl_device).index_select(dim, _t(idx, cl_device))
    check(got, np.take(a, idx % n, axis=dim).astype(np.float64))
