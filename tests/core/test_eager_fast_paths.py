"""The short eager paths (fitting matmul, int/slice indexing, narrow/chunk) compute what the
general paths compute and keep their errors."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import DeviceMismatchError

X = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)


def test_matmul_of_fitting_matrices_on_two_devices_names_op_and_devices() -> None:
    from ember.testing.cases.errors import peer_device

    a = ember.ones(3, 3, device=peer_device(ember.device("cpu")))  # other hardware
    b = ember.ones(3, 3, device="autodiff<cpu>")
    with pytest.raises(DeviceMismatchError, match=r"matmul: tensors are on different devices: "
                                                  r"cpu-peer and autodiff<cpu>"):
        a @ b
    # a cpu tensor is a constant of autodiff<cpu> (the same hardware): the fast path lifts it
    c = ember.full((3, 3), 2.0)
    assert str((c @ b).device) == "autodiff<cpu>" and (c @ b).tolist() == [[6.0] * 3] * 3


@pytest.mark.parametrize("shapes", [((2, 3), (3, 4)), ((5, 2, 3), (5, 3, 4)), ((3,), (3, 2)),
                                    ((2, 2, 3), (3, 4)), ((4,), (4,))])
def test_matmul_matches_numpy_on_fast_and_general_shapes(shapes: tuple[tuple[int, ...], ...]
                                                         ) -> None:
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    got = (ember.tensor(a) @ ember.tensor(b)).numpy()
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("key", [3, -1, 0, (1, 2), (1, slice(None), -1), slice(3, 0, -2),
                                 (slice(None), 2), (slice(0, 0),), (2, 3, 4), ()])
@pytest.mark.parametrize("device", ["cpu", "autodiff<cpu>"])
def test_int_and_slice_keys_match_numpy(key: object, device: str) -> None:
    got = ember.tensor(X, device=device)[key].numpy()
    assert got.shape == X[key].shape
    np.testing.assert_array_equal(got, X[key])


@pytest.mark.parametrize("key", [4, -5, (0, 5)])
def test_out_of_range_int_key_names_axis_and_size(key: object) -> None:
    with pytest.raises(IndexError, match="out of bounds for axis"):
        ember.tensor(X)[key]


def test_gradient_of_an_int_index_lands_in_its_row() -> None:
    x = ember.tensor(X, device="autodiff<cpu>", requires_grad=True)
    grads = (x[2] * 3.0).sum().backward()
    expected = np.zeros_like(X)
    expected[2] = 3.0
    np.testing.assert_array_equal(grads[x].numpy(), expected)


def test_chunk_and_narrow_match_numpy_and_whole_narrow_is_the_tensor() -> None:
    t = ember.tensor(X)
    pieces = t.chunk(3, 1)
    assert [p.shape for p in pieces] == [(4, 2, 6), (4, 2, 6), (4, 1, 6)]
    np.testing.assert_array_equal(pieces[2].numpy(), X[:, 4:5])
    np.testing.assert_array_equal(t.narrow(2, 1, 4).numpy(), X[:, :, 1:5])
    assert t.narrow(0, 0, 4) is t
