"""Fused groups with reductions on ``fusion<wgpu:0>`` (`ember_wgpu.fusion_reduce`): each group
one dispatch, against numpy float64 oracles, through both kernel shapes (a work-group of lanes
per row with a workgroup-memory tree; one invocation per row for many short rows)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import ember

RNG = np.random.default_rng(11)


@pytest.fixture(scope="module")
def fdev(wg_device: object) -> Any:
    return ember.device("fusion<wgpu:0>")


@pytest.fixture(scope="module")
def rt(wg_device: object) -> Any:
    return ember.device("wgpu:0")._backend.runtime  # type: ignore[attr-defined]


def _one_dispatch(rt: Any, fn: Callable[[], Any]) -> list[np.ndarray]:
    """Run ``fn`` twice (the first makes constants and builds pipelines), read every tensor it
    returns, and check that the second run recorded exactly one dispatch."""
    def flat(out: Any) -> Iterator[Any]:
        yield from (out if isinstance(out, tuple) else (out,))

    for t in flat(fn()):
        t.numpy()
    before = rt.dispatches
    outs = list(flat(fn()))
    got = [t.numpy() for t in outs]  # every value leaves the same kernel
    assert rt.dispatches - before == 1
    return got


def _softmax64(a: np.ndarray, dim: int) -> np.ndarray:
    a = a.astype(np.float64)
    e = np.exp(a - a.max(dim, keepdims=True))
    return e / e.sum(dim, keepdims=True)


@pytest.mark.parametrize("shape", [(37, 300), (300, 9), (5, 4, 130)])
def test_softmax_over_rows_is_one_dispatch(fdev: Any, rt: Any, shape: tuple[int, ...]) -> None:
    # (37, 300) and (5, 4, 130): a work-group per row; (300, 9): an invocation per row
    a = (RNG.standard_normal(shape) * 4).astype(np.float32)
    x = ember.tensor(a, device=fdev)
    (got,) = _one_dispatch(rt, lambda: x.softmax(-1))
    np.testing.assert_allclose(got, _softmax64(a, -1), rtol=2e-6, atol=1e-7)


def test_log_softmax_over_a_middle_axis_is_one_dispatch(fdev: Any, rt: Any) -> None:
    a = RNG.standard_normal((6, 70, 5)).astype(np.float32)
    x = ember.tensor(a, device=fdev)
    (got,) = _one_dispatch(rt, lambda: x.log_softmax(1))
    np.testing.assert_allclose(got, np.log(_softmax64(a, 1)), rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("dims", [(-1,), (1,), (1, 2), (0,), (0, 2), (0, 1, 2)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_mean_of_squares_over_any_dims_is_one_dispatch(fdev: Any, rt: Any, dims: tuple[int, ...],
                                                       keepdim: bool) -> None:
    # dims containing 0 reduce the partitioner's row axis: a kernel whose positions are the
    # results (a lone output) rather than the rows
    a = RNG.standard_normal((9, 80, 7)).astype(np.float32)
    x = ember.tensor(a, device=fdev)
    (got,) = _one_dispatch(rt, lambda: (x ** 2 + 1.0).mean(dim=dims, keepdim=keepdim))
    want = (a.astype(np.float64) ** 2 + 1).mean(axis=dims, keepdims=keepdim)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=2e-6)


def test_whole_tensor_mean_of_squares_is_one_dispatch(fdev: Any, rt: Any) -> None:
    a = RNG.standard_normal((50, 60)).astype(np.float32)
    x = ember.tensor(a, device=fdev)
    (got,) = _one_dispatch(rt, lambda: (x * x).mean())
    assert got.shape == ()
    np.testing.assert_allclose(got, (a.astype(np.float64) ** 2).mean(), rtol=2e-6)


def test_layer_norm_with_var_and_every_output_is_one_dispatch(fdev: Any, rt: Any) -> None:
    a = (RNG.standard_normal((24, 200)) * 3 + 1).astype(np.float32)
    w = RNG.standard_normal(200).astype(np.float32)
    x, g = ember.tensor(a, device=fdev), ember.tensor(w, device=fdev)

    def norm() -> tuple[ember.Tensor, ember.Tensor, ember.Tensor]:
        mu = x.mean(-1, keepdim=True)
        v = x.var(-1, keepdim=True)
        return (x - mu) / (v + 1e-5).sqrt() * g, mu, v

    got, mu, v = _one_dispatch(rt, norm)
    a64 = a.astype(np.float64)
    mu64, v64 = a64.mean(-1, keepdims=True), a64.var(-1, ddof=1, keepdims=True)
    np.testing.assert_allclose(mu, mu64, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(v, v64, rtol=1e-5)
    np.testing.assert_allclose(got, (a64 - mu64) / np.sqrt(v64 + 1e-5) * w, rtol=1e-4,
                               atol=1e-5)


def test_reductions_of_every_kind_with_a_prologue(fdev: Any, rt: Any) -> None:
    a = RNG.standard_normal((40, 90)).astype(np.float32)
    a[3, 7] = np.nan
    x = ember.tensor(a, device=fdev)
    a64 = a.astype(np.float64)
    with np.errstate(invalid="ignore"):
        cases: list[tuple[Callable[[], Any], Any]] = [
            (lambda: (x * 0.5 + 1.0).amax(1), (a64 * 0.5 + 1).max(1)),
            (lambda: (x * 0.5 + 1.0).amin(1), (a64 * 0.5 + 1).min(1)),
            (lambda: (x * 0.01 + 1.0).prod(1), (a64 * 0.01 + 1).prod(1)),
            (lambda: (x - 1.0).sum(1, keepdim=True), (a64 - 1).sum(1, keepdims=True)),
            (lambda: (x.abs() > 2.0).any(1), (np.abs(a64) > 2).any(1)),
            (lambda: (x.abs() < 3.0).all(1), (np.abs(a64) < 3).all(1)),
            (lambda: (x * x - 1.0).argmax(1), None),
            (lambda: (x * x - 1.0).argmin(1, keepdim=True), None),
        ]
    for fn, want in cases:
        (got,) = _one_dispatch(rt, fn)
        if want is None:  # arg-reductions: nan wins, as numpy's
            y = a64 * a64 - 1
            op = np.argmax if "argmax" in fn.__code__.co_names else np.argmin
            want = op(y, axis=1)
            if got.ndim == 2:
                want = want[:, None]
            np.testing.assert_array_equal(got, want)
        elif want.dtype == np.bool_:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=3e-6, equal_nan=True)


def test_strided_and_broadcast_inputs_feed_the_prologue(fdev: Any, rt: Any) -> None:
    a = RNG.standard_normal((100, 70)).astype(np.float32)
    b = RNG.standard_normal((1, 100)).astype(np.float32)
    x = ember.tensor(a, device=fdev).permute(1, 0)[:, ::2]  # (70, 50), strided
    y = ember.tensor(b, device=fdev)[:, ::2]  # (1, 50), broadcast over the rows
    (got,) = _one_dispatch(rt, lambda: (x * y).softmax(-1))
    np.testing.assert_allclose(got, _softmax64(a.T[:, ::2] * b[:, ::2], -1), rtol=2e-6,
                               atol=1e-7)


def test_positions_beyond_one_grid_dimension_spread_over_two(fdev: Any, rt: Any,
                                                             monkeypatch: Any) -> None:
    monkeypatch.setattr(rt, "max_groups", 7)  # 37 rows: a 6 x 7 grid with 5 idle groups
    a = RNG.standard_normal((37, 200)).astype(np.float32)
    x = ember.tensor(a, device=fdev)
    (got,) = _one_dispatch(rt, lambda: (x + 0.25).softmax(-1))
    np.testing.assert_allclose(got, _softmax64(a + 0.25, -1), rtol=2e-6, atol=1e-7)


def test_float16_softmax_rounds_like_the_eager_kernels(fdev: Any, rt: Any,
                                                       wg_device: Any) -> None:
    if not wg_device.supports(ember.float16):
        pytest.skip("the adapter offers no shader-f16")
    a = RNG.standard_normal((16, 150)).astype(np.float16)
    x = ember.tensor(a, device=fdev)
    (got,) = _one_dispatch(rt, lambda: x.softmax(-1))
    assert got.dtype == np.float16
    eager = ember.tensor(a, device="wgpu:0").softmax(-1).numpy()
    np.testing.assert_allclose(got.astype(np.float64), _softmax64(a, -1), rtol=3e-3,
                               atol=1e-4)
    np.testing.assert_allclose(got.astype(np.float64), eager.astype(np.float64), rtol=2e-3,
                               atol=1e-4)


def test_gradient_of_a_softmax_loss_matches_the_unfused_device(wg_device: object) -> None:
    a = RNG.standard_normal((12, 100)).astype(np.float32)

    def grad(dev: str) -> np.ndarray:
        w = ember.tensor(a, device=dev, requires_grad=True)
        loss = ((w * 2.0).softmax(-1) ** 2).mean()
        return loss.backward()[w].numpy()

    np.testing.assert_allclose(grad("autodiff<fusion<wgpu:0>>"), grad("autodiff<wgpu:0>"),
                               rtol=1e-4, atol=1e-9)


def _dispatches(rt: Any, fn: Callable[[], Any]) -> tuple[np.ndarray, int]:
    fn().numpy()
    before = rt.dispatches
    got = fn().numpy()
    return got, rt.dispatches - before


def test_few_long_rows_are_split_over_work_groups_in_two_dispatches(fdev: Any, rt: Any) -> None:
    # one work-group per row would leave a GPU idle: partials of chunks, then one work-group
    # per row combining them and computing the epilogue
    a = RNG.standard_normal((2, 1 << 15)).astype(np.float32)
    a[1, 5] = np.nan
    x = ember.tensor(a, device=fdev)
    a64 = a.astype(np.float64)
    cases: list[tuple[Callable[[], Any], np.ndarray]] = [
        (lambda: (x * x).sum(-1, keepdim=True) * 2.0, (a64 * a64).sum(-1, keepdims=True) * 2),
        (lambda: (x * 3.0).amax(-1), (a64 * 3).max(-1)),
        (lambda: (x.abs() > 4.0).any(-1), (np.abs(a64) > 4).any(-1)),
        (lambda: (x * 0.001 + 1.0).prod(-1), (a64 * 0.001 + 1).prod(-1)),
    ]
    for fn, want in cases:
        got, n = _dispatches(rt, fn)
        assert n == 2
        np.testing.assert_allclose(got, want, rtol=2e-5, equal_nan=True)


@pytest.mark.parametrize("keepdim", [False, True])
def test_mean_of_squares_of_a_long_vector_is_two_dispatches(fdev: Any, rt: Any,
                                                            keepdim: bool) -> None:
    a = RNG.standard_normal(1 << 17).astype(np.float32)
    x = ember.tensor(a, device=fdev)
    got, n = _dispatches(rt, lambda: (x ** 2).mean(dim=(0,), keepdim=keepdim))
    assert n == 2
    np.testing.assert_allclose(got, (a.astype(np.float64) ** 2).mean(keepdims=keepdim),
                               rtol=1e-5)


def test_split_reductions_of_16_bit_floats_keep_f32_partials(fdev: Any, rt: Any,
                                                             wg_device: Any) -> None:
    if not wg_device.supports(ember.float16):
        pytest.skip("the adapter offers no shader-f16")
    a = RNG.standard_normal((3, 1 << 14, 2)).astype(np.float16)
    x = ember.tensor(a, device=fdev)
    got, n = _dispatches(rt, lambda: (x * x).mean(dim=(1,)))
    assert n == 2 and got.dtype == np.float16
    want = (a.astype(np.float64) ** 2).mean(axis=1)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-3)


def test_matmul_head_with_a_softmax_epilogue_is_two_dispatches(fdev: Any, rt: Any) -> None:
    # the backend's matmul, then one kernel for the rest of the group
    a = RNG.standard_normal((300, 64)).astype(np.float32)
    w = RNG.standard_normal((64, 200)).astype(np.float32)
    x, wt = ember.tensor(a, device=fdev), ember.tensor(w, device=fdev)
    (x @ wt).softmax(-1).numpy()
    before = rt.dispatches
    got = (x @ wt).softmax(-1).numpy()
    assert rt.dispatches - before == 2
    # logits of ~20 carry float32 rounding of the products: ~1e-5 relative after exp
    np.testing.assert_allclose(got, _softmax64(a.astype(np.float64) @ w, -1), rtol=1e-4,
                               atol=1e-7)


@pytest.mark.parametrize("reduce", [False, True])
def test_groups_binding_more_buffers_than_a_kernel_may_run_op_by_op(fdev: Any, rt: Any,
                                                                    reduce: bool) -> None:
    from ember_wgpu.fusion_reduce import max_buffers

    limit = max_buffers(rt)
    hs = [RNG.standard_normal((4, 70)).astype(np.float32) for _ in range(limit + 2)]
    xs = [ember.tensor(h, device=fdev) for h in hs]
    acc = xs[0]
    for x in xs[1:]:
        acc = acc * 0.5 + x
    out = acc.softmax(-1) if reduce else acc
    want = hs[0].astype(np.float64)
    for h in hs[1:]:
        want = want * 0.5 + h
    if reduce:
        want = _softmax64(want, -1)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6)


def test_a_group_with_a_reduction_after_thousands_of_elementwise_ops(fdev: Any) -> None:
    # the renderer emits a chain's values from an explicit stack: 3,000 ops before a
    # softmax once exhausted Python's recursion limit (on NVIDIA, whose bind groups let
    # ~1000-input groups fuse)
    h = RNG.standard_normal((4, 70)).astype(np.float32)
    acc = ember.tensor(h, device=fdev)
    want = h.astype(np.float64)
    for _ in range(1500):
        acc = acc * 0.999 + 0.001
        want = want * np.float32(0.999) + np.float32(0.001)
    np.testing.assert_allclose(acc.softmax(-1).numpy(), _softmax64(want, -1), rtol=1e-4,
                               atol=1e-7)


def test_a_kernel_binds_no_more_buffers_than_a_bind_group_holds() -> None:
    # NVIDIA's Vulkan driver: ~10^6 storage buffers a shader stage, 1000 bindings a group
    from types import SimpleNamespace

    from ember_wgpu.fusion_reduce import max_buffers

    limits = {"max-storage-buffers-per-shader-stage": 1 << 20, "max-bindings-per-bind-group": 1000}
    assert max_buffers(SimpleNamespace(device=SimpleNamespace(limits=limits))) == 1000
    limits["max-storage-buffers-per-shader-stage"] = 8
    assert max_buffers(SimpleNamespace(device=SimpleNamespace(limits=limits))) == 8


@pytest.mark.parametrize("subgroups", [False, True])
def test_trees_with_and_without_subgroup_shuffles_agree_with_numpy(wg_device: object, rt: Any,
                                                                   monkeypatch: Any,
                                                                   subgroups: bool) -> None:
    from ember_wgpu import fusion_reduce

    if subgroups and not rt.subgroups:
        pytest.skip("the adapter offers no subgroup operations")
    monkeypatch.setattr(fusion_reduce, "SUBGROUPS", subgroups)
    # a fusion device of its own: no kernel compiled under the other setting is reused
    dev = ember.device(f"fusion<wgpu:0,min_nodes={1 + subgroups}>")
    a = (RNG.standard_normal((19, 333)) * 3).astype(np.float32)
    x = ember.tensor(a, device=dev)
    got = [t.numpy() for t in (x.softmax(-1), (x * x).sum(-1), (x - 1.0).amin(-1),
                               (x.abs() > 4.0).any(-1), (x * 2.0).argmax(-1))]
    a64 = a.astype(np.float64)
    np.testing.assert_allclose(got[0], _softmax64(a, -1), rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(got[1], (a64 * a64).sum(-1), rtol=2e-6)
    np.testing.assert_allclose(got[2], (a64 - 1).min(-1), rtol=1e-7)
    np.testing.assert_array_equal(got[3], (np.abs(a64) > 4).any(-1))
    np.testing.assert_array_equal(got[4], a64.argmax(-1))
    source = "\n".join(k.source for k in dev.backend.kernel_cache.values()
                       if hasattr(k, "source"))
    assert ("subgroupShuffleXor" in source) == subgroups


@pytest.mark.parametrize("fused", [False, True])
def test_bool_reductions_keep_no_bools_in_workgroup_memory(rt: Any, fused: bool) -> None:
    # A ``bool`` in a work-group array may be one byte: NVIDIA's driver races neighbouring
    # lanes' writes (any/all came out wrong there, right on lavapipe).  The trees keep them
    # as u32; each kernel these reductions build is checked, and its results against numpy.
    dev = ember.device("fusion<wgpu:0>" if fused else "wgpu:0")
    a = RNG.standard_normal((40, 700)).astype(np.float32)
    mask = a > 2.5  # sparse: an any over a row of 700 that must find few trues
    before = set(rt._pipelines)
    x = ember.tensor(a, device=dev)
    m = ember.tensor(mask, device=dev)
    got = {"any": (x > 2.5).any(1).numpy(), "all": (x < 2.5).all(1).numpy(),
           "argmax": m.argmax(1).numpy(), "any0": m.any(0).numpy()}
    np.testing.assert_array_equal(got["any"], mask.any(1))
    np.testing.assert_array_equal(got["all"], (a < 2.5).all(1))
    np.testing.assert_array_equal(got["argmax"], mask.argmax(1))
    np.testing.assert_array_equal(got["any0"], mask.any(0))
    built = [s for s in rt._pipelines if s not in before and "var<workgroup>" in s]
    assert built, "no work-group tree was built"
    for src in built:
        shared = [ln for ln in src.splitlines() if ln.startswith("var<workgroup>")]
        assert not [ln for ln in shared if "array<bool" in ln], shared


@pytest.mark.parametrize("fused", [False, True])
def test_long_rows_take_wide_work_groups_and_agree_with_numpy(rt: Any, monkeypatch: Any,
                                                              fused: bool) -> None:
    # with wide trees on, rows of at least 4 * WIDE_ROWS elements get work-groups of WIDE_ROWS
    # lanes (64 held an H100's elementwise kernels to a third of its bandwidth); each kind of
    # adapter has its own switch.  Every kind of tree at that width, ties included.
    from ember_wgpu import reduction
    from ember_wgpu.reduction import WIDE_ROWS, lanes_for

    monkeypatch.setattr(reduction, "WIDE_ON_GPU", True)
    assert lanes_for(4 * WIDE_ROWS, False) == WIDE_ROWS > lanes_for(4 * WIDE_ROWS - 1, False)
    assert lanes_for(1 << 20, True) < WIDE_ROWS
    monkeypatch.setattr(reduction, "WIDE_ON_CPU", True)
    dev = ember.device("fusion<wgpu:0>" if fused else "wgpu:0")
    if fused:  # kernels of these groups compiled before were built at the other width
        dev.backend.plans.clear()
        dev.backend.kernel_cache.clear()
    a = (RNG.standard_normal((23, 4 * WIDE_ROWS + 37)) * 3).astype(np.float32)
    a[5, 7::300] = 20.0  # ties: the first index wins
    before = set(rt._pipelines)
    x = ember.tensor(a, device=dev)
    got = [t.numpy() for t in (x.softmax(-1), (x * x).mean(-1), (x - 1.0).amin(-1),
                               (x > 9.0).any(-1), (x < 9.0).all(-1), x.argmax(-1),
                               x.var(-1))]
    a64 = a.astype(np.float64)
    np.testing.assert_allclose(got[0], _softmax64(a, -1), rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(got[1], (a64 * a64).mean(-1), rtol=2e-6)
    np.testing.assert_allclose(got[2], (a64 - 1).min(-1), rtol=1e-7)
    np.testing.assert_array_equal(got[3], (a64 > 9).any(-1))
    np.testing.assert_array_equal(got[4], (a64 < 9).all(-1))
    np.testing.assert_array_equal(got[5], a64.argmax(-1))
    assert got[5][5] == 7
    np.testing.assert_allclose(got[6], a64.var(-1, ddof=1), rtol=1e-5)
    built = [s for s in rt._pipelines if s not in before and "var<workgroup>" in s]
    assert built and all(f"@workgroup_size({WIDE_ROWS})" in s for s in built), built
