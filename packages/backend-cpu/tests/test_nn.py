"""Convolutions, pooling and interpolation against naive loops written from the definitions."""

from __future__ import annotations

import math
from itertools import product

import numpy as np
import pytest
from ember import ops

from ember_cpu import CpuBackend

K = CpuBackend().kernels
rng = np.random.default_rng(1234)


def naive_conv2d(x, w, stride, padding, dilation, groups):
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for b, oc, i, j in product(range(n), range(o), range(oh), range(ow)):
        g = oc // og
        acc = 0.0
        for ci, p, q in product(range(cg), range(kh), range(kw)):
            y = i * stride[0] - padding[0] + p * dilation[0]
            z = j * stride[1] - padding[1] + q * dilation[1]
            if 0 <= y < h and 0 <= z < wd:
                acc += x[b, g * cg + ci, y, z] * w[oc, ci, p, q]
        out[b, oc, i, j] = acc
    return out


def naive_conv_transpose2d(x, w, stride, padding, output_padding, dilation, groups):
    # every input pixel scatters its kernel-weighted value into the output
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    cg = c // groups
    oh = (h - 1) * stride[0] - 2 * padding[0] + dilation[0] * (kh - 1) + output_padding[0] + 1
    ow = (wd - 1) * stride[1] - 2 * padding[1] + dilation[1] * (kw - 1) + output_padding[1] + 1
    out = np.zeros((n, og * groups, oh, ow))
    for b, ci, i, j, oc, p, q in product(range(n), range(c), range(h), range(wd), range(og),
                                         range(kh), range(kw)):
        y = i * stride[0] - padding[0] + p * dilation[0]
        z = j * stride[1] - padding[1] + q * dilation[1]
        if 0 <= y < oh and 0 <= z < ow:
            out[b, (ci // cg) * og + oc, y, z] += x[b, ci, i, j] * w[ci, oc, p, q]
    return out


CONV = [  # stride, padding, dilation, groups, kernel
    ((1, 1), (0, 0), (1, 1), 1, (3, 3)),
    ((2, 1), (1, 2), (1, 1), 1, (3, 2)),
    ((1, 2), (2, 1), (2, 1), 2, (2, 3)),
    ((3, 3), (0, 1), (1, 2), 4, (1, 2)),
    # pointwise: a GEMM on the input itself (subsampled for a stride), no im2col
    ((1, 1), (0, 0), (1, 1), 1, (1, 1)),
    ((2, 3), (0, 0), (2, 2), 2, (1, 1)),
    ((2, 2), (1, 0), (1, 1), 1, (1, 1)),
]


@pytest.mark.parametrize(("stride", "padding", "dilation", "groups", "k"), CONV)
def test_conv2d_matches_the_definition(stride, padding, dilation, groups, k):
    x = rng.standard_normal((2, 4, 7, 8))
    w = rng.standard_normal((8, 4 // groups, *k))
    got = K[ops.conv2d](x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)
    np.testing.assert_allclose(got, naive_conv2d(x, w, stride, padding, dilation, groups),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("stride", "padding", "dilation", "groups", "k"), CONV)
def test_conv_transpose2d_scatters_each_input_pixel(stride, padding, dilation, groups, k):
    x = rng.standard_normal((2, 4, 4, 5))
    w = rng.standard_normal((4, 2, *k))  # [C, O/groups, kh, kw]
    opad = (stride[0] - 1, 0)  # output_padding must stay below the stride
    got = K[ops.conv_transpose2d](x, w, stride=stride, padding=padding, output_padding=opad,
                                  dilation=dilation, groups=groups)
    want = naive_conv_transpose2d(x, w, stride, padding, opad, dilation, groups)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_conv1d_is_conv2d_of_height_one():
    x = rng.standard_normal((2, 6, 11))
    w = rng.standard_normal((4, 3, 3))
    got = K[ops.conv1d](x, w, stride=(2,), padding=(2,), dilation=(3,), groups=2)
    want = naive_conv2d(x[:, :, None], w[:, :, None], (1, 2), (0, 2), (1, 3), 2)[:, :, 0]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_conv_transpose1d_matches_the_definition():
    x = rng.standard_normal((1, 2, 6))
    w = rng.standard_normal((2, 3, 4))
    got = K[ops.conv_transpose1d](x, w, stride=(3,), padding=(4,), output_padding=(2,),
                                  dilation=(1,), groups=1)
    want = naive_conv_transpose2d(x[:, :, None], w[:, :, None], (1, 3), (0, 4), (0, 2),
                                  (1, 1), 1)[:, :, 0]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_conv2d_float16_accumulates_in_float32():
    x = np.full((1, 512, 1, 1), 0.1, np.float16)
    w = np.ones((1, 512, 1, 1), np.float16)
    got = K[ops.conv2d](x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1)
    assert got.dtype == np.float16
    assert abs(float(got[0, 0, 0, 0]) - 512 * float(np.float16(0.1))) < 0.05


def pool_size(n, k, s, p, d, ceil_mode):
    out = (n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def naive_max_pool2d(x, k, s, p, d, ceil_mode):
    n, c, h, w = x.shape
    oh, ow = pool_size(h, k[0], s[0], p[0], d[0], ceil_mode), pool_size(w, k[1], s[1], p[1], d[1],
                                                                        ceil_mode)
    vals, idx = np.zeros((n, c, oh, ow)), np.zeros((n, c, oh, ow), np.int64)
    for b, ch, i, j in product(range(n), range(c), range(oh), range(ow)):
        best, where = -math.inf, -1
        for a, e in product(range(k[0]), range(k[1])):
            y, z = i * s[0] - p[0] + a * d[0], j * s[1] - p[1] + e * d[1]
            if 0 <= y < h and 0 <= z < w:
                v = x[b, ch, y, z]
                if v > best or (math.isnan(v) and not math.isnan(best)):
                    best, where = v, y * w + z
        vals[b, ch, i, j], idx[b, ch, i, j] = best, where
    return vals, idx


POOL = [  # kernel, stride, padding, dilation, ceil_mode
    ((2, 2), (2, 2), (0, 0), (1, 1), False),
    ((3, 3), (2, 2), (1, 1), (1, 1), True),
    ((3, 2), (2, 3), (1, 1), (2, 1), True),
    ((2, 3), (1, 2), (0, 1), (1, 2), False),
    ((3, 3), (3, 3), (1, 1), (1, 1), True),
]


@pytest.mark.parametrize(("k", "s", "p", "d", "ceil_mode"), POOL)
def test_max_pool2d_values_and_flat_indices(k, s, p, d, ceil_mode):
    x = rng.standard_normal((2, 3, 7, 8))
    x[0, 0, 1, 1] = np.nan
    vals, idx = K[ops.max_pool2d](x, kernel_size=k, stride=s, padding=p, dilation=d,
                                  ceil_mode=ceil_mode)
    want_v, want_i = naive_max_pool2d(x, k, s, p, d, ceil_mode)
    np.testing.assert_array_equal(vals, want_v)
    np.testing.assert_array_equal(idx, want_i)
    assert idx.dtype == np.int64


def test_max_pool2d_ties_take_the_first_index():
    x = np.ones((1, 1, 2, 2))
    _, idx = K[ops.max_pool2d](x, kernel_size=(2, 2), stride=(2, 2), padding=(0, 0),
                               dilation=(1, 1), ceil_mode=False)
    assert idx.tolist() == [[[[0]]]]


def naive_avg_pool2d(x, k, s, p, ceil_mode, count_include_pad):
    n, c, h, w = x.shape
    oh, ow = pool_size(h, k[0], s[0], p[0], 1, ceil_mode), pool_size(w, k[1], s[1], p[1], 1,
                                                                     ceil_mode)
    out = np.zeros((n, c, oh, ow))
    for i, j in product(range(oh), range(ow)):
        y0, z0 = i * s[0] - p[0], j * s[1] - p[1]
        y1, z1 = min(y0 + k[0], h + p[0]), min(z0 + k[1], w + p[1])
        size = (y1 - y0) * (z1 - z0)
        y0, z0, y1, z1 = max(y0, 0), max(z0, 0), min(y1, h), min(z1, w)
        if not count_include_pad:
            size = (y1 - y0) * (z1 - z0)
        out[:, :, i, j] = x[:, :, y0:y1, z0:z1].sum(axis=(2, 3)) / size
    return out


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize(("k", "s", "p", "ceil_mode"), [
    ((2, 2), (2, 2), (0, 0), False), ((3, 3), (2, 2), (1, 1), True),
    ((3, 2), (2, 3), (1, 1), True), ((3, 3), (3, 3), (1, 1), True),
    ((3, 3), (1, 1), (1, 1), False), ((3, 3), (1, 1), (1, 1), True)])  # Inception's
def test_avg_pool2d_divisors_follow_pytorch(k, s, p, ceil_mode, count_include_pad):
    x = rng.standard_normal((2, 2, 7, 8))
    got = K[ops.avg_pool2d](x, kernel_size=k, stride=s, padding=p, ceil_mode=ceil_mode,
                            count_include_pad=count_include_pad)
    np.testing.assert_allclose(got, naive_avg_pool2d(x, k, s, p, ceil_mode, count_include_pad),
                               rtol=1e-12)


@pytest.mark.parametrize("size", [(3, 4), (7, 8), (1, 1), (5, 3), (10, 11)])
def test_adaptive_avg_pool2d_windows(size):
    x = rng.standard_normal((2, 3, 7, 8))
    got = K[ops.adaptive_avg_pool2d](x, output_size=size)
    want = np.zeros((2, 3, *size))
    for i, j in product(range(size[0]), range(size[1])):
        y0, y1 = (i * 7) // size[0], -((-(i + 1) * 7) // size[0])
        z0, z1 = (j * 8) // size[1], -((-(j + 1) * 8) // size[1])
        want[:, :, i, j] = x[:, :, y0:y1, z0:z1].mean(axis=(2, 3))
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_interpolate_nearest_uses_floor_of_scaled_index():
    x = np.arange(3.0).reshape(1, 1, 3)
    got = K[ops.interpolate](x, size=(5,), mode="nearest", align_corners=None)
    assert got.tolist() == [[[0.0, 0.0, 1.0, 1.0, 2.0]]]  # floor(i * 3 / 5)


def test_interpolate_linear_half_pixel_and_align_corners():
    x = np.array([[[0.0, 1.0, 2.0]]])
    half = K[ops.interpolate](x, size=(6,), mode="linear", align_corners=False)
    np.testing.assert_allclose(half, [[[0.0, 0.25, 0.75, 1.25, 1.75, 2.0]]])
    corners = K[ops.interpolate](x, size=(5,), mode="linear", align_corners=True)
    np.testing.assert_allclose(corners, [[[0.0, 0.5, 1.0, 1.5, 2.0]]])


def test_interpolate_bilinear_is_separable_linear():
    x = rng.standard_normal((1, 2, 3, 4))
    got = K[ops.interpolate](x, size=(5, 7), mode="bilinear", align_corners=True)
    rows = np.stack([np.interp(np.linspace(0, 2, 5), np.arange(3), x[0, c, :, j])
                     for c in range(2) for j in range(4)]).reshape(2, 4, 5).transpose(0, 2, 1)
    want = np.stack([[np.interp(np.linspace(0, 3, 7), np.arange(4), rows[c, i])
                      for i in range(5)] for c in range(2)])
    np.testing.assert_allclose(got[0], want, rtol=1e-12, atol=1e-12)


def test_embedding_takes_rows():
    w = np.arange(12.0).reshape(4, 3)
    got = K[ops.embedding](w, np.array([[3, 0], [1, 1]]))
    assert got.shape == (2, 2, 3)
    assert got[0, 0].tolist() == [9.0, 10.0, 11.0]
    assert got[1, 1].tolist() == [3.0, 4.0, 5.0]


@pytest.mark.parametrize(("fill", "dtype"), [(-np.inf, np.float64), (0, np.uint8)])
def test_max_pool2d_never_points_into_the_padding(fill, dtype):
    # every value equals the padding value: each window reports its first in-bounds position
    x = np.full((1, 1, 4, 5), fill, dtype)
    vals, idx = K[ops.max_pool2d](x, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1),
                                  dilation=(1, 1), ceil_mode=True)
    assert idx.tolist() == [[[[0, 1, 3], [5, 6, 8], [15, 16, 18]]]]
    assert (vals == fill).all() and vals.dtype == dtype


def test_small_conv_gemms_run_on_one_blas_thread_and_restore_the_count(monkeypatch):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from ember_cpu import _blas, _workers

    # ember's own split (taken when another core is idle) calls cblas itself
    monkeypatch.setattr(_workers, "threads", lambda: 1)

    libs = _blas._numpy_blas()
    if not libs:
        pytest.skip("numpy's BLAS is not one threadpoolctl controls")
    seen = []
    real = np.matmul

    def spy(*args, **kwargs):
        seen.append([lib.get_num_threads() for lib in libs])
        return real(*args, **kwargs)

    # a GEMM of 2*1024*144*32 flops: above what OpenBLAS runs on one thread by itself
    # (`_blas.BLAS_ONE_THREAD_FLOPS`), below `_blas.SMALL_GEMM_FLOPS`
    x = rng.standard_normal((1, 16, 32, 32)).astype(np.float32)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        before = [lib.get_num_threads() for lib in libs]
        np_matmul, _blas.np.matmul = _blas.np.matmul, spy
        try:
            got = K[ops.conv2d](x, w, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1)
        finally:
            _blas.np.matmul = np_matmul
        after = [lib.get_num_threads() for lib in libs]
    assert seen == [[1] * len(libs)]  # one GEMM, on one thread
    assert after == before == [2] * len(libs)
    np.testing.assert_allclose(got, naive_conv2d(x.astype(np.float64), w.astype(np.float64),
                                                 (1, 1), (1, 1), (1, 1), 1), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize(("bias", "norm", "residual", "relu"),
                         [(True, True, True, True), (False, True, False, True),
                          (True, False, True, False), (False, False, False, True)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fused_conv2d_applies_its_epilogue_as_the_definition(bias, norm, residual, relu,
                                                             dtype):
    from ember.ops import composite as cops

    x = rng.standard_normal((2, 4, 7, 8))
    w = rng.standard_normal((6, 2, 3, 3))
    y = naive_conv2d(x, w, (2, 1), (1, 1), (1, 1), 2)
    per = {k: rng.standard_normal(6) for k in ("b", "s", "t", "m")}
    per["v"] = rng.random(6) + 0.2
    res = rng.standard_normal(y.shape)
    extra = ([per["b"]] if bias else []) + \
        ([per[k] for k in ("s", "t", "m", "v")] if norm else []) + ([res] if residual else [])
    want = y + (per["b"][:, None, None] if bias else 0)
    if norm:
        k = per["s"] / np.sqrt(per["v"] + 1e-3)
        want = (want - per["m"][:, None, None]) * k[:, None, None] + per["t"][:, None, None]
    want = want + (res if residual else 0)
    want = np.maximum(want, 0) if relu else want
    dt = np.dtype(dtype)
    got = K[ops.composite.fused_conv2d](
        x.astype(dt), w.astype(dt), *[a.astype(dt) for a in extra], stride=(2, 1),
        padding=(1, 1), dilation=(1, 1), groups=2, bias=bias, norm=norm, residual=residual,
        relu=relu, eps=1e-3)
    assert got.dtype == dt and cops.fused_conv2d in K
    tol = 1e-12 if dt == np.float64 else 1e-4
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_fused_conv2d_refuses_a_residual_of_another_shape():
    from ember.backend import ShapeError

    x = rng.standard_normal((1, 2, 5, 5))
    w = rng.standard_normal((3, 2, 3, 3))
    with pytest.raises(ShapeError, match="residual"):
        K[ops.composite.fused_conv2d](x, w, np.zeros((1, 3, 5, 5)), stride=(1, 1),
                                      padding=(0, 0), dilation=(1, 1), groups=1, bias=False,
                                      norm=False, residual=True, relu=False, eps=1e-5)


# -- the values-only max-pooling and the work buffers of convolutions ---------------------------

@pytest.mark.parametrize(("k", "s", "p", "d", "ceil_mode"),
                         [*POOL, ((3, 3), (2, 2), (1, 1), (1, 1), False),  # ResNet's stem
                          ((1, 1), (1, 1), (0, 0), (1, 1), False)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32"])
def test_max_pool2d_values_matches_the_definition(k, s, p, d, ceil_mode, dtype):
    from ember.ops import composite as cops

    x = rng.standard_normal((2, 3, 9, 8)) * 10
    if dtype.startswith("float"):
        x[0, 0, 1, 1], x[1, 2, 4, 4], x[1, 1, 0, 0] = np.nan, np.inf, -np.inf
    x = x.astype(dtype)
    got = K[cops.max_pool2d_values](x, kernel_size=k, stride=s, padding=p, dilation=d,
                                    ceil_mode=ceil_mode)
    want, _ = naive_max_pool2d(x.astype(np.float64), k, s, p, d, ceil_mode)
    assert got.dtype == x.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.astype(np.float64), want)
    # and what the indices kernel returns as its values
    vals, _ = K[ops.max_pool2d](x, kernel_size=k, stride=s, padding=p, dilation=d,
                                ceil_mode=ceil_mode)
    np.testing.assert_array_equal(got, vals)


def test_max_pool2d_values_reuses_no_stale_padding_between_shapes():
    # 9 and 8 rows of input both need a padded work buffer of 10 rows here; after the large
    # values of the first, the second's bottom padding row must hold the lowest value again
    from ember.ops import composite as cops

    params = dict(kernel_size=(2, 2), stride=(2, 2), padding=(1, 1), dilation=(1, 1),
                  ceil_mode=False)
    for h in (9, 8, 9, 8):
        x = rng.random((1, 2, h, 5)) + 100 if h == 9 else -rng.random((1, 2, h, 5)) - 1
        want, _ = naive_max_pool2d(x, (2, 2), (2, 2), (1, 1), (1, 1), False)
        np.testing.assert_array_equal(K[cops.max_pool2d_values](x, **params), want)


def test_conv2d_reuses_its_work_buffers_without_stale_values():
    # same shapes twice (the buffers are reused), then another input whose padded copy has
    # the same shape under another padding: the zero border must still be zero
    w = rng.standard_normal((3, 2, 3, 3))
    for shape, pad in [((1, 2, 6, 5), (1, 1)), ((1, 2, 6, 5), (1, 1)), ((1, 2, 4, 3), (2, 2)),
                       ((1, 2, 6, 5), (1, 1)), ((2, 2, 6, 5), (1, 1))]:
        x = rng.standard_normal(shape) + 50
        for stride in ((2, 1), (1, 1)):
            got = K[ops.conv2d](x, w, stride=stride, padding=pad, dilation=(1, 1), groups=1)
            np.testing.assert_allclose(got, naive_conv2d(x, w, stride, pad, (1, 1), 1),
                                       rtol=1e-12, atol=1e-9)
    x = rng.standard_normal((1, 2, 6, 5)).astype(np.float32)  # same shape, another dtype
    got = K[ops.conv2d](x, w.astype(np.float32), stride=(2, 1), padding=(1, 1),
                        dilation=(1, 1), groups=1)
    np.testing.assert_allclose(got, naive_conv2d(x, w.astype(np.float32), (2, 1), (1, 1), (1, 1),
                                                 1), rtol=1e-5, atol=1e-5)


def test_scratch_buffers_stay_within_their_budget(monkeypatch):
    from ember_cpu import _scratch

    monkeypatch.setattr(_scratch, "_BUFFERS", _scratch._Buffers())
    monkeypatch.setattr(_scratch, "SCRATCH_BYTES", 1000)
    a, fresh_a = _scratch.scratch(("t",), (100,), np.float32)  # 400 bytes
    b, fresh_b = _scratch.scratch(("t",), (100,), np.float32)
    assert fresh_a and not fresh_b and a is b
    _scratch.scratch(("u",), (100,), np.float32)
    _scratch.scratch(("t",), (100,), np.float32)  # "t" is now the most recently used
    _scratch.scratch(("v",), (100,), np.float32)  # 1200 bytes: "u" goes
    assert set(k[0] for k in _scratch._BUFFERS.held) == {("t",), ("v",)}
    assert _scratch._BUFFERS.nbytes == 800
    big, fresh = _scratch.scratch(("w",), (1000,), np.float32, zeroed=True)  # over budget
    assert fresh and not big.any() and _scratch._BUFFERS.nbytes == 800


@pytest.mark.parametrize(("shape", "k", "padding", "dilation"), [
    ((1, 32, 22, 24), (3, 3), (1, 1), (1, 1)),  # ResNet's 3x3 blocks on a larger map
    ((2, 32, 9, 21), (2, 3), (2, 1), (2, 1)),  # batch 2, dilated, uneven padding
    ((1, 33, 5, 40), (2, 3), (0, 1), (2, 1)),
])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_stride_one_conv2d_by_accumulated_tap_gemms_matches_the_definition(
        shape, k, padding, dilation, dtype, monkeypatch):
    from ember_cpu import _blas, _workers
    from ember_cpu import nn as cpu_nn

    if not _blas.has_gemm(np.dtype(dtype)):
        pytest.skip("numpy's BLAS exports no cblas gemm under a known name")
    monkeypatch.setattr(_workers, "threads", lambda: 1)  # one GEMM per tap, not per chunk
    calls = []
    monkeypatch.setattr(_blas, "gemm", (lambda f: lambda *a, **kw: (calls.append(1),
                                                                    f(*a, **kw))[1])(_blas.gemm))
    w = rng.standard_normal((4, shape[1], *k))
    for _ in range(2):  # the second call reuses the work buffers
        x = rng.standard_normal(shape)
        got = K[ops.conv2d](x.astype(dtype), w.astype(dtype), stride=(1, 1), padding=padding,
                            dilation=dilation, groups=1)
        tol = 1e-12 if dtype == "float64" else 1e-4
        np.testing.assert_allclose(got, naive_conv2d(x, w, (1, 1), padding, dilation, 1),
                                   rtol=tol, atol=tol)
        assert got.dtype == dtype and got.flags.c_contiguous
    assert len(calls) == 2 * shape[0] * k[0] * k[1]  # the path ran: one GEMM per tap and image
    # without cblas the same convolution takes the other paths, with the same result
    monkeypatch.setattr(cpu_nn._blas, "has_gemm", lambda dt: False)
    again = K[ops.conv2d](x.astype(dtype), w.astype(dtype), stride=(1, 1), padding=padding,
                          dilation=dilation, groups=1)
    np.testing.assert_allclose(again, got, rtol=tol, atol=tol)
    assert len(calls) == 2 * shape[0] * k[0] * k[1]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gemm_reads_strided_windows_and_accumulates(dtype):
    from numpy.lib.stride_tricks import as_strided

    from ember_cpu import _blas

    if not _blas.has_gemm(np.dtype(dtype)):
        pytest.skip("numpy's BLAS exports no cblas gemm under a known name")
    a = rng.standard_normal((5, 3)).astype(dtype)
    buf = rng.standard_normal(200).astype(dtype)
    item = buf.itemsize
    b = as_strided(buf[7:], (3, 11), (40 * item, item))  # rows 40 apart, starting at 7
    out = np.zeros((5, 20), dtype)[:, 2:13]  # a window of a wider matrix
    want = a.astype(np.float64) @ np.asarray(b, np.float64)
    with _blas.one_thread(0):
        _blas.gemm(a, b, out, accumulate=False)
        tol = 1e-12 if dtype == "float64" else 1e-5
        np.testing.assert_allclose(out, want, rtol=tol, atol=tol)
        _blas.gemm(a, b, out, accumulate=True)
        np.testing.assert_allclose(out, 2 * want, rtol=tol, atol=tol)
        with pytest.raises(ValueError, match="not a row-major matrix view"):
            _blas.gemm(a, np.asarray(b)[:, ::2], out[:, :6], accumulate=False)
        with pytest.raises(ValueError, match="gemm:"):
            _blas.gemm(a, b, out[:, :4], accumulate=False)


@pytest.mark.parametrize(("bias", "norm", "residual", "relu"),
                         [(True, True, True, True), (False, False, False, False),
                          (False, True, False, True)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fused_conv2d_on_the_tap_gemm_path_applies_its_epilogue(bias, norm, residual, relu,
                                                                dtype):
    # the epilogue reads the taps' work buffer through a strided view and writes a new array
    from ember.ops import composite as cops

    x = rng.standard_normal((1, 32, 6, 22))
    w = rng.standard_normal((5, 32, 3, 3))
    y = naive_conv2d(x, w, (1, 1), (1, 1), (1, 1), 1)
    b, s, t, m = (rng.standard_normal(5) for _ in range(4))
    v = rng.random(5) + 0.2
    res = rng.standard_normal(y.shape)
    want = y + (b[:, None, None] if bias else 0)
    if norm:
        want = (want - m[:, None, None]) * (s / np.sqrt(v + 1e-5))[:, None, None] + \
            t[:, None, None]
    want = want + (res if residual else 0)
    want = np.maximum(want, 0) if relu else want
    extra = ([b] if bias else []) + ([s, t, m, v] if norm else []) + ([res] if residual else [])
    dt = np.dtype(dtype)
    outs = []
    for _ in range(2):  # the second call reuses the work buffer the first one's view was in
        outs.append(K[cops.fused_conv2d](
            x.astype(dt), w.astype(dt), *[a.astype(dt) for a in extra], stride=(1, 1),
            padding=(1, 1), dilation=(1, 1), groups=1, bias=bias, norm=norm,
            residual=residual, relu=relu, eps=1e-5))
    tol = 1e-10 if dtype == "float64" else 1e-4
    for got in outs:
        assert got.dtype == dt and got.flags.c_contiguous
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_tap_gemm_results_never_alias_the_work_buffer():
    # a (3, 1) kernel without column padding has no spare columns: the valid outputs are the
    # whole work buffer, which must still be copied out (a later call overwrites it)
    w = rng.standard_normal((4, 32, 3, 1))
    x1, x2 = rng.standard_normal((2, 1, 32, 5, 30))
    params = dict(stride=(1, 1), padding=(1, 0), dilation=(1, 1), groups=1)
    first = K[ops.conv2d](x1, w, **params)
    kept = first.copy()
    K[ops.conv2d](x2, w, **params)
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_allclose(first, naive_conv2d(x1, w, (1, 1), (1, 0), (1, 1), 1),
                               rtol=1e-12, atol=1e-12)
