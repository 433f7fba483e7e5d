"""The elementwise maps' three kernel shapes (`ember_wgpu.strided`): the general walk, the flat
walk (one axis, operands dense or broadcast) and the ``vec4`` flat map (dense 32-bit operands
aligned to four elements), each checked against numpy and each seen to be the one taken."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import check

import ember

RNG = np.random.default_rng(7)


def _t(a: np.ndarray, dev: Any) -> ember.Tensor:
    return ember.tensor(a, device=dev)


@pytest.fixture
def sources(wg_device: Any, monkeypatch: Any) -> list[str]:
    """The WGSL of every dispatch recorded while the test runs."""
    rt = wg_device._backend.runtime
    seen: list[str] = []
    record = rt.record

    def spy(source: str, *args: Any) -> None:
        seen.append(source)
        record(source, *args)

    monkeypatch.setattr(rt, "record", spy)
    return seen


def _kind(src: str) -> str:
    if "array<vec4<" in src:
        return "vec4"
    return "walk" if "for (var d" in src else "flat"


@pytest.mark.parametrize("n", [4, 1024, 4099, 1 << 17])
def test_dense_float32_takes_vec4_loads_and_any_length_is_right(wg_device: Any,
                                                                sources: list[str],
                                                                n: int) -> None:
    a, b = RNG.standard_normal(n).astype(np.float32), RNG.standard_normal(n).astype(np.float32)
    got = (_t(a, wg_device) * _t(b, wg_device)) + 0.5
    check(got, a.astype(np.float64) * b + 0.5)
    kinds = {_kind(s) for s in sources if "b2" in s or "b1" in s}
    # a length that is no multiple of 4 takes the scalar flat kernel
    assert kinds == ({"vec4"} if n % 4 == 0 else {"flat"}), kinds


def test_offsets_off_a_multiple_of_four_take_the_scalar_kernel(wg_device: Any,
                                                               sources: list[str]) -> None:
    h = RNG.standard_normal(4104).astype(np.float32)
    x = _t(h, wg_device)
    got = x[1:4097] * 2.0  # a view starting at element 1: 16-byte loads would be misaligned
    check(got, h[1:4097].astype(np.float64) * 2)
    assert "flat" in {_kind(s) for s in sources}
    sources.clear()
    got = x[4:4100] * 2.0  # starting at element 4: aligned
    check(got, h[4:4100].astype(np.float64) * 2)
    assert "vec4" in {_kind(s) for s in sources}


@pytest.mark.parametrize("dtype", ["int32", "uint8", "bool"])
def test_32_bit_integers_and_bools_through_vec4(wg_device: Any, sources: list[str],
                                                dtype: str) -> None:
    if dtype == "bool":
        a, b = RNG.random(4096) < 0.5, RNG.random(4096) < 0.5
        check(_t(a, wg_device) ^ _t(b, wg_device), a ^ b)
        check((_t(a, wg_device) & _t(b, wg_device)) | _t(a, wg_device), (a & b) | a)
    else:
        a = RNG.integers(0, 200, 4096).astype(dtype)
        b = RNG.integers(1, 200, 4096).astype(dtype)
        check(_t(a, wg_device) * _t(b, wg_device) + _t(a, wg_device), a * b + a)  # wraps
        check(_t(a, wg_device) // _t(b, wg_device), a // b)
    assert "vec4" in {_kind(s) for s in sources}


def test_float16_and_broadcasts_over_inner_axes_keep_their_kernels(wg_device: Any,
                                                                   sources: list[str]) -> None:
    h = RNG.standard_normal((64, 48)).astype(np.float32)
    row = RNG.standard_normal(48).astype(np.float32)
    check(_t(h, wg_device) + _t(row, wg_device), h.astype(np.float64) + row)
    assert {_kind(s) for s in sources if "b2" in s} == {"walk"}  # a row broadcast: two axes
    sources.clear()
    check(_t(h, wg_device).T * 3.0, h.T.astype(np.float64) * 3)
    assert "walk" in {_kind(s) for s in sources}
    if wg_device.supports(ember.float16):
        sources.clear()
        x = h.astype(np.float16)
        check(_t(x, wg_device) * 2.0, x.astype(np.float64) * 2, rtol=1e-3, atol=1e-3)
        assert "vec4" not in {_kind(s) for s in sources}  # f16 storage: scalar loads


def test_a_fused_group_with_two_outputs_through_vec4(wg_device: Any, sources: list[str]) -> None:
    fdev = ember.device("fusion<wgpu:0>")
    h = RNG.standard_normal(8192).astype(np.float32)
    x = ember.tensor(h, device=fdev)
    y = (x * 1.5 + 0.25).relu()
    z = y.sigmoid() * y
    ys, zs = y.numpy(), z.numpy()
    v = np.maximum(h.astype(np.float64) * 1.5 + 0.25, 0)
    np.testing.assert_allclose(ys, v, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(zs, v / (1 + np.exp(-v)), rtol=1e-5, atol=1e-7)
    fused = [s for s in sources if "R1" in s]  # one kernel storing both results
    assert fused and all(_kind(s) == "vec4" for s in fused)


@pytest.mark.parametrize("wide,per,vec", [(64, 1, False), (256, 4, False), (128, 2, True)])
def test_every_map_shape_gives_the_same_numbers(wg_device: Any, monkeypatch: Any, wide: int,
                                                per: int, vec: bool) -> None:
    from ember_wgpu import strided

    monkeypatch.setattr(strided, "WIDE", wide)
    monkeypatch.setattr(strided, "PER", per)
    monkeypatch.setattr(strided, "VEC", vec)
    for n in (3, 256 * per * 4 + 8, 70001):
        h = RNG.standard_normal(n).astype(np.float32)
        x = _t(h, wg_device)
        check((x * x).exp() - x, np.exp(h.astype(np.float64) ** 2) - h, rtol=2e-5)
        m = _t(RNG.standard_normal((n, 3)).astype(np.float32), wg_device)
        check(m.T + 1.0, m.numpy().T.astype(np.float64) + 1)


@pytest.mark.parametrize("n", [8, 4096, 10003])
def test_the_linear_index_of_each_component(wg_device: Any, sources: list[str], n: int) -> None:
    # arange writes s0 + i * s1: each of a vec4's components must see its own index
    check(ember.arange(3, 3 + 2 * n, 2, dtype=ember.int32, device=wg_device),
          np.arange(3, 3 + 2 * n, 2))
    check(ember.arange(0.5, n / 4 + 0.5, 0.25, dtype=ember.float32, device=wg_device),
          np.arange(n) * 0.25 + 0.5)
    assert {_kind(s) for s in sources} == ({"vec4"} if n % 4 == 0 else {"flat"})


def test_submitting_after_every_kernel_keeps_each_its_parameters(wg_device: Any,
                                                                monkeypatch: Any) -> None:
    # EARLY = 1: the encoder is submitted after each dispatch and the parameter buffer is
    # rewritten while earlier submissions may still read it
    from ember_wgpu import runtime

    rt = wg_device._backend.runtime
    rt.flush()
    monkeypatch.setattr(runtime, "EARLY", 1)
    h = RNG.standard_normal(4100).astype(np.float32)
    x = _t(h, wg_device)
    want = h.astype(np.float64)
    for k in range(40):  # each op its own shape, offset and scalar
        x = x[1:] * (1.0 + k / 64) + float(k)
        want = want[1:] * np.float32(1.0 + k / 64) + k
    check(x, want, rtol=1e-5, atol=1e-4)
