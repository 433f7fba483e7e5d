"""conv2d on ``wgpu:0`` as an implicit GEMM (`ember_wgpu.conv`): each kernel against a numpy
float64 convolution over padded, strided, dilated windows, on tile edges, groups, strided
input views and 16-bit floats; that the implicit kernel is the one that runs and allocates
nothing but its output; gradients through autodiff; the im2col fallback."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import ember

RNG = np.random.default_rng(11)
F = ember.nn.functional
Pair = tuple[int, int]


# -- the float64 oracle ------------------------------------------------------------------------

def _windows(x: np.ndarray, kh: int, kw: int, stride: Pair, padding: Pair,
             dilation: Pair) -> np.ndarray:
    """``[N, C, OH, OW, kh, kw]``: each output's receptive field of ``x`` (zero-padded)."""
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
    rows = [[xp[:, :, ky * dh:ky * dh + sh * (oh - 1) + 1:sh,
                kx * dw:kx * dw + sw * (ow - 1) + 1:sw] for kx in range(kw)]
            for ky in range(kh)]
    return np.stack([np.stack(r, axis=-1) for r in rows], axis=-2)


def conv_ref(x: np.ndarray, w: np.ndarray, stride: Pair = (1, 1), padding: Pair = (0, 0),
             dilation: Pair = (1, 1), groups: int = 1) -> np.ndarray:
    """PyTorch's conv2d in float64, by ``np.einsum`` over the windows of each group."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    o, cg, kh, kw = w.shape
    win = _windows(x, kh, kw, stride, padding, dilation)
    og = o // groups
    return np.concatenate([
        np.einsum("nchwyx,ocyx->nohw", win[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og])
        for g in range(groups)], axis=1)


def test_the_oracle_agrees_with_a_loop_over_every_output() -> None:
    x = RNG.standard_normal((2, 4, 7, 6))
    w = RNG.standard_normal((6, 2, 3, 2))
    got = conv_ref(x, w, (2, 1), (1, 2), (2, 1), groups=2)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (2, 2)))
    want = np.zeros_like(got)
    for o in range(6):
        g = o // 3
        for i in range(got.shape[2]):
            for j in range(got.shape[3]):
                patch = xp[:, 2 * g:2 * g + 2, 2 * i:2 * i + 5:2, j:j + 2]
                want[:, o, i, j] = (patch * w[o]).sum(axis=(1, 2, 3))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


# -- helpers -----------------------------------------------------------------------------------

@pytest.fixture
def prefer(wg_device: object) -> Iterator[Callable[[str | None], None]]:
    """Sets ``conv.prefer`` for one test."""
    from ember_wgpu import conv

    def set_(p: str | None) -> None:
        conv.prefer = p

    yield set_
    conv.prefer = None


def _on(dev: Any, a: np.ndarray, dtype: str) -> tuple[ember.Tensor, np.ndarray]:
    """``a`` on ``dev`` as ``dtype``, and the values it holds there (16-bit floats rounded)."""
    t = ember.tensor(a.astype(np.float32), device=dev).to(getattr(ember, dtype))
    return t, t.to(ember.float32).numpy().astype(np.float64)


def _view(dev: Any, a: np.ndarray, dtype: str, layout: str) -> tuple[ember.Tensor, np.ndarray]:
    """``a`` as a view of another array: ``dense``, ``permuted`` (stored NHWC), ``sliced``
    (every other column of a wider array, from row 1), ``flipped`` (stored mirrored)."""
    if layout == "dense":
        return _on(dev, a, dtype)
    if layout == "permuted":
        t, v = _on(dev, np.ascontiguousarray(a.transpose(0, 2, 3, 1)), dtype)
        return t.permute(0, 3, 1, 2), v.transpose(0, 3, 1, 2)
    if layout == "sliced":
        n, c, h, w = a.shape
        big = RNG.standard_normal((n, c, h + 1, 2 * w)).astype(np.float32)
        big[:, :, 1:, ::2] = a
        t, v = _on(dev, big, dtype)
        return t[:, :, 1:, ::2], v[:, :, 1:, ::2]
    assert layout == "flipped"
    t, v = _on(dev, np.ascontiguousarray(a[:, :, :, ::-1]), dtype)
    return t.flip(3), v[:, :, :, ::-1]


def _supported(dev: Any, dtype: str) -> None:
    if not dev.supports(getattr(ember, dtype)):
        pytest.skip(f"the adapter has no {dtype}")


def _check(got: ember.Tensor, x: np.ndarray, w: np.ndarray, dtype: str, **params: Any) -> None:
    """``got`` against the float64 convolution of the values ``x``, ``w`` held on the device:
    an f32 accumulation's error (relative to the sum of the products' magnitudes), plus half
    an ulp of the dtype for the one rounding as the result is stored."""
    want = conv_ref(x, w, **params)
    scale = conv_ref(np.abs(x), np.abs(w), **params)
    out = got.to(ember.float32).numpy().astype(np.float64)
    assert out.shape == want.shape, (out.shape, want.shape)
    ulp = {"float32": 0.0, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}[dtype]
    bound = 1e-5 * scale + ulp * np.abs(want) + (6e-8 if dtype == "float16" else 1e-30)
    bad = np.abs(out - want) > bound
    assert not bad.any(), (f"{bad.sum()} of {bad.size} off; worst "
                           f"{np.max(np.abs(out - want) - bound):.3g} past the bound")


# name: x shape, w shape, stride, padding, dilation, groups
CASES: dict[str, tuple[Any, ...]] = {
    "3x3-odd-sizes": ((3, 5, 13, 11), (7, 5, 3, 3), (1, 1), (1, 1), (1, 1), 1),
    "3x3-past-a-128-tile": ((2, 17, 12, 11), (130, 17, 3, 3), (1, 1), (1, 1), (1, 1), 1),
    "1x1": ((2, 33, 9, 7), (65, 33, 1, 1), (1, 1), (0, 0), (1, 1), 1),
    "1x1-stride-2": ((2, 8, 9, 10), (12, 8, 1, 1), (2, 2), (0, 0), (1, 1), 1),
    "7x7-stride-2-padding-3": ((2, 3, 23, 21), (40, 3, 7, 7), (2, 2), (3, 3), (1, 1), 1),
    "dilation-2": ((2, 6, 14, 15), (9, 6, 3, 3), (1, 1), (2, 2), (2, 2), 1),
    "stride-2-dilation-2-uneven": ((1, 4, 17, 12), (5, 4, 3, 2), (2, 1), (1, 2), (2, 3), 1),
    "groups": ((2, 12, 10, 9), (18, 4, 3, 3), (1, 2), (1, 1), (1, 1), 3),
    "depthwise": ((2, 16, 11, 13), (16, 1, 3, 3), (1, 1), (1, 1), (1, 1), 16),
    "depthwise-multiplier-stride-2": ((2, 8, 15, 15), (24, 1, 5, 5), (2, 2), (2, 2), (1, 1),
                                      8),
    "padding-wider-than-kernel": ((1, 3, 5, 4), (4, 3, 2, 2), (1, 1), (3, 2), (1, 1), 1),
    "one-output": ((3, 4, 3, 3), (5, 4, 3, 3), (1, 1), (0, 0), (1, 1), 1),
}


@pytest.mark.parametrize("kind", ["tile128", "tile64", "direct"])
@pytest.mark.parametrize("case", list(CASES))
def test_every_implicit_kernel_matches_the_float64_oracle(prefer: Any, wg_device: object,
                                                          kind: str, case: str) -> None:
    xs, ws, stride, padding, dilation, groups = CASES[case]
    prefer(kind)
    x, xv = _on(wg_device, RNG.standard_normal(xs), "float32")
    w, wv = _on(wg_device, RNG.standard_normal(ws), "float32")
    got = F.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)
    _check(got, xv, wv, "float32", stride=stride, padding=padding, dilation=dilation,
           groups=groups)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("kind", ["tile128", "tile64", "direct"])
@pytest.mark.parametrize("case", ["3x3-past-a-128-tile", "7x7-stride-2-padding-3", "groups",
                                  "dilation-2"])
def test_16_bit_floats_load_into_f32_and_round_once(prefer: Any, wg_device: Any, dtype: str,
                                                    kind: str, case: str) -> None:
    _supported(wg_device, dtype)
    xs, ws, stride, padding, dilation, groups = CASES[case]
    prefer(kind)
    x, xv = _on(wg_device, RNG.standard_normal(xs), dtype)
    w, wv = _on(wg_device, RNG.standard_normal(ws) * 0.5, dtype)
    got = F.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)
    assert got.dtype == getattr(ember, dtype)
    _check(got, xv, wv, dtype, stride=stride, padding=padding, dilation=dilation,
           groups=groups)


@pytest.mark.parametrize("layout", ["permuted", "sliced", "flipped"])
@pytest.mark.parametrize("kind", ["tile128", "tile64", "direct"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_strided_input_views_are_read_in_place(prefer: Any, wg_device: Any, layout: str,
                                               kind: str, dtype: str) -> None:
    _supported(wg_device, dtype)
    prefer(kind)
    x, xv = _view(wg_device, RNG.standard_normal((2, 6, 9, 10)), dtype, layout)
    w, wv = _on(wg_device, RNG.standard_normal((8, 3, 3, 3)), dtype)
    assert not x.payload.is_contiguous()
    got = F.conv2d(x, w, stride=(2, 1), padding=(1, 1), groups=2)
    _check(got, xv, wv, dtype, stride=(2, 1), padding=(1, 1), groups=2)


def test_a_strided_weight_is_read_right(wg_device: object) -> None:
    x, xv = _on(wg_device, RNG.standard_normal((2, 5, 8, 9)), "float32")
    w, wv = _view(wg_device, RNG.standard_normal((70, 5, 3, 3)), "float32", "permuted")
    _check(F.conv2d(x, w, padding=(1, 1)), xv, wv, "float32", padding=(1, 1))


# -- which kernel runs ---------------------------------------------------------------------

def test_path_names_the_implicit_kernel_for_each_shape(wg_device: Any) -> None:
    from ember_wgpu import conv

    rt = wg_device._backend.runtime
    f32 = np.dtype(np.float32)
    assert conv.path(rt, 64, 8 * 32 * 32, 64 * 9, f32) == "tile64"
    assert conv.path(rt, 128, 8 * 16 * 16, 128 * 9, f32) == "tile128"
    assert conv.path(rt, 256, 8 * 7 * 7, 256 * 9, np.dtype(np.float16)) == "tile128"
    assert conv.path(rt, 1, 8 * 32 * 32, 9, f32, groups=64) == "direct"  # depthwise
    assert conv.path(rt, 64, 3 * 3, 64 * 9, f32) == "direct"  # one small image


@pytest.mark.parametrize("case,kind", [("3x3-odd-sizes", "direct"), ("1x1", "tile64"),
                                       ("3x3-past-a-128-tile", "tile128"),
                                       ("depthwise", "direct")])
def test_the_implicit_kernel_runs_alone_and_allocates_only_the_output(
        wg_device: Any, monkeypatch: pytest.MonkeyPatch, case: str, kind: str) -> None:
    from ember_wgpu import conv

    rt = wg_device._backend.runtime
    xs, ws, stride, padding, dilation, groups = CASES[case]
    x, xv = _on(wg_device, RNG.standard_normal(xs), "float32")
    w, wv = _on(wg_device, RNG.standard_normal(ws), "float32")
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    F.conv2d(x, w, **kw).numpy()  # the pipeline is built
    sources: list[str] = []
    sizes: list[int] = []
    record, empty = rt.record, rt.empty
    monkeypatch.setattr(rt, "record", lambda src, *a: (sources.append(src), record(src, *a)))
    monkeypatch.setattr(rt, "empty", lambda shape, dt: (sizes.append(int(np.prod(shape))),
                                                        empty(shape, dt))[1])
    got = F.conv2d(x, w, **kw)
    monkeypatch.undo()
    want = conv_ref(xv, wv, **kw)
    # one dispatch, of the implicit kernel; one buffer, the output's (an im2col matrix
    # would hold C/G * kh * kw * N * OH * OW elements)
    assert sources == [conv._SOURCES[(x.payload.dtype, w.payload.dtype, x.payload.dtype, kind)]]
    assert sizes == [want.size]
    _check(got, xv, wv, "float32", **kw)


def test_the_im2col_fallback_allocates_its_matrix(prefer: Any, wg_device: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # the other side of the test above: forced onto im2col, the matrix is allocated and the
    # result is the same
    prefer("im2col")
    rt = wg_device._backend.runtime
    x, xv = _on(wg_device, RNG.standard_normal((2, 5, 8, 9)), "float32")
    w, wv = _on(wg_device, RNG.standard_normal((7, 5, 3, 3)), "float32")
    sizes: list[int] = []
    empty = rt.empty
    monkeypatch.setattr(rt, "empty", lambda shape, dt: (sizes.append(int(np.prod(shape))),
                                                        empty(shape, dt))[1])
    got = F.conv2d(x, w, padding=(1, 1))
    monkeypatch.undo()
    assert 5 * 9 * 2 * 8 * 9 in sizes
    _check(got, xv, wv, "float32", padding=(1, 1))


def test_a_grid_past_the_work_group_limit_continues_in_z_rows_or_falls_back(
        prefer: Any, wg_device: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from ember_wgpu import conv

    rt = wg_device._backend.runtime
    x, xv = _on(wg_device, RNG.standard_normal((2, 6, 20, 20)), "float32")
    w, wv = _on(wg_device, RNG.standard_normal((80, 3, 3, 3)), "float32")
    # 800 columns: 13 tiles of 64; 6 to a z row, so 3 z rows per group (the last 5 tiles
    # of the last row return at once), 6 z rows in all
    f32 = np.dtype(np.float32)
    monkeypatch.setattr(rt, "max_groups", 5)  # 10 z rows: too many
    assert conv.path(rt, 40, 800, 27, f32, groups=2) == "im2col"
    monkeypatch.setattr(rt, "max_groups", 6)
    assert conv.path(rt, 40, 800, 27, f32, groups=2) == "tile64"
    _check(F.conv2d(x, w, padding=(1, 1), groups=2), xv, wv, "float32", padding=(1, 1),
           groups=2)


# -- through conv2d: conv1d, transposes, gradients -------------------------------------------

def test_conv1d_and_the_transposed_convolutions_stay_right(wg_device: object) -> None:
    x, xv = _on(wg_device, RNG.standard_normal((2, 6, 19)), "float32")
    w, wv = _on(wg_device, RNG.standard_normal((10, 3, 5)), "float32")
    got = F.conv1d(x, w, stride=2, padding=2, dilation=1, groups=2).numpy()
    want = conv_ref(xv[:, :, None], wv[:, :, None], (1, 2), (0, 2), (1, 1), 2)[:, :, 0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # conv_transpose2d as the adjoint of conv2d: <conv(x, w), y> == <x, conv_t(y, w)>
    xs, ws = (2, 4, 9, 8), (6, 2, 3, 3)
    params = dict(stride=(2, 2), padding=(1, 1), dilation=(1, 2), groups=2)
    x2v = RNG.standard_normal(xs).astype(np.float32).astype(np.float64)
    w2, w2v = _on(wg_device, RNG.standard_normal(ws), "float32")
    out = conv_ref(x2v, w2v, **params)
    y, yv = _on(wg_device, RNG.standard_normal(out.shape), "float32")
    extra = tuple(n - ((o - 1) * 2 - 2 + d * 2 + 1) for n, o, d in
                  zip(xs[2:], out.shape[2:], (1, 2), strict=True))
    back = F.conv_transpose2d(y, w2, stride=2, padding=1, output_padding=extra, groups=2,
                              dilation=(1, 2)).numpy()
    assert back.shape == xs
    np.testing.assert_allclose(np.sum(back * x2v), np.sum(out * yv), rtol=1e-5)


def _grad_x_ref(g: np.ndarray, w: np.ndarray, xshape: tuple[int, ...], stride: Pair,
                padding: Pair, dilation: Pair, groups: int) -> np.ndarray:
    """The gradient of ``sum(conv(x, w) * g)`` by ``x``: each window's share scattered back."""
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    n, c, h, wd = xshape
    o, cg, kh, kw = w.shape
    og = o // groups
    oh, ow = g.shape[2:]
    gx = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    for gi in range(groups):
        gg, wg = g[:, gi * og:(gi + 1) * og], w[gi * og:(gi + 1) * og]
        for ky in range(kh):
            for kx in range(kw):
                gx[:, gi * cg:(gi + 1) * cg, ky * dh:ky * dh + sh * (oh - 1) + 1:sh,
                   kx * dw:kx * dw + sw * (ow - 1) + 1:sw] += np.einsum(
                    "nohw,oc->nchw", gg, wg[:, :, ky, kx])
    return gx[:, :, ph:ph + h, pw:pw + wd]


