"""The matmul kernels of ``wgpu:N`` (`ember_wgpu.linalg`): each path against numpy float64,
on tile edges, strided and broadcast operands, and 16-bit floats."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import ember

RNG = np.random.default_rng(5)


@pytest.fixture
def prefer(wg_device: object) -> Iterator[Any]:
    """Sets ``linalg.prefer`` for one test."""
    from ember_wgpu import linalg

    yield lambda p: setattr(linalg, "prefer", p)
    linalg.prefer = None


def test_wide_float_outputs_take_the_128_tile_and_narrow_ones_the_simple_kernel(
        wg_device: object) -> None:
    from ember_wgpu import linalg

    f32, i32 = np.dtype(np.float32), np.dtype(np.int32)
    assert linalg.path(None, 4096, 4096, 4096, f32) == "tile128"
    assert linalg.path(None, 4096, 4096, 4096, np.dtype(np.float16)) == "tile128"
    assert linalg.path(None, 100, 4096, 64, f32) == "tile64"
    assert linalg.path(None, 4096, 4096, 64, i32) == "tile64"
    assert linalg.path(None, 4096, 8, 64, f32) == "simple"


@pytest.mark.parametrize("path", ["tile128", "tile64", "simple"])
@pytest.mark.parametrize("m,k,n", [(128, 128, 128), (130, 77, 257), (1, 9, 300), (257, 1, 5)])
def test_every_path_covers_tile_edges(prefer: Any, wg_device: object, path: str, m: int, k: int,
                                      n: int) -> None:
    prefer(path)
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    got = (ember.tensor(a, device=wg_device) @ ember.tensor(b, device=wg_device)).numpy()
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_tile128_reads_transposed_and_broadcast_batches(wg_device: object) -> None:
    a = RNG.standard_normal((3, 1, 300, 140)).astype(np.float32)
    b = RNG.standard_normal((2, 200, 140)).astype(np.float32)
    x = ember.tensor(a, device=wg_device)
    y = ember.tensor(b, device=wg_device).permute(0, 2, 1)  # (2, 140, 200), a strided view
    got = (x @ y).numpy()
    want = a.astype(np.float64) @ b.transpose(0, 2, 1)
    assert got.shape == (3, 2, 300, 200)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_tile128_16_bit_floats_accumulate_in_f32(wg_device: Any, dtype: str) -> None:
    edt = getattr(ember, dtype)
    if not wg_device.supports(edt):
        pytest.skip(f"the adapter has no {dtype}")
    a = RNG.standard_normal((160, 300)).astype(np.float32)
    b = RNG.standard_normal((300, 140)).astype(np.float32)
    x = ember.tensor(a, device=wg_device).to(edt)
    y = ember.tensor(b, device=wg_device).to(edt)
    a16, b16 = x.to(ember.float32).numpy(), y.to(ember.float32).numpy()
    got = (x @ y).to(ember.float32).numpy()
    # one rounding of an f32 sum to 16 bits: half an ulp of the result
    want = a16.astype(np.float64) @ b16.astype(np.float64)
    rel = 2.0 ** (-11 if dtype == "float16" else -8)
    np.testing.assert_allclose(got, want, rtol=rel, atol=1e-3)


def _f16_operands(shape_a: tuple[int, ...], shape_b: tuple[int, ...]
                  ) -> tuple[np.ndarray, np.ndarray]:
    # eighths in [-1, 1]: every product and partial sum exact in float32, so the result is
    # the exact product rounded once to float16
    a = (RNG.integers(-8, 9, shape_a) / 8).astype(np.float16)
    b = (RNG.integers(-8, 9, shape_b) / 8).astype(np.float16)
    return a, b


def test_cooperative_matrix_fits_only_aligned_dense_float16(wg_device: Any) -> None:
    from ember_wgpu import coopmat

    rt = wg_device._backend.runtime

    def fits(sa: tuple[int, ...], sb: tuple[int, ...], dt: Any = np.float16,
             transpose_b: bool = False, offset: int = 0) -> bool:
        a = rt.empty(sa, np.dtype(dt))
        b = rt.empty(sb, np.dtype(dt))
        if transpose_b:
            b = rt.empty((*sb[:-2], sb[-1], sb[-2]), np.dtype(dt))
            b = b.view(sb, (*b.strides[:-2], b.strides[-1], b.strides[-2]), 0)
        if offset:
            a = a.view(a.shape, a.strides, offset)
        batch = tuple(np.broadcast_shapes(sa[:-2], sb[:-2]))
        return coopmat.eligible(a, b, batch)

    assert fits((64, 32), (32, 96))
    assert fits((3, 64, 32), (32, 96))  # one batch axis, b broadcast
    assert not fits((64, 32), (32, 96), np.float32)
    assert not fits((48, 32), (32, 96))  # M not a multiple of 32
    assert not fits((64, 24), (24, 96))  # K not a multiple of 16
    assert not fits((64, 32), (32, 96), transpose_b=True)
    assert not fits((64, 32), (32, 96), offset=4)  # not on a 16-byte line
    assert not fits((2, 3, 64, 32), (2, 3, 32, 96))  # two batch axes


def test_a_refused_cooperative_matrix_shader_leaves_the_tiled_kernels(
        wg_device: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # where the adapter has no cooperative matrices (lavapipe), pretend it has: the self-check
    # meets the shader compiler's refusal, says so, and float16 matmuls stay right
    rt = wg_device._backend.runtime
    if rt.coop:
        pytest.skip("this adapter has cooperative matrices (the next test checks them)")
    monkeypatch.setattr(rt, "coop", True)
    monkeypatch.setattr(rt, "coop_status", None)
    a, b = _f16_operands((64, 32), (32, 96))
    got = (ember.tensor(a, device=wg_device) @ ember.tensor(b, device=wg_device)).numpy()
    assert rt.coop_status.startswith("off: "), rt.coop_status
    np.testing.assert_array_equal(got, (a.astype(np.float64) @ b.astype(np.float64)
                                        ).astype(np.float16))


def test_cooperative_matrix_products_where_the_adapter_has_them(wg_device: Any) -> None:
    from ember_wgpu import coopmat

    rt = wg_device._backend.runtime
    a, b = _f16_operands((3, 64, 48), (48, 96))
    x, y = ember.tensor(a, device=wg_device), ember.tensor(b, device=wg_device)
    got = (x @ y).numpy()
    if not coopmat.usable(rt):
        pytest.skip(f"cooperative matrices on {rt.name}: {rt.coop_status}")
    np.testing.assert_array_equal(got, (a.astype(np.float64) @ b.astype(np.float64)
                                        ).astype(np.float16))
    # a batched left operand broadcast against one right operand, and the other way round
    got = (ember.tensor(a[0], device=wg_device) @ ember.tensor(
        np.stack([b, -b]), device=wg_device)).numpy()
    want = a[0].astype(np.float64) @ np.stack([b, -b]).astype(np.float64)
    np.testing.assert_array_equal(got, want.astype(np.float16))
