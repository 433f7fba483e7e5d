"""Kernel paths the conformance suite does not reach on its own, against numpy float64."""

from __future__ import annotations

from typing import Any

import ember
import numpy as np
import pytest
from ember import ops


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _launches(monkeypatch: pytest.MonkeyPatch, be: Any) -> list[str]:
    """The names of the kernels ``be`` launches from now on (a list that fills up)."""
    launched: list[str] = []
    real = be.launch

    def counting(kernel: Any, grid: Any, *args: Any, **meta: Any) -> Any:
        launched.append(kernel.fn.__name__ if hasattr(kernel, "fn") else kernel.__name__)
        return real(kernel, grid, *args, **meta)

    monkeypatch.setattr(be, "launch", counting)
    return launched


def test_broadcast_of_strided_views_matches_numpy(dev: ember.Device) -> None:
    a = _rng().standard_normal((4, 6, 5))
    b = _rng().standard_normal((5,))
    x = ember.tensor(a, device=dev)[::2, ::-1].permute(2, 0, 1)  # negative and swapped strides
    y = ember.tensor(b, device=dev).reshape(5, 1, 1)
    want = a[::2, ::-1].transpose(2, 0, 1) * b.reshape(5, 1, 1) + 1.0
    np.testing.assert_allclose((x * y + 1.0).numpy(), want, rtol=1e-12)


def test_long_rows_reduce_in_two_passes(dev: ember.Device) -> None:
    be = dev.backend
    a = _rng().standard_normal((3, 1000))
    x = be.from_numpy(a, ember.float64)
    old = be.split_reductions, be.reduce_chunk
    be.split_reductions, be.reduce_chunk = True, 64
    try:
        got = be.to_numpy(be.kernels[ops.sum](x, dims=(1,)), None)
        top = be.to_numpy(be.kernels[ops.max](x, dims=(1,)), None)
        mean = be.to_numpy(be.kernels[ops.mean](x, dims=(0, 1)), None)
        half = be.from_numpy(a.astype(np.float16), ember.float16)
        hmean = be.to_numpy(be.kernels[ops.mean](half, dims=(1,), keepdim=True), None)
        # a column sum of a [tokens, features] matrix: few programs, each split down the rows
        cols = be.to_numpy(be.kernels[ops.sum](x.transpose((1, 0)), dims=(0,)), None)
    finally:
        be.split_reductions, be.reduce_chunk = old
    np.testing.assert_allclose(got, a.sum(axis=1), rtol=1e-12)
    np.testing.assert_array_equal(top, a.max(axis=1))
    np.testing.assert_allclose(mean, a.mean(), rtol=1e-12)
    assert hmean.dtype == np.float16 and hmean.shape == (3, 1)
    np.testing.assert_allclose(hmean[:, 0], a.astype(np.float16).astype(np.float64).mean(1),
                               rtol=2e-3)
    np.testing.assert_allclose(cols, a.sum(axis=1), rtol=1e-12)


@pytest.mark.parametrize("split", [False, True])
def test_reductions_over_batch_and_space_read_strided(dev: ember.Device,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      split: bool) -> None:
    """A sum over axes (0, 2, 3) of NCHW (a conv bias gradient) walks two strided axes per row
    instead of copying the rows out first; in one pass and in two."""
    be = dev.backend
    a = _rng().standard_normal((5, 3, 4, 6))
    b = _rng().standard_normal((5, 3, 8))
    x = be.from_numpy(a, ember.float64)
    y = be.from_numpy(b, ember.float64)
    if split:
        monkeypatch.setattr(be, "split_reductions", True)
        monkeypatch.setattr(be, "reduce_chunk", 8)
    for op, arg, dims in ((ops.sum, x, (0, 2, 3)), (ops.max, y, (0, 2))):  # makes the
        be.kernels[op](arg, dims=dims)  # identity scalars
    launched = _launches(monkeypatch, be)
    got = be.to_numpy(be.kernels[ops.sum](x, dims=(0, 2, 3)), None)
    top = be.to_numpy(be.kernels[ops.max](y, dims=(0, 2)), None)
    np.testing.assert_allclose(got, a.sum(axis=(0, 2, 3)), rtol=1e-12)
    np.testing.assert_array_equal(top, b.max(axis=(0, 2)))
    assert set(launched) == {"reduce_rows"}  # no copy of the rows first
    assert len(launched) == (4 if split else 2)


