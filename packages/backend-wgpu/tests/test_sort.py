"""Sorting on ``wgpu:0`` against numpy's stable argsort: the rank sort of short lines and the
bitonic sort of long ones (`ember_wgpu.sort`), each forced onto lengths the other would take,
with ties, nan, signed zeros, both directions, every dtype, any axis and batches of lines."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from ember_wgpu import sort as wsort

import ember

RNG = np.random.default_rng(11)
LENGTHS = [1, 2, 3, 63, 64, 65, 1000, 4097, 2**16 + 3]


def _t(a: np.ndarray, dev: object) -> ember.Tensor:
    return ember.tensor(a, device=dev)


def oracle(a: np.ndarray, dim: int, descending: bool) -> tuple[np.ndarray, np.ndarray]:
    """numpy's stable order: nan last ascending and first descending, ties by index both ways
    (descending sorts the reversed line stably and reverses back, as the CPU backend does)."""
    if not descending:
        idx = np.argsort(a, axis=dim, kind="stable")
    else:
        n = a.shape[dim]
        idx = (n - 1) - np.flip(np.argsort(np.flip(a, dim), axis=dim, kind="stable"), dim)
    return np.take_along_axis(a, idx, dim), idx


def assert_sorted_like_numpy(x: ember.Tensor, a: np.ndarray, dim: int = -1,
                             descending: bool = False) -> None:
    """Indices exactly numpy's stable ones; values equal to the oracle's as float64, nan where
    it has nan, and each zero with the oracle's sign."""
    values, indices = x.sort(dim=dim, descending=descending, stable=True)
    want_v, want_i = oracle(a, dim, descending)
    got_i = indices.numpy()
    assert got_i.dtype == np.int64
    np.testing.assert_array_equal(got_i, want_i)
    got_v = values.numpy()
    assert got_v.dtype == a.dtype and got_v.shape == a.shape
    gv = got_v.astype(np.float64)
    wv = want_v.astype(np.float64)
    np.testing.assert_array_equal(gv, wv)  # nan where nan
    np.testing.assert_array_equal(np.signbit(gv), np.signbit(wv))


def ties(shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    """Few distinct values (many ties), with nan (of either sign and two payloads), -0.0,
    0.0 and the infinities among them."""
    a = RNG.integers(-3, 4, shape).astype(np.float32)
    flat = a.reshape(-1)
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7FC00001], np.uint32).view(np.float32)
    pick = RNG.random(flat.size) < 0.1
    flat[pick] = RNG.choice(nans, int(pick.sum()))
    flat[RNG.random(flat.size) < 0.15] = -0.0
    flat[RNG.random(flat.size) < 0.05] = np.inf
    flat[RNG.random(flat.size) < 0.05] = -np.inf
    return a.astype(dtype)


