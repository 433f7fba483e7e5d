"""`ember.unique(x, dim=)` / `Tensor.unique(dim=)` against ``torch.unique(dim=)``: the distinct
slices along a dim in lexicographic order, with the inverse and the counts, on every backend."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import ember

DEVICES = ["cpu", "autodiff<cpu>", "fusion<cpu>", "opencl:0", "triton-interpret"]


def _device(name: str) -> Any:
    try:
        return ember.device(name)
    except (ember.DeviceUnavailableError, ValueError) as exc:
        pytest.skip(f"{name} is not available here: {exc}")


def _check(x: np.ndarray, dim: int, device: Any, method: bool = False) -> None:
    t = ember.tensor(x, device=device)
    got = (t.unique(dim=dim, return_inverse=True, return_counts=True) if method else
           ember.unique(t, dim=dim, return_inverse=True, return_counts=True))
    want = torch.unique(torch.from_numpy(x), dim=dim, return_inverse=True, return_counts=True)
    assert len(got) == 3
    for g, w, what in zip(got, want, ("values", "inverse", "counts"), strict=True):
        assert g.shape == tuple(w.shape), (what, g.shape, tuple(w.shape))
        np.testing.assert_array_equal(g.numpy(), w.numpy(), err_msg=what)
    assert got[1].dtype is got[2].dtype is ember.int64
    assert got[0].dtype is t.dtype and got[0].device is t.device


def _repeated(shape: tuple[int, ...], dim: int, dtype: str, seed: int) -> np.ndarray:
    """Slices along ``dim`` drawn with repeats from a few distinct ones (values 0..2, so
    slices often share a prefix and the later columns decide the order)."""
    rng = np.random.default_rng(seed)
    n = shape[dim]
    base_shape = list(shape)
    base_shape[dim] = 4
    base = rng.integers(0, 3, base_shape).astype(dtype)
    return np.ascontiguousarray(np.take(base, rng.integers(0, 4, n), axis=dim))


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
@pytest.mark.parametrize("name", DEVICES)
def test_unique_slices_match_torch(name: str, dim: int) -> None:
    dev = _device(name)
    for dtype in ("int64", "float32"):
        _check(_repeated((6, 5, 4), dim, dtype, seed=dim + 7), dim, dev, method=dtype == "int64")


@pytest.mark.parametrize("name", ["cpu", "autodiff<fusion<cpu>>"])
def test_unique_rows_of_bool_int32_and_float64_match_torch(name: str) -> None:
    dev = _device(name)
    _check(_repeated((9, 3), 0, "bool", 1), 0, dev)
    _check(_repeated((9, 3), 0, "int32", 2), 0, dev)
    _check(_repeated((4, 9), 1, "float64", 3) - 1.5, 1, dev)


def test_nan_slices_are_distinct_and_sort_last_and_negative_zero_equals_zero() -> None:
    # Note: PyTorch's comparator takes nan as equal to anything and moves on to the next
    # column, which is no order at all; ember sorts a nan last, as `sort` does
    x = np.array([[np.nan, 1.0], [0.0, -0.0], [np.nan, 1.0], [-0.0, 0.0], [1.0, 2.0]])
    values, inverse, counts = ember.unique(ember.tensor(x), dim=0, return_inverse=True,
                                           return_counts=True)
    np.testing.assert_array_equal(values.numpy(), [[0.0, 0.0], [1.0, 2.0], [np.nan, 1.0],
                                                   [np.nan, 1.0]])
    assert np.signbit(values.numpy()[0]).tolist() == [False, True]  # the first of its group
    assert inverse.tolist() == [2, 0, 3, 0, 1] and counts.tolist() == [2, 1, 1, 1]
    # without nan, the same rows in PyTorch's order
    _check(x[[1, 3, 4]], 0, ember.device("cpu"))


def test_only_the_values_unless_asked_and_an_empty_dim() -> None:
    x = ember.tensor([[3, 4], [1, 2], [3, 4]])
    out = ember.unique(x, dim=0)
    assert isinstance(out, ember.Tensor) and out.tolist() == [[1, 2], [3, 4]]
    values, counts = ember.unique(x, dim=1, return_counts=True)
    assert values.tolist() == [[3, 4], [1, 2], [3, 4]] and counts.tolist() == [1, 1]
    empty = ember.zeros(0, 3)
    values, inverse, counts = ember.unique(empty, dim=0, return_inverse=True,
                                           return_counts=True)
    assert values.shape == (0, 3) and inverse.shape == (0,) and counts.shape == (0,)


def test_bad_dims_are_errors_naming_dim_and_shape() -> None:
    with pytest.raises(IndexError, match=r"dim 2 is out of range for a tensor of 2 dim"):
        ember.unique(ember.ones(2, 3), dim=2)
    with pytest.raises(IndexError, match=r"unique: dim 0 is out of range for a 0-d tensor"):
        ember.unique(ember.tensor(5.0), dim=0)
    with pytest.raises(ember.ShapeError, match=r"unique: the slices along dim 0 of shape "
                                               r"\(3, 0\) are empty"):
        ember.unique(ember.zeros(3, 0), dim=0)