def test_batched_matmul_broadcasts_without_copies(dev: ember.Device) -> None:
    a = _rng().standard_normal((2, 1, 5, 7))
    b = _rng().standard_normal((3, 7, 4))
    got = (ember.tensor(a, device=dev) @ ember.tensor(b, device=dev)).numpy()
    np.testing.assert_allclose(got, a @ b, rtol=1e-12)


@pytest.mark.parametrize("dtype", [ember.float16, ember.bfloat16, ember.float32])
def test_matmul_accumulates_low_precision_in_float32(dev: ember.Device, dtype: ember.DType) -> None:
    a = _rng().uniform(-1, 1, (16, 64))
    b = _rng().uniform(-1, 1, (64, 16))
    xa = ember.tensor(a, dtype=dtype, device=dev)
    xb = ember.tensor(b, dtype=dtype, device=dev)
    ra = xa.to("cpu").numpy().astype(np.float64)
    rb = xb.to("cpu").numpy().astype(np.float64)
    got = (xa @ xb).numpy().astype(np.float64)
    tol = {ember.float16: 2e-3, ember.bfloat16: 2e-2, ember.float32: 1e-5}[dtype]
    np.testing.assert_allclose(got, ra @ rb, rtol=tol, atol=tol * 8)


def test_sort_is_stable_and_puts_nan_last(dev: ember.Device) -> None:
    a = np.array([[3.0, np.nan, 1.0, 3.0, -0.5, 1.0]])
    vals, idx = ember.tensor(a, device=dev).sort(dim=1)
    np.testing.assert_array_equal(idx.numpy(), np.argsort(a, axis=1, kind="stable"))
    np.testing.assert_array_equal(vals.numpy(), np.sort(a, axis=1))
    _dvals, didx = ember.tensor(a, device=dev).sort(dim=1, descending=True)
    np.testing.assert_array_equal(didx.numpy(), [[1, 0, 3, 2, 5, 4]])


def test_random_numbers_depend_only_on_seed_and_offset(dev: ember.Device) -> None:
    u1 = ember.rand(4096, generator=ember.Generator(7), device=dev).numpy()
    u2 = ember.rand(4096, generator=ember.Generator(7), device=dev).numpy()
    u3 = ember.rand(4096, generator=ember.Generator(8), device=dev).numpy()
    np.testing.assert_array_equal(u1, u2)
    assert not np.array_equal(u1, u3)
    assert 0.0 <= u1.min() and u1.max() < 1.0
    assert abs(u1.mean() - 0.5) < 0.02
    z = ember.randn(8192, generator=ember.Generator(1), dtype=ember.float64, device=dev).numpy()
    assert abs(z.mean()) < 0.05 and abs(z.std() - 1.0) < 0.05