@pytest.fixture(params=["rank", "bitonic", "chosen"])
def kernel(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each kernel forced onto every length (the rank sort only up to 4097: it is
    quadratic), then the one `RANK_MAX` picks."""
    saved = wsort.RANK_MAX
    if request.param != "chosen":
        n = 1 << 30 if request.param == "rank" else 0
        wsort.RANK_MAX = {"CPU": n, "GPU": n}
    try:
        yield request.param
    finally:
        wsort.RANK_MAX = saved


def test_the_oracle_tells_an_unstable_order_apart() -> None:
    # the cases below fail on an unstable sort: their lines have ties whose stable order
    # differs from the reversed order a careless network gives
    a = ties((3, 65))
    _, idx = oracle(a, -1, False)
    _, rev = oracle(a[:, ::-1], -1, False)
    assert not np.array_equal(idx, 64 - rev)  # ties in reverse index order differ
    _, dsc = oracle(a, -1, True)
    assert not np.array_equal(dsc, np.flip(idx, -1))  # descending is not reversed ascending


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("n", LENGTHS)
def test_sort_with_ties_nan_and_signed_zeros_matches_numpy(wg_device: object, kernel: str,
                                                           n: int, descending: bool) -> None:
    if kernel == "rank" and n > 4097:
        pytest.skip("the rank sort is quadratic")
    a = ties((n,) if n > 5000 else (3, n))
    assert_sorted_like_numpy(_t(a, wg_device), a, -1, descending)


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("n", [65, 4097])
@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "bool",
                                   "float16"])
def test_every_dtype_sorts_stably(wg_device: object, kernel: str, dtype: str, n: int,
                                  descending: bool) -> None:
    dt = np.dtype(dtype)
    if dt.kind == "b":
        a = RNG.random((2, n)) < 0.5
    elif dt.kind == "f":
        a = ties((2, n), dt)
        a[0, :5] = [65504, -65504, 6e-8, -6e-8, 1e-4]  # float16's extremes and subnormals
    else:
        info = np.iinfo(dt)
        a = RNG.integers(-3, 4, (2, n)).astype(dt) if dt.kind == "i" else \
            RNG.integers(0, 5, (2, n)).astype(dt)
        a[0, :4] = [info.min, info.max, info.min, info.max]  # the keys' ends, tied
    if not ember.device("wgpu:0").supports(getattr(ember, dtype)):
        pytest.skip(f"the adapter lacks {dtype}")
    assert_sorted_like_numpy(_t(a, wg_device), a, -1, descending)


def test_bfloat16_sorts_by_its_values(wg_device: object, kernel: str) -> None:
    a = ties((2, 1000))
    x = _t(a, wg_device).to(ember.bfloat16)
    values, indices = x.sort(dim=-1, stable=True)
    want_v, want_i = oracle(a, -1, False)  # the values are bfloat16's exactly
    np.testing.assert_array_equal(indices.numpy(), want_i)
    np.testing.assert_array_equal(values.to(ember.float32).numpy(), want_v)


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_any_axis_of_a_strided_view(wg_device: object, kernel: str, dim: int,
                                    descending: bool) -> None:
    # a transposed, sliced view: no line is contiguous, and the other axes do not merge
    base = ties((40, 9, 1100))
    view = base[::2, :, 3:1003].transpose(1, 2, 0)  # (9, 1000, 20)
    x = _t(base, wg_device)[::2, :, 3:1003].permute(1, 2, 0)
    assert_sorted_like_numpy(x, np.ascontiguousarray(view), dim, descending)


@pytest.mark.parametrize("shape", [(2000, 65), (3, 7, 1000), (5, 2, 3, 33), (1, 1, 4097),
                                   (300, 1)])
def test_batches_of_lines_sort_each_line_on_its_own(wg_device: object, kernel: str,
                                                    shape: tuple[int, ...]) -> None:
    # lines shorter than a tile share one: a line must never see its neighbours' values
    a = RNG.standard_normal(shape).astype(np.float32)
    a += np.arange(shape[0]).reshape(-1, *([1] * (len(shape) - 1))) * 0.01
    a[..., ::5] = np.round(a[..., ::5])
    assert_sorted_like_numpy(_t(a, wg_device), a, -1, False)
    assert_sorted_like_numpy(_t(a, wg_device), a, -1, True)


def test_empty_and_scalar_inputs(wg_device: object) -> None:
    for shape in [(0,), (3, 0), (0, 5)]:
        a = np.zeros(shape, np.float32)
        values, indices = _t(a, wg_device).sort(dim=-1)
        assert values.numpy().shape == shape and indices.numpy().shape == shape
    values, indices = _t(np.array(2.5, np.float32), wg_device).sort()
    assert values.item() == 2.5 and indices.item() == 0


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("n,k", [(4097, 4097), (4097, 4096), (4097, 1), (65, 64), (65, 63),
                                 (2**16 + 3, 2**16)])
def test_topk_near_the_whole_line(wg_device: object, n: int, k: int, largest: bool) -> None:
    a = ties((2, n) if n < 5000 else (n,))
    values, indices = _t(a, wg_device).topk(k, dim=-1, largest=largest)
    want_v, want_i = oracle(a, -1, largest)
    np.testing.assert_array_equal(indices.numpy(), want_i[..., :k])
    np.testing.assert_array_equal(values.numpy().astype(np.float64),
                                  want_v[..., :k].astype(np.float64))


def test_long_lines_take_the_bitonic_sort_in_few_dispatches(wg_device: object) -> None:
    # 2^16 + 3 pads to 2^17: one tile dispatch, then per stage 2^11 .. 2^17 its global
    # rounds of up to three steps (1, 1, 1, 2, 2, 2, 3) and one tile dispatch: 20 in all,
    # against the rank sort's one dispatch of 2^32 comparisons
    rt = ember.device("wgpu:0")._backend.runtime  # type: ignore[attr-defined]
    a = RNG.standard_normal(2**16 + 3).astype(np.float32)
    x = _t(a, wg_device)
    rt.flush()
    before = rt.dispatches
    values, _ = x.sort()
    assert rt.dispatches - before == 20
    np.testing.assert_array_equal(values.numpy(), np.sort(a))
    assert wsort.TILE == 1024 and wsort.rank_max(rt) < 2**16
