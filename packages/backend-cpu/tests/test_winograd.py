"""Winograd's F(2x2, 3x3) and F(4x4, 3x3) convolutions, the thread split of convolution work
and `fused_conv2d`'s choice of path, against float64 numpy oracles written from the
definitions."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from ember.ops import composite as cops
from numpy.lib.stride_tricks import sliding_window_view

from ember_cpu import CpuBackend, _workers, winograd
from ember_cpu import nn as cpu_nn

K = CpuBackend().kernels
rng = np.random.default_rng(77)


def conv_oracle(x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    """conv2d in float64 from its definition: each output the sum over its receptive field."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    span = ((kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1)
    win = sliding_window_view(xp, span, axis=(2, 3))
    win = win[:, :, ::stride[0], ::stride[1], ::dilation[0], ::dilation[1]]
    og = o // groups
    outs = [np.einsum("nchwij,ocij->nohw", win[:, g * cg:(g + 1) * cg],
                      w[g * og:(g + 1) * og]) for g in range(groups)]
    return np.concatenate(outs, axis=1)


def epilogue_oracle(y, scale, shift, residual, relu):
    out = y * (scale[:, None, None] if scale.size else 1) + shift[:, None, None]
    out = out + (residual if residual is not None else 0)
    return np.maximum(out, 0) if relu else out