def test_grouped_strided_conv2d_matches_naive_loops(dev: ember.Device) -> None:
    x = _rng().standard_normal((2, 4, 7, 6))
    w = _rng().standard_normal((6, 2, 3, 2))
    got = ember.nn.functional.conv2d(ember.tensor(x, device=dev), ember.tensor(w, device=dev),
                                     stride=(2, 1), padding=(1, 1), dilation=(1, 2),
                                     groups=2).numpy()
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    oh, ow = (7 + 2 - 3) // 2 + 1, (6 + 2 - 3) // 1 + 1
    want = np.zeros((2, 6, oh, ow))
    for n in range(2):
        for o in range(6):
            g = o // 3
            for i in range(oh):
                for j in range(ow):
                    patch = xp[n, 2 * g:2 * g + 2, 2 * i:2 * i + 3, j:j + 3:2]
                    want[n, o, i, j] = (patch * w[o]).sum()
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(("kernel", "stride", "padding", "dilation", "ceil"), [
    ((2, 2), (2, 2), (0, 0), (1, 1), False),  # the common case: windows do not overlap
    ((3, 3), (1, 2), (1, 1), (1, 1), True),  # overlapping windows, padding, ceil mode
    ((2, 3), (2, 1), (1, 0), (2, 2), False),  # dilation
])
def test_max_pool_backward_is_one_gather_kernel(dev: ember.Device,
                                                monkeypatch: pytest.MonkeyPatch,
                                                kernel: tuple[int, int], stride: tuple[int, int],
                                                padding: tuple[int, int],
                                                dilation: tuple[int, int], ceil: bool) -> None:
    """``max_pool2d``'s gradient (`max_pool2d_backward`) against the scatter of numpy float64,
    ties included (each window's gradient goes to the position its index names)."""
    rng = _rng()
    a = rng.integers(-3, 3, (2, 3, 7, 6)).astype(np.float64)  # many ties
    x = ember.tensor(a, device=ember.device(f"autodiff<{dev}>"), requires_grad=True)
    vals, idx = ember.nn.functional.max_pool2d(x, kernel, stride, padding, dilation,
                                               ceil_mode=ceil, return_indices=True)
    gout = rng.standard_normal(tuple(vals.shape))
    launched = _launches(monkeypatch, dev.backend)
    grads = vals.backward(ember.tensor(gout, device=vals.device))
    assert launched == ["max_pool_backward"]
    want = np.zeros_like(a)
    flat = want.reshape(2, 3, -1)
    ind = idx.numpy().reshape(2, 3, -1)
    for i in range(2):
        for j in range(3):
            np.add.at(flat[i, j], ind[i, j], gout.reshape(2, 3, -1)[i, j])
    np.testing.assert_allclose(grads[x].numpy(), want, rtol=1e-12)


def _factor(n: int, rng: np.random.Generator) -> tuple[int, ...]:
    """A random shape of ``n`` elements, size-1 axes included."""
    out: list[int] = []
    while n > 1:
        d = int(rng.choice([f for f in range(2, n + 1) if n % f == 0]))
        out.append(d)
        n //= d
    out += [1] * int(rng.integers(0, 2))
    rng.shuffle(out)
    return tuple(out)


