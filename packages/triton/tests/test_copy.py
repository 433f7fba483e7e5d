"""Strided copies (``ember_triton._codegen.contiguous``: what ``reshape`` of a permuted view,
``contiguous()`` and every kernel that needs contiguous operands run) on the interpreter:
every permutation of ranks 2 to 5, every dtype, slices, flips and broadcasts, against numpy;
which kernel each layout takes (row copy, tiled transpose, batched tiles, elementwise), and
small program sizes so that tiles and row blocks are ragged and batches span programs.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator

import ember
import numpy as np
import pytest

from ember_triton import _codegen

rng = np.random.default_rng(5)
DTYPES = ["float32", "bfloat16", "float16", "float64", "int64", "int32", "int8", "uint8", "bool"]


@pytest.fixture
def small_programs(dev: ember.Device, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """256 elements a program (16 x 16 tiles): copies span many programs, with ragged ends."""
    monkeypatch.setattr(_codegen, "INTERPRET_COPY", 256)
    dev.backend.elementwise_plans.clear()  # plans made with the default sizes
    yield
    dev.backend.elementwise_plans.clear()


def _host(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    x = rng.integers(-100, 100, shape)
    if dtype == "bool":
        return x > 0
    if dtype == "uint8":
        return (x + 100).astype(np.uint8)
    return x.astype(np.float32 if dtype == "bfloat16" else dtype)


def _check(t: ember.Tensor, want: np.ndarray) -> None:
    got = t.contiguous()
    assert got.payload.strides == _codegen.contiguous_strides(want.shape)
    host = got.to(dtype=ember.float32).numpy() if got.dtype is ember.bfloat16 else got.numpy()
    np.testing.assert_array_equal(host, want)


@pytest.mark.parametrize("shape", [(5, 33), (3, 4, 20), (2, 3, 17, 18), (2, 3, 2, 5, 16)])
def test_every_permutation_matches_numpy(dev: ember.Device, small_programs: None,
                                         shape: tuple[int, ...]) -> None:
    x = _host(shape, "float32")
    t = ember.tensor(x, device=dev)
    for perm in itertools.permutations(range(len(shape))):
        _check(t.permute(*perm), x.transpose(perm))


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_in_each_kernel(dev: ember.Device, launches: Counter[str],
                                    small_programs: None, dtype: str) -> None:
    x = _host((3, 5, 24, 40), dtype)
    t = ember.tensor(x, device=dev, dtype=getattr(ember, dtype))
    if dtype == "bfloat16":
        x = t.to(dtype=ember.float32).numpy()
    cases = [((0, 2, 1, 3), "copy_rows"), ((0, 1, 3, 2), "transpose_batched"),
             ((3, 2, 1, 0), "transpose_batched")]
    for perm, kernel in cases:
        launches.clear()
        _check(t.permute(*perm), x.transpose(perm))
        assert launches[kernel] == 1
    launches.clear()
    _check(t.reshape(15, 960).transpose(0, 1), x.reshape(15, 960).T)
    assert launches["transpose"] == 1


def test_the_attention_head_split_and_merge_copy_rows(dev: ember.Device,
                                                      launches: Counter[str]) -> None:
    # [b, h, t, d] -> [b, t, h * d] and back: rows of d contiguous on both sides
    b, h, t, d = 2, 3, 40, 32
    x = rng.standard_normal((b, h, t, d)).astype(np.float32)
    y = ember.tensor(x, device=dev)
    launches.clear()
    merged = y.permute(0, 2, 1, 3).reshape(b, t, h * d)
    assert launches == Counter(copy_rows=1)
    np.testing.assert_array_equal(merged.numpy(), x.transpose(0, 2, 1, 3).reshape(b, t, h * d))
    launches.clear()
    split = merged.reshape(b, t, h, d).permute(0, 2, 1, 3).contiguous()
    assert launches == Counter(copy_rows=1)
    np.testing.assert_array_equal(split.numpy(), x)


@pytest.mark.parametrize("wide", [False, True])
def test_ragged_blocks_and_batches_across_programs(dev: ember.Device, launches: Counter[str],
                                                   small_programs: None,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   wide: bool) -> None:
    if wide:  # int64 offsets (from 2**31 elements on a GPU)
        monkeypatch.setattr(_codegen, "WIDE_FROM", 1)
    x = rng.standard_normal((3, 7, 19, 37))
    t = ember.tensor(x, device=dev)
    for perm in [(1, 0, 2, 3), (2, 0, 1, 3), (0, 3, 1, 2), (3, 1, 0, 2), (1, 3, 2, 0)]:
        _check(t.permute(*perm), x.transpose(perm))
    # rows longer than a block: several column blocks per row
    _check(ember.tensor(x.reshape(21, 703), device=dev)[::2], x.reshape(21, 703)[::2])
    assert launches["copy_rows"] == 3 and launches["transpose_batched"] == 3
    assert launches["ember_ew"] == 0


def test_slices_flips_and_broadcasts(dev: ember.Device, small_programs: None) -> None:
    x = rng.standard_normal((4, 6, 20, 18))
    t = ember.tensor(x, device=dev)
    _check(t[:, 1:5, 2:19, :], x[:, 1:5, 2:19, :])  # rows of 18 at row strides
    _check(t[::2, :, ::3], x[::2, :, ::3])
    _check(t[:, :, :, ::2].permute(0, 3, 1, 2), x[:, :, :, ::2].transpose(0, 3, 1, 2))
    _check(t.flip(1).permute(2, 1, 0, 3), np.flip(x, 1).transpose(2, 1, 0, 3))
    _check(t.flip(3).permute(3, 0, 1, 2), np.flip(x, 3).transpose(3, 0, 1, 2))
    row = ember.tensor(x[0, 0, 0], device=dev)
    _check(row.expand(5, 7, 18), np.broadcast_to(x[0, 0, 0], (5, 7, 18)))
    col = ember.tensor(x[0, :, :, :1], device=dev)
    _check(col.expand(6, 20, 300), np.broadcast_to(x[0, :, :, :1], (6, 20, 300)))
    _check(t.permute(0, 2, 1, 3)[:, :, :, :0], x.transpose(0, 2, 1, 3)[:, :, :, :0])


def test_ranks_beyond_the_batched_kernels_fall_back_to_the_elementwise_copy(
        dev: ember.Device, launches: Counter[str]) -> None:
    x = rng.standard_normal((2, 3, 2, 3, 2, 3, 16))
    perm = (5, 4, 3, 2, 1, 0, 6)
    _check(ember.tensor(x, device=dev).permute(*perm), x.transpose(perm))
    assert launches["ember_ew"] >= 1 and launches["copy_rows"] == 0
    launches.clear()
    y = rng.standard_normal((30, 4, 8))  # rows of 8: too short for the row copy
    _check(ember.tensor(y, device=dev).permute(1, 0, 2), y.transpose(1, 0, 2))
    assert launches["ember_ew"] == 1