def tolerance(dtype, m, ref):
    """float64: near exact.  float32: F(2,3) within a few float32 roundings of the largest
    partial sums; F(4,3)'s transforms (entries up to 8, 1/24 in the filters) cost about ten
    times that (measured at 64-512 channels, |y| <= 5: 1.8e-6 and 5e-5)."""
    scale = 1 + float(np.max(np.abs(ref)))
    if dtype == np.float64:
        return 1e-11 * scale
    return (2e-6 if m == 2 else 2e-5) * scale * max(1.0, np.sqrt(ref.shape[1] / 64))


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize(("shape", "o", "padding"), [
    ((1, 3, 7, 9), 5, (1, 1)),  # outputs not a multiple of the tile on either side
    ((2, 4, 5, 5), 6, (0, 1)),  # batch 2, uneven padding, 3x5 outputs
    ((3, 2, 11, 6), 3, (2, 0)),  # padding wider than the kernel's reach on one side
    ((1, 1, 3, 3), 1, (0, 0)),  # one output
    ((2, 64, 18, 17), 40, (1, 1)),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_winograd_conv3x3_matches_the_definition(m, shape, o, padding, dtype):
    x = rng.standard_normal(shape)
    w = rng.standard_normal((o, shape[1], 3, 3)) / np.sqrt(9 * shape[1])
    want = conv_oracle(x, w, padding=padding)
    got = winograd.conv3x3(x.astype(dtype), w.astype(dtype), padding, m,
                           np.empty(0, dtype), np.zeros(o, dtype), None, False)
    assert got.dtype == dtype and got.shape == want.shape and got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=0, atol=tolerance(dtype, m, want))


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize(("scaled", "residual", "relu"),
                         [(True, True, True), (False, False, True), (True, False, False)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_winograd_applies_the_epilogue_per_output_channel(m, scaled, residual, relu, dtype):
    x = rng.standard_normal((2, 8, 10, 13))
    w = rng.standard_normal((7, 8, 3, 3)) / np.sqrt(72)
    scale = rng.standard_normal(7) if scaled else np.empty(0)
    shift = rng.standard_normal(7)
    y = conv_oracle(x, w, padding=(1, 1))
    res = rng.standard_normal(y.shape) if residual else None
    want = epilogue_oracle(y, scale, shift, res, relu)
    got = winograd.conv3x3(x.astype(dtype), w.astype(dtype), (1, 1), m, scale.astype(dtype),
                           shift.astype(dtype), None if res is None else res.astype(dtype),
                           relu)
    np.testing.assert_allclose(got, want, rtol=0, atol=tolerance(dtype, m, want) * 4)


def test_winograd_relu_keeps_nan_and_the_sum_carries_inf():
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    x[0, 0, 2, 2] = np.nan
    w = np.ones((1, 2, 3, 3), np.float32)
    got = winograd.conv3x3(x, w, (1, 1), 4, np.empty(0, np.float32), np.zeros(1, np.float32),
                           None, True)
    want = conv_oracle(x, w, padding=(1, 1))
    # nan reaches the outputs whose windows hold it (and, through the tile's transform, the
    # rest of its 4x4 tile); the others are the definition's, rectified
    near = np.zeros((6, 6), bool)
    near[1:4, 1:4] = True
    assert np.isnan(got[0, 0][near]).all()
    far = ~np.isnan(got[0, 0])
    np.testing.assert_allclose(got[0, 0][far], np.maximum(want[0, 0][far], 0), atol=1e-5)


def _fused(x, w, extra, **kw):
    params = dict(stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1, bias=False,
                  norm=False, residual=False, relu=False, eps=1e-5)
    params.update(kw)
    return K[cops.fused_conv2d](x, w, *extra, **params)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fused_conv2d_takes_winograd_for_wide_3x3_stride_one_layers(dtype, monkeypatch):
    calls = []
    real = winograd.conv3x3
    monkeypatch.setattr(winograd, "conv3x3", lambda *a: (calls.append(a[3]), real(*a))[1])
    x = rng.standard_normal((2, 32, 17, 16))
    w = rng.standard_normal((48, 32, 3, 3)) / np.sqrt(288)
    b, s, t, m_ = (rng.standard_normal(48) for _ in range(4))
    v = rng.random(48) + 0.5
    y = conv_oracle(x, w, padding=(1, 1))
    res = rng.standard_normal(y.shape)
    k = s / np.sqrt(v + 1e-5)
    want = np.maximum((y + b[:, None, None] - m_[:, None, None]) * k[:, None, None]
                      + t[:, None, None] + res, 0)
    dt = np.dtype(dtype)
    got = _fused(x.astype(dt), w.astype(dt), [a.astype(dt) for a in (b, s, t, m_, v, res)],
                 bias=True, norm=True, residual=True, relu=True)
    assert calls == [4] and got.dtype == dt
    np.testing.assert_allclose(got, want, rtol=0, atol=tolerance(dt, 4, want) * 4)


@pytest.mark.parametrize(("shape", "wshape", "kw"), [
    ((1, 32, 17, 16), (48, 32, 3, 3), dict(stride=(2, 2))),  # strided
    ((1, 32, 17, 16), (48, 16, 3, 3), dict(groups=2)),  # grouped
    ((1, 32, 17, 16), (48, 32, 3, 3), dict(dilation=(2, 2), padding=(2, 2))),  # dilated
    ((1, 32, 17, 16), (48, 32, 5, 5), dict(padding=(2, 2))),  # not 3x3
    ((1, 32, 12, 15), (48, 32, 3, 3), {}),  # outputs under 14x14
    ((1, 16, 17, 16), (48, 16, 3, 3), {}),  # too few channels for the GEMMs
    ((1, 264, 16, 14), (264, 264, 3, 3), {}),  # too many filters to keep transformed
])
def test_fused_conv2d_keeps_the_gemm_paths_elsewhere(shape, wshape, kw, monkeypatch):
    monkeypatch.setattr(winograd, "conv3x3", None)  # would fail if called
    x = rng.standard_normal(shape).astype(np.float32)
    w = (rng.standard_normal(wshape) / np.sqrt(np.prod(wshape[1:]))).astype(np.float32)
    got = _fused(x, w, [], **kw)
    want = conv_oracle(x, w, **{**dict(stride=(1, 1), padding=(1, 1), dilation=(1, 1),
                                       groups=1), **kw})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_fused_conv2d_on_winograd_refuses_a_residual_of_another_shape():
    from ember.backend import ShapeError

    x = np.zeros((1, 32, 16, 16), np.float32)
    w = np.zeros((32, 32, 3, 3), np.float32)
    with pytest.raises(ShapeError, match="residual"):
        _fused(x, w, [np.zeros((1, 32, 15, 16), np.float32)], residual=True)


# -- transformed filters kept between calls -----------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2])
def test_winograd_follows_weights_written_in_place_between_calls(workers, monkeypatch):
    # the same array object, its values changed (as ember.compile's in-place plans and
    # DLPack sharing can): whole, one filter, one sign bit of one weight
    monkeypatch.setattr(_workers, "threads", lambda: workers)
    x = rng.standard_normal((1, 32, 14, 15)).astype(np.float32)
    w = (rng.standard_normal((40, 32, 3, 3)) / 17).astype(np.float32)
    shift = np.zeros(40, np.float32)

    def run():
        return winograd.conv3x3(x, w, (1, 1), 4, np.empty(0, np.float32), shift, None, False)

    def check(got):
        want = conv_oracle(x, w, padding=(1, 1))
        np.testing.assert_allclose(got, want, rtol=0, atol=tolerance(np.float32, 4, want))

    check(run())
    check(run())  # from the kept transform
    w[...] = (rng.standard_normal(w.shape) / 17).astype(np.float32)
    check(run())
    w[39, 31, 2, 2] += 1.0  # the last filter: the last range of the last thread
    check(run())
    w[0, 0, 0, 0] -= 1.0  # the first
    check(run())


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("bands", [3, 10])  # bands across the images' boundary; a row each
@pytest.mark.parametrize("workers", [1, 2])
def test_winograd_in_bands_of_tile_rows_matches_the_definition(m, bands, workers, monkeypatch):
    monkeypatch.setattr(_workers, "threads", lambda: workers)
    x = rng.standard_normal((2, 32, 20, 19)).astype(np.float32)
    w = (rng.standard_normal((24, 32, 3, 3)) / 17).astype(np.float32)
    th, tw = -(-20 // m), -(-19 // m)
    monkeypatch.setattr(winograd, "_BAND_BYTES",
                        (m + 2) ** 2 * 32 * 2 * th * tw * 4 // bands + 1)
    res = rng.standard_normal((2, 24, 20, 19)).astype(np.float32)
    shift = rng.standard_normal(24).astype(np.float32)
    calls = []
    real = _workers.run
    monkeypatch.setattr(_workers, "run", lambda fn, *a: (calls.append(fn.__name__),
                                                         real(fn, *a))[1])
    got = winograd.conv3x3(x, w, (1, 1), m, np.empty(0, np.float32), shift, res, True)
    assert calls == ["band"]
    want = np.maximum(conv_oracle(x, w, padding=(1, 1)) + shift[:, None, None] + res, 0)
    np.testing.assert_allclose(got, want, rtol=0, atol=tolerance(np.float32, m, want))


@pytest.mark.parametrize("m", [2, 4])
def test_winograd_in_two_stages_where_tile_rows_do_not_share_out_matches_the_definition(
        m, monkeypatch):
    monkeypatch.setattr(_workers, "threads", lambda: 2)
    size = 7 * m - 1  # 7 tile rows for two threads
    x = rng.standard_normal((1, 40, size, size + 3)).astype(np.float32)
    w = (rng.standard_normal((36, 40, 3, 3)) / 19).astype(np.float32)
    res = rng.standard_normal((1, 36, size, size + 3)).astype(np.float32)
    scale, shift = (rng.standard_normal(36).astype(np.float32) for _ in range(2))
    calls = []
    real = _workers.run
    monkeypatch.setattr(_workers, "run", lambda fn, *a: (calls.append(fn.__name__),
                                                         real(fn, *a))[1])
    got = winograd.conv3x3(x, w, (1, 1), m, scale, shift, res, True)
    assert calls == ["inputs", "products"]
    y = conv_oracle(x, w, padding=(1, 1)) * scale[:, None, None] + shift[:, None, None]
    want = np.maximum(y + res, 0)
    np.testing.assert_allclose(got, want, rtol=0, atol=tolerance(np.float32, m, want))


def test_kept_transforms_are_stale_when_any_bit_of_the_weights_differs():
    from ember_cpu import _derived

    w = np.array([[0.0, 1.0], [np.nan, 2.0]], np.float32)
    entry = _derived.Derived(w, (3,), np.float32)
    assert entry.stale(w, 0, 2)  # never derived
    entry.done()
    assert not entry.stale(w, 0, 2)
    w[1, 1] = np.nextafter(np.float32(2), np.float32(3))  # one ulp
    assert not entry.stale(w, 0, 1) and entry.stale(w, 1, 2)
    assert entry.stale(w, 0, 1)  # not derived again yet: all of it stays stale
    entry.done()
    assert not entry.stale(w, 0, 2)
    w[0, 0] = -0.0  # equal as floats, not as bits
    assert entry.stale(w, 0, 2)
    entry.done()
    w[1, 0] = np.float32("nan")  # the same nan: unchanged, though nan != nan
    assert not entry.stale(w, 0, 2)


def test_kept_transforms_are_per_array_and_dropped_with_the_weights():
    import gc

    from ember_cpu import _derived

    x = rng.standard_normal((1, 32, 14, 14)).astype(np.float32)
    a = (rng.standard_normal((32, 32, 3, 3)) / 17).astype(np.float32)
    b = a.copy()
    b[5] *= 2  # another array, another filter 5
    shift = np.zeros(32, np.float32)
    scale = np.empty(0, np.float32)
    for w in (a, b, a):
        got = winograd.conv3x3(x, w, (1, 1), 4, scale, shift, None, False)
        want = conv_oracle(x, w, padding=(1, 1))
        np.testing.assert_allclose(got, want, rtol=0, atol=tolerance(np.float32, 4, want))
    held = _derived._local.held
    keys = [k for k in held.entries if k[0] == id(b)]
    assert len(keys) == 1
    nbytes = held.nbytes
    del b
    gc.collect()
    assert keys[0] not in held.entries
    winograd.conv3x3(x, a, (1, 1), 4, scale, shift, None, False)  # settles the books
    assert held.nbytes < nbytes


def test_kept_transforms_stay_within_their_byte_limit(monkeypatch):
    from ember_cpu import _derived

    x = rng.standard_normal((1, 32, 14, 14)).astype(np.float32)
    monkeypatch.setattr(_derived, "DERIVED_BYTES", 3 * 36 * 32 * 32 * 4)  # room for ~2
    monkeypatch.setattr(_derived, "_local", threading.local())
    shift = np.zeros(32, np.float32)
    ws = [(rng.standard_normal((32, 32, 3, 3)) / 17).astype(np.float32) for _ in range(4)]
    for w in ws:
        winograd.conv3x3(x, w, (1, 1), 4, np.empty(0, np.float32), shift, None, False)
    held = _derived._local.held
    assert 1 <= len(held.entries) <= 2 and held.nbytes <= _derived.DERIVED_BYTES
    assert held.nbytes == sum(e.nbytes for _, e in held.entries.values())


# -- the thread split ---------------------------------------------------------------------------


def test_workers_run_every_chunk_once_and_raise_a_chunks_error():
    seen = []
    lock = threading.Lock()

    def chunk(i):
        with lock:
            seen.append(i)

    _workers.run(chunk, 37, workers=2)
    assert sorted(seen) == list(range(37))

    def bad(i):
        if i == 5:
            raise KeyError("chunk 5")

    with pytest.raises(KeyError, match="chunk 5"):
        _workers.run(bad, 9, workers=2)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")  # 3.12 warns of threads
def test_workers_start_new_helpers_in_a_forked_child():
    _workers.run(lambda i: None, 4, workers=2)  # the parent has a helper now
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        try:
            seen = []
            _workers.run(seen.append, 6, workers=2)
            os._exit(0 if sorted(seen) == list(range(6)) and _workers._helpers else 1)
        finally:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_workers_follow_the_blas_thread_count():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from ember_cpu import _blas

    if not _blas._numpy_blas():
        pytest.skip("numpy's BLAS is not one threadpoolctl controls")
    with threadpoolctl.threadpool_limits(1, user_api="blas"):
        assert _workers.threads() == 1
        with _blas.one_thread(0):  # the process's setting, not the one a kernel set
            assert _blas.blas_threads() == 1


@pytest.mark.parametrize("kind", ["winograd", "taps", "im2col", "stem", "pointwise", "wide",
                                  "bands", "blocks", "subsampled"])
def test_convolutions_split_over_two_threads_give_the_one_thread_results(kind, monkeypatch):
    from ember_cpu import _conv_chunks

    if kind == "bands":  # 21 output rows, 4 a band: 6 bands an image, the last of one row
        monkeypatch.setattr(_conv_chunks, "_BAND_BYTES", 4 * 147 * 19 * 4)
    monkeypatch.setattr(_conv_chunks, "SPLIT_FLOPS", 0)  # small pointwise layers split too
    shapes = {"bands": ((2, 3, 41, 37), (16, 3, 7, 7), (2, 2), (3, 3)),
              # 300 KB of filters: channel blocks on two threads
              "blocks": ((2, 16, 9, 10), (520, 16, 3, 3), (2, 2), (1, 1)),
              "subsampled": ((2, 16, 9, 10), (70, 16, 1, 1), (2, 2), (0, 0)),
              "winograd": ((2, 32, 20, 19), (40, 32, 3, 3), (1, 1), (1, 1)),
              "taps": ((1, 40, 9, 30), (24, 40, 3, 3), (1, 1), (1, 1)),
              "im2col": ((2, 8, 15, 14), (36, 8, 3, 3), (2, 2), (1, 1)),
              "stem": ((1, 3, 30, 29), (16, 3, 7, 7), (2, 2), (3, 3)),  # im2col by rows
              "pointwise": ((1, 16, 9, 9), (70, 16, 1, 1), (1, 1), (0, 0)),
              "wide": ((1, 8, 48, 48), (64, 8, 1, 1), (1, 1), (0, 0))}  # epilogue split too
    xs, ws, stride, padding = shapes[kind]
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    res = rng.standard_normal((xs[0], ws[0], *conv_oracle(x[:1, :1], w[:1, :1], stride,
                                                            padding).shape[2:]))
    res = res.astype(np.float32)
    outs = []
    for workers in (1, 2):
        monkeypatch.setattr(_workers, "threads", lambda workers=workers: workers)
        fn = K[cops.fused_conv2d] if kind != "taps" else None
        if fn is None:  # the tap GEMMs serve plain conv2d (fused layers this wide: Winograd)
            outs.append(cpu_nn.conv2d(x, w, stride, padding))
        else:
            outs.append(_fused(x, w, [res], stride=stride, padding=padding, residual=True,
                               relu=True))
    if kind == "blocks":  # partial sums added in order: the same bits on every run
        again = _fused(x, w, [res], stride=stride, padding=padding, residual=True, relu=True)
        np.testing.assert_array_equal(again, outs[1])
    # chunks change the BLAS's blocking, so the roundings differ a little (Winograd's
    # transforms amplify them: up to 7e-6 of the largest value with OpenBLAS's SkylakeX
    # kernels on an AMD EPYC, 2e-6 with its Haswell ones)
    np.testing.assert_allclose(outs[1], outs[0], rtol=0,
                               atol=(2e-5 if kind == "winograd" else 2e-6)
                               * (1 + np.abs(outs[0]).max()))
    want = conv_oracle(x, w, stride, padding)
    if kind != "taps":
        want = np.maximum(want + res, 0)
    np.testing.assert_allclose(outs[1], want, rtol=0, atol=1e-4 * (1 + np.abs(want).max()))


def test_a_helper_waits_awake_for_a_counter_to_change_and_then_gives_up():
    from ember_cpu import _spin

    flag = np.zeros(1, np.int64)
    assert not _spin.spin_on(flag, 0, 50)  # nothing changed: back after ~50 us
    flag[0] = 3
    assert _spin.spin_on(flag, 0, 10_000_000)  # changed: back at once, not after 10 s


def test_helpers_waiting_awake_or_asleep_take_every_job(monkeypatch):
    for spin_us in (0.0, 1000.0):
        monkeypatch.setattr(_workers, "SPIN_US", spin_us)
        for _ in range(50):
            seen: list[int] = []
            _workers.run(seen.append, 7, workers=2)
            assert sorted(seen) == list(range(7))


def test_max_pooling_split_over_two_threads_gives_the_one_thread_values(monkeypatch):
    x = rng.standard_normal((2, 9, 15, 14)).astype(np.float32)
    x[1, 4, 3, 3] = np.nan
    outs = []
    for workers in (1, 2):
        monkeypatch.setattr(_workers, "threads", lambda workers=workers: workers)
        outs.append(K[cops.max_pool2d_values](x, kernel_size=(3, 3), stride=(2, 2),
                                              padding=(1, 1), dilation=(1, 1),
                                              ceil_mode=False))
    np.testing.assert_array_equal(outs[1], outs[0])
    assert np.isnan(outs[1][1, 4]).sum() == 4 and not np.isnan(outs[1][0]).any()


def test_split_gemms_run_on_one_blas_thread_each(monkeypatch):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from ember_cpu import _blas

    libs = _blas._numpy_blas()
    if not libs or not _blas.has_gemm(np.dtype(np.float32)):
        pytest.skip("numpy's BLAS is not an OpenBLAS that threadpoolctl controls")
    seen = []
    real = _blas.gemm

    def spy(*args, **kwargs):
        seen.append(max(lib.get_num_threads() for lib in libs))
        return real(*args, **kwargs)

    monkeypatch.setattr(_blas, "gemm", spy)
    monkeypatch.setattr(_workers, "threads", lambda: 2)
    x = rng.standard_normal((1, 8, 15, 14)).astype(np.float32)
    w = rng.standard_normal((520, 8, 3, 3)).astype(np.float32)  # filter blocks: 2 GEMMs
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        got = K[cops.fused_conv2d](x, w, stride=(2, 2), padding=(1, 1), dilation=(1, 1),
                                   groups=1, bias=False, norm=False, residual=False,
                                   relu=False, eps=1e-5)
        after = max(lib.get_num_threads() for lib in libs)
    assert len(seen) == 2 and set(seen) == {1} and after == 2  # two chunks, restored
    want = conv_oracle(x, w, (2, 2), (1, 1))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * (1 + np.abs(want).max()))