def test_reshape_views_whenever_numpy_can() -> None:
    """`view_strides` against numpy: a view exactly where ``reshape(copy=False)`` works, and
    the view shows the same elements in the same order."""
    from ember_triton.movement import view_strides

    rng = _rng()
    for _ in range(2000):
        base = np.arange(int(rng.integers(1, 4)) * 24, dtype=np.float64)
        a = base.reshape(_factor(base.size, rng))
        a = a.transpose(rng.permutation(a.ndim))
        if a.ndim and rng.random() < 0.5:  # a strided or reversed slice of one axis
            ax = int(rng.integers(0, a.ndim))
            idx = [slice(None)] * a.ndim
            idx[ax] = slice(None, None, int(rng.choice([-1, 2])))
            a = a[tuple(idx)]
        new = _factor(a.size, rng)
        item = a.itemsize
        strides = view_strides(a.shape, tuple(s // item for s in a.strides), new)
        try:
            want: np.ndarray | None = a.reshape(new, copy=False)
        except ValueError:
            want = None
        assert (strides is None) == (want is None), (a.shape, a.strides, new)
        if strides is not None:
            got = np.lib.stride_tricks.as_strided(a, new, tuple(s * item for s in strides))
            np.testing.assert_array_equal(got, a.reshape(new))


@pytest.mark.parametrize(("xs", "ws", "stride", "padding", "dilation", "groups"), [
    ((2, 3, 5, 5), (4, 3, 3, 3), (1, 1), (0, 0), (1, 1), 1),
    ((1, 2, 6, 5), (3, 2, 3, 2), (2, 1), (1, 2), (1, 1), 1),
    ((1, 2, 7, 7), (2, 2, 3, 3), (1, 1), (1, 1), (2, 2), 1),
    ((2, 4, 4, 4), (6, 2, 2, 2), (1, 1), (0, 0), (1, 1), 2),
    ((1, 3, 5, 4), (3, 1, 3, 3), (2, 2), (1, 1), (1, 1), 3),
])
def test_conv2d_weight_grad_is_one_matmul_over_patches(
        dev: ember.Device, monkeypatch: pytest.MonkeyPatch, xs: tuple[int, ...],
        ws: tuple[int, ...], stride: tuple[int, int], padding: tuple[int, int],
        dilation: tuple[int, int], groups: int) -> None:
    """``conv2d``'s weight gradient (`conv2d_weight_grad`): patches laid out batch-inner, one
    (grouped) matmul, against numpy float64 loops."""
    rng = _rng()
    a, wv = rng.standard_normal(xs), rng.standard_normal(ws)
    ad = ember.device(f"autodiff<{dev}>")
    x = ember.tensor(a, device=ad)
    w = ember.tensor(wv, device=ad, requires_grad=True)
    out = ember.nn.functional.conv2d(x, w, stride=stride, padding=padding, dilation=dilation,
                                     groups=groups)
    g = rng.standard_normal(tuple(out.shape))
    launched = _launches(monkeypatch, dev.backend)
    got = out.backward(ember.tensor(g, device=ad))[w].numpy()
    assert launched.count("im2col") == 1 and launched.count("matmul_dot") + launched.count(
        "matmul") == 1
    o, cg, kh, kw = ws
    oh, ow = g.shape[2:]
    xp = np.pad(a, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    want = np.zeros(ws)
    og = o // groups
    for oc in range(o):
        grp = oc // og
        for ci in range(cg):
            for i in range(kh):
                for j in range(kw):
                    patch = xp[:, grp * cg + ci, i * dilation[0]:, j * dilation[1]:][
                        :, :oh * stride[0]:stride[0], :ow * stride[1]:stride[1]][:, :oh, :ow]
                    want[oc, ci, i, j] = (patch * g[:, oc]).sum()
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("m,n,k,batch,bias", [
    (5, 7, 1000, 1, False),   # a K tail in the last split
    (16, 16, 2048, 2, False),  # whole BK steps, batched
    (3, 5, 1100, 1, True),    # linear: the bias is added when the splits are summed
])
def test_split_k_matmul_matches_numpy(dev: ember.Device, monkeypatch: pytest.MonkeyPatch,
                                      m: int, n: int, k: int, batch: int, bias: bool) -> None:
    """Few output tiles and a long K: the matmul runs as split-K partials plus one sum
    (`split_k`, `split_k_sum`), against numpy float64."""
    rng = _rng()
    launched = _launches(monkeypatch, dev.backend)
    if bias:
        xv, wv, bv = rng.standard_normal((m, k)), rng.standard_normal((n, k)), \
            rng.standard_normal(n)
        got = ember.nn.functional.linear(*(ember.tensor(v, dtype=ember.float32, device=dev)
                                           for v in (xv, wv, bv))).numpy()
        want = xv.astype(np.float32).astype(np.float64) @ wv.astype(np.float32).T + \
            bv.astype(np.float32)
    else:
        av, bv2 = rng.standard_normal((batch, m, k)), rng.standard_normal((batch, k, n))
        got = (ember.tensor(av, dtype=ember.float32, device=dev)
               @ ember.tensor(bv2, dtype=ember.float32, device=dev)).numpy()
        want = av.astype(np.float32).astype(np.float64) @ bv2.astype(np.float32)
    assert launched.count("split_k_sum") == 1 and launched.count("matmul_dot") == 1
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))


@pytest.mark.parametrize("tiles,k,bk,procs", [(1, 1000, 64, 8), (3, 2048, 32, 132),
                                              (4, 100_000, 16, 132), (1, 777, 32, 132)])
def test_split_k_covers_k_in_whole_steps(tiles: int, k: int, bk: int, procs: int) -> None:
    from ember_triton.linalg import split_k

    splits, per = split_k(tiles, k, bk, procs)
    assert splits > 1 and per % bk == 0 and per >= 4 * bk
    assert (splits - 1) * per < k <= splits * per  # every split has work, all of K is covered
    assert splits * tiles <= procs + tiles  # no more programs than the device runs at once
    assert split_k(procs, k, bk, procs) == (1, k)  # enough tiles: no split
    assert split_k(tiles, 4 * bk, bk, procs) == (1, 4 * bk)  # too little K


def _tma_operands(dev: ember.Device, dtype: ember.DType, m: int, n: int, k: int,
                  b_kmajor: bool) -> tuple[Any, Any, np.ndarray, np.ndarray]:
    rng = _rng()
    av = rng.standard_normal((m, k))
    bv = rng.standard_normal((n, k)).T if b_kmajor else rng.standard_normal((k, n))
    a = ember.tensor(av, dtype=dtype, device=dev)
    b = ember.tensor(np.ascontiguousarray(bv.T) if b_kmajor else bv, dtype=dtype, device=dev)
    bd = b.payload.transpose((1, 0)) if b_kmajor else b.payload
    # the operands as the kernel sees them, rounded to ``dtype``, in float64
    return a.payload, bd, a.numpy().astype(np.float64), b.numpy().astype(np.float64).T \
        if b_kmajor else b.numpy().astype(np.float64)


@pytest.mark.parametrize("dtype", [ember.float32, ember.float16, ember.bfloat16])
@pytest.mark.parametrize("b_kmajor", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_tma_matmul_matches_numpy(dev: ember.Device, dtype: ember.DType, b_kmajor: bool,
                                  bias: bool) -> None:
    """The persistent tensor-descriptor matmul (`matmul_tma`): shapes that are no multiple of
    the tiles (descriptor loads fill zeros past the edges), more tiles than programs (each
    program walks several), B in either layout, the bias epilogue; against numpy float64."""
    from ember_triton.linalg import _tma_matmul, tma_fits

    be = dev.backend
    # 3 x 3 tiles on the interpreter's 8 programs; on a GPU, rows enough for more tiles than
    # multiprocessors (still no multiple of the tile)
    m = 70 if be.processors < 9 else 32 * (be.processors // 3 + 1) + 6
    n, k = 48, 40
    a, b, an, bn = _tma_operands(dev, dtype, m, n, k, b_kmajor)
    precision = "tf32" if dtype == ember.float32 else "ieee"
    args = (m, n, k, 1, 0, 0, *a.strides, 0, 0, *b.strides)
    assert tma_fits(a, b, args, precision)
    out = be.empty((m, n), a.dtype)
    bias_t = ember.tensor(_rng().standard_normal(n), dtype=dtype, device=dev) if bias else None
    cfg = (32, 16, 16, 2, 4, 1, 1)
    assert -(-m // cfg[0]) * -(-n // cfg[1]) > be.processors
    _tma_matmul(be, cfg, out, a, b, args, precision, None if bias_t is None else bias_t.payload)
    want = an @ bn
    if bias_t is not None:
        want = want + bias_t.numpy().astype(np.float64)
    got = be.to_numpy(out, dtype).astype(np.float64)
    # float32 runs as tf32 on a GPU's tensor cores (the interpreter multiplies in float32)
    tol = (1e-5 if be.memory.interpret else 5e-3) if dtype == ember.float32 else 1e-2
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.sqrt(k))


@pytest.mark.parametrize(("dtype", "b_kmajor", "planned"), [(ember.float16, False, True),
                                                            (ember.float32, True, True),
                                                            (ember.float32, False, False)])
def test_tma_matmul_leaves_a_plan_when_it_copied_nothing(dev: ember.Device, dtype: ember.DType,
                                                         b_kmajor: bool, planned: bool,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """`_tma_matmul` returns `_matmul_dot`'s plan (its recorded launch, grid, scalars and the
    16-byte alignment it needs) when it launched once on the operands as given, so the next
    problem like it skips choosing; tf32 with an N-major B copies B K-major first: no plan.
    The plan's launch sets Triton's scratch allocator to this device before launching (the
    descriptors live in global scratch).  The interpreter records no launches, so a stand-in
    records them here."""
    from ember_triton.linalg import _tma_matmul

    be = dev.backend
    m, n, k = 64, 48, 32
    a, b, _, _ = _tma_operands(dev, dtype, m, n, k, b_kmajor)
    args = (m, n, k, 1, 0, 0, *a.strides, 0, 0, *b.strides)
    out = be.empty((m, n), a.dtype)
    calls: list[Any] = []
    monkeypatch.setattr(be.memory, "use_scratch", lambda: calls.append("scratch"))

    def record(key, kernel, grid, arrays, scalars, **meta):  # type: ignore[no-untyped-def]
        if kernel.fn.__name__ == "matmul_tma":
            be._planned[key] = lambda g, stream, raw: calls.append((g, raw))

    monkeypatch.setattr(be, "launch_planned", record)
    monkeypatch.setattr(be, "_planned", {})
    precision = "tf32" if dtype == ember.float32 else "ieee"
    cfg = (32, 16, 16, 2, 4, 1, 1)
    plan = _tma_matmul(be, cfg, out, a, b, args, precision)
    if not planned:
        assert plan is None
        return
    assert plan is not None
    entry, grid, scalars, align = plan
    step = min(-(-m // 32) * -(-n // 16), be.processors)
    assert grid == (step,) and align == 15
    assert scalars == (m, n, k, a.strides[0], b.strides[0], b.strides[1], step)
    calls.clear()
    raw = [out.ptr, a.ptr, b.ptr, out.ptr, *scalars]
    entry(grid, 0, raw)
    assert calls == ["scratch", (grid, raw)]


def test_tma_fits_only_descriptor_friendly_operands(dev: ember.Device) -> None:
    from ember_triton.linalg import tma_fits

    def fits(dtype: ember.DType, m: int, n: int, k: int, b_kmajor: bool, precision: str,
             shift: int = 0) -> bool:
        a, b, _, _ = _tma_operands(dev, dtype, m, n, k + shift, b_kmajor)
        if shift:  # a view one element in: its base is no longer 16-byte aligned
            a = a.view((m, k), a.strides, a.offset + shift)
        args = (m, n, k, 1, 0, 0, *a.strides, 0, 0, *b.strides)
        return tma_fits(a, b, args, precision)

    assert fits(ember.float16, 64, 64, 64, False, "ieee")
    assert fits(ember.float16, 64, 64, 64, True, "ieee")
    assert fits(ember.float32, 64, 64, 64, False, "tf32")  # B is copied K-major
    assert not fits(ember.float32, 64, 64, 64, False, "ieee")  # strict float32: no tensor cores
    assert not fits(ember.float16, 64, 64, 60, False, "ieee")  # K rows of 120 bytes
    assert not fits(ember.float16, 64, 60, 64, False, "ieee")  # N rows of 120 bytes
    assert not fits(ember.float16, 64, 64, 64, False, "ieee", shift=1)


@pytest.mark.parametrize("dtype", [ember.float32, ember.bfloat16, ember.int64])
def test_transposed_copies_use_the_tiled_kernel(dev: ember.Device,
                                                monkeypatch: pytest.MonkeyPatch,
                                                dtype: ember.DType) -> None:
    launched = _launches(monkeypatch, dev.backend)
    x = ember.tensor(_rng().integers(-1000, 1000, (130, 70)), dtype=dtype, device=dev)
    got = x.transpose(0, 1).contiguous()
    assert "transpose" in launched
    np.testing.assert_array_equal(got.numpy(), x.numpy().T)
    assert got.payload.strides == (130, 1)
