"""Printing, host conversion, DLPack and the error messages of core."""

from __future__ import annotations

import numpy as np
import pytest

import ember


def test_repr_shows_values_dtype_and_device():
    text = repr(ember.tensor([[2.0, 3.0], [4.0, 5.0]]) + 1)
    assert text.startswith("tensor([[3., 4.],")
    assert "dtype=float32" in text and "device='cpu'" in text


def test_large_tensors_print_summarised_with_shape():
    text = repr(ember.arange(10_000))
    assert "..." in text and "shape=(10000,)" in text and len(text) < 400


def test_ragged_lists_name_the_offending_position():
    with pytest.raises(ember.ShapeError, match=r"\[1\]\[2\]"):
        ember.tensor([[[1, 2], [3, 4], [5, 6]], [[1, 2], [3, 4], [5]]])


def test_mismatched_shapes_name_both_shapes():
    with pytest.raises(ember.ShapeError, match=r"\(2, 3\).*\(4,\)"):
        ember.ones(2, 3) + ember.ones(4)
    with pytest.raises(ember.ShapeError, match=r"\(2, 3\).*\(4, 5\)"):
        ember.ones(2, 3) @ ember.ones(4, 5)


def test_python_types_map_to_pytorch_default_dtypes():
    assert ember.tensor([1.0]).dtype is ember.float32
    assert ember.tensor([1]).dtype is ember.int64
    assert ember.tensor([True]).dtype is ember.bool_
    assert ember.tensor(np.zeros(2, np.float64)).dtype is ember.float64


def test_host_conversions_agree_with_numpy():
    data = np.arange(6, dtype=np.int32).reshape(2, 3)
    x = ember.tensor(data)
    np.testing.assert_array_equal(x.numpy(), data)
    assert x.tolist() == data.tolist()
    assert x[1, 2].item() == 5
    assert x.to(ember.float16).dtype is ember.float16
    np.testing.assert_array_equal(np.asarray(x.to(ember.bfloat16).float()), data)


def test_dlpack_round_trips_through_numpy():
    x = ember.arange(12, dtype=ember.float32).reshape(3, 4)
    arr = np.from_dlpack(x)
    np.testing.assert_array_equal(arr, np.arange(12, dtype=np.float32).reshape(3, 4))
    back = ember.from_dlpack(arr)
    assert back.shape == (3, 4) and back.dtype is ember.float32
    assert back.tolist() == x.tolist()


def test_same_seed_gives_same_numbers_and_state_resumes():
    g = ember.Generator(123)
    a = ember.randn(4, generator=g)
    state = g.get_state()
    b = ember.rand(4, generator=g)
    g2 = ember.Generator(0)
    g2.set_state(state)
    assert ember.rand(4, generator=g2).tolist() == b.tolist()
    assert ember.randn(4, generator=ember.Generator(123)).tolist() == a.tolist()
    assert ember.randn(4, generator=ember.Generator(124)).tolist() != a.tolist()


def test_setitem_is_functional():
    x = ember.zeros(2, 3)
    y = x
    alias_before = y.numpy().copy()
    x[0, 1:] = ember.tensor([5.0, 6.0])
    assert x.tolist() == [[0.0, 5.0, 6.0], [0.0, 0.0, 0.0]]
    np.testing.assert_array_equal(alias_before, np.zeros((2, 3)))
    z = ember.zeros(3)
    w = z + 0
    z[ember.tensor([True, False, True])] = 1.0
    assert z.tolist() == [1.0, 0.0, 1.0] and w.tolist() == [0.0, 0.0, 0.0]


def test_promotion_follows_array_api_within_kind_and_pytorch_across():
    cases = [(ember.int8, ember.uint8, ember.int16), (ember.float16, ember.bfloat16, ember.float32),
             (ember.int32, ember.float16, ember.float16), (ember.bool_, ember.int8, ember.int8),
             (ember.int16, ember.int64, ember.int64), (ember.uint8, ember.int64, ember.int64)]
    for a, b, out in cases:
        assert ember.promote_types(a, b) is out
        assert (ember.ones(2, dtype=a) + ember.ones(2, dtype=b)).dtype is out
    assert (ember.ones(2, dtype=ember.int32) * 1.5).dtype is ember.float32
    assert (ember.ones(2, dtype=ember.int8) * 2).dtype is ember.int8


def test_negative_zero_scalar_is_not_the_cached_positive_zero() -> None:
    # 0.0 and -0.0 compare equal, so a scalar cache keyed by value alone handed ``x * -0.0``
    # the tensor made for ``x * 0.0``: the signs of the zeros must follow IEEE (numpy)
    x_np = np.array([-1.0, 2.0])
    x = ember.tensor(x_np)
    for value in (0.0, -0.0, 0.0):
        got = (x * value).numpy()
        want = x_np * value
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_array_equal(np.signbit(x.clamp(min=-0.0).numpy()),
                                  np.signbit(np.maximum(x_np, -0.0)))


def test_contiguous_gives_a_row_major_payload() -> None:
    """``contiguous()`` (as in PyTorch): a transposed view comes back as a row-major copy,
    which is what ``_data`` and DLPack consumers see; a dense tensor keeps its payload."""
    a = np.arange(12.0).reshape(3, 4)
    x = ember.tensor(a)
    t = x.T
    assert not t._data.flags.c_contiguous  # the cpu payload is a numpy view
    c = t.contiguous()
    assert c._data.flags.c_contiguous
    np.testing.assert_array_equal(c.numpy(), a.T)
    np.testing.assert_array_equal(np.from_dlpack(c), a.T)
    assert x.contiguous()._data is x._data