@pytest.mark.parametrize("case", ["3x3-odd-sizes", "7x7-stride-2-padding-3", "groups",
                                  "stride-2-dilation-2-uneven", "depthwise"])
def test_gradients_through_autodiff_match_float64(case: str, wg_device: object) -> None:
    xs, ws, stride, padding, dilation, groups = CASES[case]
    dev = ember.device("autodiff<wgpu:0>")
    xh = RNG.standard_normal(xs).astype(np.float32)
    wh = RNG.standard_normal(ws).astype(np.float32)
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    gh = RNG.standard_normal(conv_ref(xh, wh, **kw).shape).astype(np.float32)
    x = ember.tensor(xh, device=dev, requires_grad=True)
    w = ember.tensor(wh, device=dev, requires_grad=True)
    grads = (F.conv2d(x, w, **kw) * ember.tensor(gh, device=dev)).sum().backward()
    x64, w64, g64 = xh.astype(np.float64), wh.astype(np.float64), gh.astype(np.float64)
    og, cg = ws[0] // groups, ws[1]
    win = _windows(x64, ws[2], ws[3], stride, padding, dilation)
    want_w = np.concatenate([
        np.einsum("nohw,nchwyx->ocyx", g64[:, gi * og:(gi + 1) * og],
                  win[:, gi * cg:(gi + 1) * cg]) for gi in range(groups)])
    want_x = _grad_x_ref(g64, w64, xs, stride, padding, dilation, groups)
    np.testing.assert_allclose(grads[w].numpy(), want_w, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(grads[x].numpy(), want_x, rtol=1e-4, atol=1e-4)
