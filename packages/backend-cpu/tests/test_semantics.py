"""PyTorch semantics where numpy differs or is easy to get wrong, checked on hand values."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from ember import _dtype as dt
from ember import ops

from ember_cpu import CpuBackend
from ember_cpu.creation import generator

K = CpuBackend().kernels
BF16 = np.dtype(ml_dtypes.bfloat16)


def test_remainder_and_floordiv_take_the_sign_of_the_divisor():
    a, b = np.array([-7, 7, -7, 7]), np.array([2, 2, -2, -2])
    assert K[ops.remainder](a, b).tolist() == [1, 1, -1, -1]
    assert K[ops.floordiv](a, b).tolist() == [-4, 3, 3, -4]
    af, bf = a.astype(np.float32), b.astype(np.float32)
    assert K[ops.remainder](af, bf).tolist() == [1.0, 1.0, -1.0, -1.0]


def test_round_halves_to_even_and_keeps_ints():
    assert K[ops.round](np.array([0.5, 1.5, 2.5, -0.5, -1.5])).tolist() == [0, 2, 2, -0, -2]
    ints = np.array([3, -4], np.int16)
    for name in ("round", "floor", "ceil", "trunc"):
        out = K[ops.registry[name]](ints)
        assert out.dtype == np.int16 and out.tolist() == [3, -4]


def test_integer_pow_with_negative_exponents_truncates_like_pytorch():
    base = np.array([2, -2, 1, -1, -1, 3, 0])
    exp = np.array([-1, -3, -5, -3, -2, 2, 0])
    assert K[ops.pow](base, exp).tolist() == [0, 0, 1, -1, 1, 9, 1]


def test_sign_of_ints_floats_and_nan():
    assert K[ops.sign](np.array([-3, 0, 5], np.int8)).tolist() == [-1, 0, 1]
    out = K[ops.sign](np.array([-2.0, 0.0, 3.0, np.nan]))
    assert out[:3].tolist() == [-1.0, 0.0, 1.0] and math.isnan(out[3])


def test_var_applies_the_correction():
    x = np.array([[1.0, 2.0, 3.0, 4.0]])
    assert K[ops.var](x, dims=(1,), keepdim=False, correction=1).tolist() == [5 / 3]
    assert K[ops.var](x, dims=(1,), keepdim=True, correction=0).tolist() == [[1.25]]
    one = K[ops.var](np.array([2.0]), dims=(0,), keepdim=False, correction=1)
    assert math.isnan(float(one))  # n - correction == 0, without numpy's warning


def test_argmax_takes_the_first_of_ties_and_of_nans():
    x = np.array([[1.0, 3.0, 3.0], [np.nan, 5.0, np.nan]])
    assert K[ops.argmax](x, dim=1, keepdim=False).tolist() == [1, 0]
    assert K[ops.argmin](np.array([2, 1, 1]), dim=None, keepdim=False).tolist() == 1
    full = K[ops.argmax](x, dim=None, keepdim=True)
    assert full.shape == (1, 1) and full.dtype == np.int64


def test_max_and_min_propagate_nan():
    x = np.array([[1.0, np.nan], [2.0, 0.0]])
    assert np.isnan(K[ops.max](x, dims=(1,), keepdim=False)[0])
    assert K[ops.min](x, dims=(0,), keepdim=False)[1] != K[ops.min](x, dims=(0,),
                                                                     keepdim=False)[1]
    assert K[ops.maximum](np.array([np.nan]), np.array([1.0]))[0] != 1.0


def test_full_reductions_are_arrays_of_exact_dtype():
    s = K[ops.sum](np.ones((2, 2), np.float32), dims=(0, 1), keepdim=False)
    assert isinstance(s, np.ndarray) and s.shape == () and s.dtype == np.float32


@pytest.mark.parametrize("low", [np.float16, BF16])
def test_half_reductions_accumulate_in_float32(low):
    x = np.full(4096, 0.1, low)
    total = float(K[ops.sum](x, dims=(0,), keepdim=False))
    assert abs(total - 4096 * float(x[0])) / total < 1e-2  # half-precision running sums stall
    assert K[ops.mean](x, dims=(0,), keepdim=False).dtype == x.dtype
    m = K[ops.matmul](np.full((1, 4096), 0.1, low), np.ones((4096, 1), low))
    assert m.dtype == x.dtype and abs(float(m[0, 0]) - total) / total < 1e-2


def test_sort_is_stable_ascending_and_descending():
    x = np.array([2.0, 1.0, 2.0, np.nan, 1.0, 2.0])
    v, i = K[ops.sort](x, dim=0, descending=False, stable=True)
    assert i.tolist() == [1, 4, 0, 2, 5, 3] and np.isnan(v[-1])
    v, i = K[ops.sort](x, dim=0, descending=True, stable=True)
    assert i.tolist() == [3, 0, 2, 5, 1, 4] and np.isnan(v[0])
    assert i.dtype == np.int64


def test_sort_of_bfloat16_keeps_the_dtype():
    x = np.array([3, 1, 2], BF16)
    v, i = K[ops.sort](x, dim=0, descending=False, stable=False)
    assert v.dtype == BF16 and v.astype(np.float32).tolist() == [1, 2, 3]
    assert i.tolist() == [1, 2, 0]


def test_topk_is_sorted_from_the_extreme():
    x = np.array([[1, 5, 3, 5, 0]], np.int32)
    v, i = K[ops.topk](x, k=3, dim=1, largest=True)
    assert v.tolist() == [[5, 5, 3]] and i.tolist() == [[1, 3, 2]]
    v, i = K[ops.topk](x, k=2, dim=1, largest=False)
    assert v.tolist() == [[0, 1]] and i.tolist() == [[4, 0]]


@pytest.mark.parametrize("sl", [slice(None, None, -1), slice(8, 2, -2), slice(None, 3, -1),
                                slice(5, None, -3), slice(1, 9, 3), slice(-2, -9, -1),
                                slice(0, None, -1), slice(3, 3, 1)])
def test_slice_with_params_from_slice_indices(sl):
    x = np.arange(10)
    start, stop, step = sl.indices(10)
    got = K[ops.slice](x, starts=(start,), stops=(stop,), steps=(step,))
    assert got.tolist() == x[sl].tolist()


def test_slice_is_a_view():
    x = np.arange(12).reshape(3, 4)
    got = K[ops.slice](x, starts=(2, 0), stops=(-1, 4), steps=(-1, 2))
    assert got.tolist() == [[8, 10], [4, 6], [0, 2]] and np.shares_memory(got, x)


def test_scatter_add_accumulates_duplicates_and_leaves_its_input():
    x = np.zeros((2, 3), np.float32)
    index = np.array([[0, 0, 2, 0]])
    src = np.array([[1.0, 2.0, 3.0, 4.0], [9.0, 9.0, 9.0, 9.0]], np.float32)
    out = K[ops.scatter_add](x, index, src, dim=1)  # src is wider than index: only [0, :4]
    assert out.tolist() == [[7.0, 0.0, 3.0], [0.0, 0.0, 0.0]]
    assert not x.any()


def test_scatter_gather_index_select_masked_fill():
    x = np.arange(6).reshape(2, 3)
    idx = np.array([[2, 0], [1, 1]])
    assert K[ops.gather](x, idx, dim=1).tolist() == [[2, 0], [4, 4]]
    src = np.array([[10, 20], [30, 40]])
    assert K[ops.scatter](x, idx, src, dim=1).tolist() == [[20, 1, 10], [3, 40, 5]]
    assert K[ops.index_select](x, np.array([2, 2, 0]), dim=1).tolist() == [[2, 2, 0], [5, 5, 3]]
    mask = np.array([True, False, True])
    assert K[ops.masked_fill](x, mask, value=-1).tolist() == [[-1, 1, -1], [-1, 4, -1]]


def test_tril_triu_work_on_the_last_two_axes():
    x = np.ones((2, 3, 3), np.int8)
    assert K[ops.tril](x, k=0)[1].tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    assert K[ops.triu](x, k=1)[0].tolist() == [[0, 1, 1], [0, 0, 1], [0, 0, 0]]


def test_nonzero_gives_coordinates_in_c_order():
    out = K[ops.nonzero](np.array([[0, 1], [2, 0]]))
    assert out.dtype == np.int64 and out.tolist() == [[0, 1], [1, 0]]
    assert K[ops.nonzero](np.zeros((3, 2))).shape == (0, 2)


def test_pad_expand_permute_flip_cat_contiguous():
    x = np.arange(6.0).reshape(2, 3)
    padded = K[ops.pad](x, pad=((1, 0), (0, 2)), value=-1.0)
    assert padded.shape == (3, 5) and padded[0].tolist() == [-1] * 5
    assert padded[1, :3].tolist() == [0, 1, 2]
    e = K[ops.expand](x[:1], shape=(4, 3))
    assert e.shape == (4, 3) and np.shares_memory(e, x)
    assert K[ops.permute](x, dims=(1, 0)).tolist() == x.T.tolist()
    assert K[ops.flip](x, dims=(0, 1)).tolist() == [[5, 4, 3], [2, 1, 0]]
    assert K[ops.cat](x, x, dim=0).shape == (4, 3)
    c = K[ops.contiguous](x.T)
    assert c.flags.c_contiguous and c.tolist() == x.T.tolist()


def test_clamp_with_either_bound():
    x = np.array([-2, 0, 5], np.int32)
    assert K[ops.clamp](x, min=-1, max=None).tolist() == [-1, 0, 5]
    assert K[ops.clamp](x, min=None, max=1).dtype == np.int32
    assert np.isnan(K[ops.clamp](np.array([np.nan]), min=0.0, max=1.0)[0])


def test_erf_is_accurate_to_double_precision():
    z = np.concatenate([np.linspace(-7, 7, 4001), [1e-300, -1e-8, 0.0]])
    want = np.array([math.erf(v) for v in z])
    np.testing.assert_allclose(K[ops.erf](z), want, rtol=1e-14, atol=1e-300)
    assert K[ops.erf](np.array([np.inf, -np.inf])).tolist() == [1.0, -1.0]


def test_shifts_and_bitwise_ops():
    i32 = np.array([1, 3], np.int32), np.array([2, 1], np.int32)
    assert K[ops.left_shift](*i32).tolist() == [4, 6]
    assert K[ops.right_shift](np.array([-8], np.int64), np.array([1], np.int64)).tolist() == [-4]
    assert K[ops.bitwise_not](np.array([True, False])).tolist() == [False, True]


def test_random_numbers_depend_only_on_seed_and_offset():
    a = K[ops.rand](shape=(1000,), dtype=dt.float32, seed=7, offset=3)
    b = K[ops.rand](shape=(1000,), dtype=dt.float32, seed=7, offset=3)
    c = K[ops.rand](shape=(1000,), dtype=dt.float32, seed=7, offset=4)
    d = K[ops.rand](shape=(1000,), dtype=dt.float32, seed=8, offset=3)
    assert np.array_equal(a, b) and not np.array_equal(a, c) and not np.array_equal(a, d)
    assert 0.0 <= a.min() and a.max() < 1.0 and abs(a.mean() - 0.5) < 0.05
    n = K[ops.randn](shape=(20000,), dtype=dt.float64, seed=1, offset=0)
    assert abs(n.mean()) < 0.05 and abs(n.std() - 1) < 0.05
    r = K[ops.randint](low=-3, high=4, shape=(5000,), dtype=dt.int8, seed=2, offset=9)
    assert r.min() == -3 and r.max() == 3
    assert np.array_equal(generator(5, 1).random(4), generator(5, 1).random(4))


@pytest.mark.parametrize("d", [dt.float16, dt.bfloat16])
def test_half_precision_rand_stays_below_one(d):
    x = K[ops.rand](shape=(200000,), dtype=d, seed=0, offset=0).astype(np.float32)
    assert x.max() < 1.0 and x.min() >= 0.0 and len(np.unique(x)) > 200


def test_arange_float_counts_like_pytorch():
    got = K[ops.arange](start=0.0, stop=1.0, step=0.1, dtype=dt.float32)
    assert len(got) == 10 and got.dtype == np.float32
    assert K[ops.arange](start=5, stop=0, step=-2, dtype=dt.int64).tolist() == [5, 3, 1]


def test_cast_float_to_bool_and_bfloat16_round_trip():
    assert K[ops.cast](np.array([0.0, 0.5, -2.0]), dtype=dt.bool_).tolist() == [False, True, True]
    assert K[ops.cast](np.array([0, 1.5], BF16), dtype=dt.bool_).tolist() == [False, True]
    b = K[ops.cast](np.array([1.0, 2.5]), dtype=dt.bfloat16)
    assert b.dtype == BF16 and K[ops.cast](b, dtype=dt.float64).tolist() == [1.0, 2.5]
