"""Neural-network kernels in PyTorch layouts (NCL / NCHW, OIHW weights).

Convolutions copy every receptive field once into an im2col matrix (a compiled loop in
`_conv_jit` for float32/float64, ``sliding_window_view`` otherwise) and hand that to BLAS;
transposed convolutions (conv2d's input gradient) are one GEMM per group followed by col2im,
or, outside float32/float64, convolutions of the zero-dilated input with the flipped kernel.
Max-pooling takes each window's maximum and position in one compiled pass, or, where no
indices are wanted, the maxima alone by strided ``np.maximum`` over rows and then columns.
`fused_conv2d` (inference) runs wide 3x3 stride-1 layers by Winograd's F(4x4, 3x3)
(`winograd`), and im2col layers with the epilogue inside the GEMMs' chunks (`_conv_chunks`);
the GEMMs and epilogues of a batch-1 layer are cut into chunks for `_workers` when the BLAS
may use more than one thread.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from ember.backend import ShapeError
from ember.backend.geometry import interpolate, pool_output_size
from ember.ops import check_shapes, nn
from ember.ops import composite as cops
from numpy.lib.stride_tricks import as_strided, sliding_window_view

from . import _blas, _conv_chunks, _conv_jit, _workers, winograd
from ._common import F32, F64, LOW
from ._scratch import scratch

__all__ = ["KERNELS", "conv2d", "conv_transpose2d", "fused_conv2d", "max_pool2d_values"]

Pair = tuple[int, int]


def _windows(x: np.ndarray, k: Pair, stride: Pair, dilation: Pair) -> np.ndarray:
    """``[N, C, OH, OW, kh, kw]`` view of the receptive fields of a padded ``x``."""
    span = ((k[0] - 1) * dilation[0] + 1, (k[1] - 1) * dilation[1] + 1)
    w = sliding_window_view(x, span, axis=(2, 3))
    return w[:, :, ::stride[0], ::stride[1], ::dilation[0], ::dilation[1]]


def _zero_pad(x: np.ndarray, before: Pair, after: Pair, value: Any = 0) -> np.ndarray:
    if not any(before) and not any(after):
        return x
    n, c, h, w = x.shape
    out = np.full((n, c, h + before[0] + after[0], w + before[1] + after[1]), value, x.dtype)
    out[:, :, before[0]:before[0] + h, before[1]:before[1] + w] = x
    return out


def _out_size(n: int, k: int, s: int, p: int, d: int) -> int:
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


def _geometry(kh: int, kw: int, stride: Pair, padding: Pair, dilation: Pair
              ) -> _conv_jit.Geometry:
    return (int(kh), int(kw), int(stride[0]), int(stride[1]), int(padding[0]), int(padding[1]),
            int(dilation[0]), int(dilation[1]))


def _compiled(*arrays: np.ndarray) -> bool:
    """Whether the numba loops take these arrays: float32 or float64, all of one dtype."""
    dt = arrays[0].dtype
    return (dt == F32 or dt == F64) and all(a.dtype == dt for a in arrays[1:])


def conv2d(x: np.ndarray, w: np.ndarray, stride: Pair = (1, 1), padding: Pair = (0, 0),
           dilation: Pair = (1, 1), groups: int = 1) -> np.ndarray:
    """2-D cross-correlation of ``x[N, C, H, W]`` with ``w[O, C/groups, kh, kw]``."""
    check_shapes(nn.conv2d, [x.shape, w.shape], dict(stride=stride, padding=padding,
                                                      dilation=dilation, groups=groups))
    return _conv2d(x, w, stride, padding, dilation, groups, False)[0]


def _conv2d(x: np.ndarray, w: np.ndarray, stride: Pair, padding: Pair, dilation: Pair,
            groups: int, view: bool) -> tuple[np.ndarray, bool]:
    """`conv2d`, and whether the result is borrowed: with ``view`` it may be a view into a
    work buffer, valid until this thread's next convolution (`fused_conv2d` reads it once)."""
    dt = x.dtype
    if dt in LOW:
        return conv2d(x.astype(F32), w.astype(F32), stride, padding, dilation,
                      groups).astype(dt), False
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = _out_size(h, kh, stride[0], padding[0], dilation[0])
    ow = _out_size(wd, kw, stride[1], padding[1], dilation[1])
    if not _compiled(x, w) or min(n, c, oh, ow, o) <= 0:
        return _conv2d_numpy(x, w, stride, padding, dilation, groups), False
    cols_k = cg * kh * kw
    gemm_flops = 2 * (o // groups) * cols_k * oh * ow  # of each image's (and group's) GEMM
    wg = np.ascontiguousarray(w).reshape(groups, o // groups, cols_k)
    if kh == kw == 1 and not any(padding):
        # a pointwise convolution is a GEMM on the (subsampled) input itself: no im2col
        xs = x[:, :, ::stride[0], ::stride[1]] if tuple(stride) != (1, 1) else x
        xs = np.ascontiguousarray(xs).reshape(n, groups, cg, oh * ow)
        return _gemm_images(wg, xs, gemm_flops).reshape(n, o, oh, ow), False
    if _takes_taps(x, w, stride, padding, groups, ow):
        # wide maps, enough channels for each tap's GEMM (K = C): accumulate the taps' GEMMs
        # over windows of the padded input, no im2col (ResNet-18's 56x56 and 28x28 blocks:
        # 5-8% of its time, one thread, 2-core VM, 2026-12-06; with C=1 it was 10x slower,
        # and letting in 14x14 (16/14 spare columns) or 7x7 maps made the whole 3% / 40%
        # slower)
        valid = _conv_taps(x, w, padding, dilation, (oh, ow), gemm_flops)
        return (valid, True) if view else (valid.copy(), False)
    if _takes_shifted(x, stride, padding, oh, ow):
        # the shifted planes make the GEMM compute (Hp*Wp) / (OH*OW) times the outputs: beyond
        # ~1.2 (small maps: 14x14 and 7x7 with a 3x3 kernel) im2col's exact columns win
        # (one thread, 2-core VM, 2026-12-05: 512ch 7x7 9.5 -> 6.0 ms, 256ch 14x14 6.2 -> 5.7
        # ms; 56x56 stays shifted, 4.7 vs 6.8 ms)
        cols, hp, wp = shifted_cols(x, (kh, kw), padding, dilation)
        # per image ([O/G, K] @ [K, Hp*Wp]: OpenBLAS runs these faster than one wide GEMM)
        per_image = cols.reshape(groups, cols_k, n, hp * wp).transpose(2, 0, 1, 3)
        full = _blas.matmul(wg, per_image, gemm_flops * hp * wp // (oh * ow))
        full = full.reshape(n, o, hp, wp)
        return np.ascontiguousarray(full[:, :, :oh, :ow]), False
    # im2col as [N, C*kh*kw, OH*OW]: W[O/G, K] @ cols[K, OH*OW] per image and group lands
    # straight in NCHW order
    cols = _im2col(x, (kh, kw), stride, padding, dilation, (oh, ow))
    out = _gemm_images(wg, cols.reshape(n, groups, cols_k, oh * ow), gemm_flops)
    return out.reshape(n, o, oh, ow), False


def _takes_taps(x: np.ndarray, w: np.ndarray, stride: Pair, padding: Pair, groups: int,
                ow: int) -> bool:
    return tuple(stride) == (1, 1) and groups == 1 and x.shape[1] >= 32 and \
        x.shape[3] + 2 * padding[1] <= _TAP_WASTE * ow and _blas.has_gemm(x.dtype)


def _takes_shifted(x: np.ndarray, stride: Pair, padding: Pair, oh: int, ow: int) -> bool:
    return tuple(stride) == (1, 1) and \
        (x.shape[2] + 2 * padding[0]) * (x.shape[3] + 2 * padding[1]) <= 1.2 * oh * ow


def _gemm_images(wg: np.ndarray, cols: np.ndarray, flops: int) -> np.ndarray:
    """``wg[G, O/G, K] @ cols[N, G, K, P]``: a GEMM per image and group.  One group's GEMMs
    under `_blas.SMALL_GEMM_FLOPS` are cut into chunks for `_workers` (larger ones get the
    BLAS's own threads, grouped ones numpy's loop)."""
    workers = _workers.threads()
    n, g, _, p = cols.shape
    if workers <= 1 or g != 1 or flops >= _blas.SMALL_GEMM_FLOPS:
        return _blas.matmul(wg, cols, flops)
    out = np.empty((n, g, wg.shape[1], p), cols.dtype)
    with _blas.one_thread(0):
        for b in range(n):
            _workers.gemm(wg[0], cols[b, 0], out[b, 0], workers)
    return out


#: the most padded-to-output width ratio (spare GEMM columns) the taps path takes
_TAP_WASTE = 1.1


def _conv_taps(x: np.ndarray, w: np.ndarray, padding: Pair, dilation: Pair, out_hw: Pair,
               flops: int) -> np.ndarray:
    """A stride-1 convolution with no im2col: per image, ``kh*kw`` GEMMs accumulate
    ``w[:, :, i, j] @ planes`` where ``planes[C, OH*Wp]`` is a window of the zero-padded
    input laid out as rows of ``Hp*Wp (+ slack)``, shifted by the tap's offset ``i*dh*Wp +
    j*dw`` (a view: cblas reads it in place).  Output column ``y*Wp + x`` is output ``(y, x)``
    for ``x < OW``; the ``Wp - OW`` spare columns of each row are computed and left out of the
    view returned, which is one of a work buffer's (the caller copies it or reads it once)."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    (ph, pw), (dh, dw), (oh, ow) = padding, dilation, out_hw
    hp, wp = h + 2 * ph, wd + 2 * pw
    plane = hp * wp + (kw - 1) * dw  # the last tap's window ends here
    # their borders and slack stay zero: only this caller writes this key, and only inside
    planes, _ = scratch(("conv2d.planes", ph, pw, h, wd), (n, c, plane), x.dtype, True)
    planes[:, :, :hp * wp].reshape(n, c, hp, wp)[:, :, ph:ph + h, pw:pw + wd] = x
    taps = np.ascontiguousarray(w.transpose(2, 3, 0, 1))  # [kh, kw, O, C]
    full, _ = scratch(("conv2d.taps",), (n, o, oh * wp), x.dtype)
    item = x.itemsize
    workers = _workers.threads()
    step = _workers.split(oh * wp, workers)  # column chunks, each with all the taps

    def chunk(b: int, k: int) -> None:
        q0, q1 = k * step, min((k + 1) * step, oh * wp)
        for i in range(kh):
            for j in range(kw):
                at = i * dh * wp + j * dw
                window = as_strided(planes[b, :, at:], (c, oh * wp), (plane * item, item),
                                    writeable=False)
                _blas.gemm(taps[i, j], window[:, q0:q1], full[b, :, q0:q1],
                           accumulate=bool(i or j))

    with _blas.one_thread(flops if workers <= 1 else 0):
        for b in range(n):
            _workers.run(functools.partial(chunk, b), -(-oh * wp // step), workers)
    return full.reshape(n, o, oh, wp)[:, :, :, :ow]


def _im2col(x: np.ndarray, k: Pair, stride: Pair, padding: Pair, dilation: Pair,
            out_hw: Pair) -> np.ndarray:
    """The receptive fields of ``x[N, C, H, W]`` as ``[N, C, kh, kw, OH, OW]`` (C-contiguous,
    so ``[N, C*kh*kw, OH*OW]`` as a matrix per image), in a work buffer (`scratch`): one
    strided copy from the zero-padded input, each innermost run one output row."""
    n, c = x.shape[:2]
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = k, stride, dilation, out_hw
    xp = _conv_chunks.padded(x, padding)
    cols, _ = scratch(("conv2d.cols",), (n, c, kh, kw, oh, ow), x.dtype)
    s0, s1, s2, s3 = xp.strides
    fields = as_strided(xp, cols.shape, (s0, s1, dh * s2, dw * s3, sh * s2, sw * s3),
                        writeable=False)
    workers = _workers.threads()
    if workers <= 1:
        np.copyto(cols, fields)
    elif c >= 4 * workers:  # channel ranges
        step = _workers.split(c, workers)
        _workers.run(lambda i: np.copyto(cols[:, i * step:(i + 1) * step],
                                         fields[:, i * step:(i + 1) * step]),
                     -(-c // step), workers)
    else:  # few channels (an image's stem): one kernel row of each at a time
        _workers.run(lambda i: np.copyto(cols[:, :, i], fields[:, :, i]), kh, workers)
    return cols


def fused_conv2d(x: np.ndarray, w: np.ndarray, *rest: np.ndarray, stride: Pair = (1, 1),
                 padding: Pair = (0, 0), dilation: Pair = (1, 1), groups: int = 1,
                 bias: bool = False, norm: bool = False, residual: bool = False,
                 relu: bool = False, eps: float = 1e-5) -> np.ndarray:
    """`conv2d` and its epilogue (bias, inference batch norm, residual, ReLU) applied in place
    on the GEMM's output in one pass (see ``ember.ops.composite.fused_conv2d``)."""
    check_shapes(cops.fused_conv2d, [x.shape, w.shape, *(a.shape for a in rest)],
                 dict(stride=stride, padding=padding, dilation=dilation, groups=groups,
                      bias=bias, norm=norm, residual=residual, relu=relu, eps=eps))
    if len(rest) != int(bias) + 4 * int(norm) + int(residual):
        raise ValueError(f"fused_conv2d: {len(rest)} extra inputs for bias={bias}, "
                         f"norm={norm}, residual={residual}")
    o = w.shape[0]
    for a in rest[:len(rest) - int(residual)]:
        if a.shape != (o,):
            raise ShapeError(f"fused_conv2d: a per-channel input has shape {a.shape}, "
                             f"expected ({o},)")
    dt = x.dtype
    work = dt if dt == F32 or dt == F64 else F32
    b = rest[0].astype(work, copy=False) if bias else np.zeros(o, work)
    scale = np.empty(0, work)
    if norm:  # (y + b - mean) * k + shift, k = scale / sqrt(var + eps)
        s, t, m, v = (a.astype(work, copy=False) for a in rest[int(bias):int(bias) + 4])
        scale = s / np.sqrt(v + work.type(eps))
        b = (b - m) * scale + t
    res = rest[-1] if residual else None
    m_tile = _winograd_tile(x, w, stride, padding, dilation, groups)
    if m_tile:
        if res is not None and res.shape != (x.shape[0], o, x.shape[2] + 2 * padding[0] - 2,
                                             x.shape[3] + 2 * padding[1] - 2):
            raise ShapeError(f"fused_conv2d: residual {res.shape} is not the output's shape")
        with np.errstate(all="ignore"):
            return winograd.conv3x3(x, w, padding, m_tile, scale, b, res, relu)
    if _pointwise_fused(x, w, stride, padding, dilation, groups):
        oh, ow = -(-x.shape[2] // stride[0]), -(-x.shape[3] // stride[1])
        if res is not None and res.shape != (x.shape[0], o, oh, ow):
            raise ShapeError(f"fused_conv2d: residual {res.shape} is not the output's "
                             f"{(x.shape[0], o, oh, ow)}")
        r = np.empty((0, 0, 0, 0), dt) if res is None else np.ascontiguousarray(res, dtype=dt)
        with np.errstate(all="ignore"):
            return _conv_chunks.fused_pointwise(x, w, stride, scale, b, r, relu)
    out_hw = _im2col_fused_hw(x, w, stride, padding, dilation, groups)
    if out_hw is not None:
        if res is not None and res.shape != (x.shape[0], o, *out_hw):
            raise ShapeError(f"fused_conv2d: residual {res.shape} is not the output's "
                             f"{(x.shape[0], o, *out_hw)}")
        r = np.empty((0, 0, 0, 0), dt) if res is None else np.ascontiguousarray(res, dtype=dt)
        with np.errstate(all="ignore"):
            return _conv_chunks.fused_im2col(
                x, w, stride, padding, dilation, out_hw, scale, b, r, relu,
                lambda x: _im2col(x, (w.shape[2], w.shape[3]), stride, padding, dilation,
                                  out_hw))
    y, borrowed = _conv2d(x, w, stride, padding, dilation, groups, True)
    if res is not None and res.shape != y.shape:
        raise ShapeError(f"fused_conv2d: residual {res.shape} is not the output's {y.shape}")
    # in place on a GEMM's own output; from a view of a work buffer (or another dtype) into
    # a fresh array, in the same pass
    owned = not borrowed and y.dtype == work and y.flags.c_contiguous and y.flags.writeable
    if y.dtype != work:
        y, owned = y.astype(work), True
    out = y if owned else np.empty(y.shape, work)
    r = np.empty((0, 0, 0, 0), work) if res is None else np.ascontiguousarray(res, dtype=work)
    # a small output's pass (ResNet's 14x14 and 7x7 blocks: 50K values, ~20 us) is done
    # sooner than a helper wakes
    workers = _workers.threads() if y.size >= _SPLIT_EPILOGUE else 1
    step = _workers.split(o, workers)

    def chunk(i: int) -> None:
        s = slice(i * step, (i + 1) * step)
        _conv_jit.epilogue(y[:, s], out[:, s], scale[s] if norm else scale, b[s],
                           r[:, s] if residual else r, relu)

    with np.errstate(all="ignore"):
        _workers.run(chunk, -(-o // step), workers)
    return out.astype(dt, copy=False)


#: the fewest values of a convolution's output whose epilogue is split over threads
_SPLIT_EPILOGUE = 1 << 17


def _pointwise_fused(x: np.ndarray, w: np.ndarray, stride: Pair, padding: Pair,
                     dilation: Pair, groups: int) -> bool:
    """Whether `fused_conv2d` runs this convolution as `_conv_chunks.fused_pointwise`: a 1x1
    kernel, no padding, one group, cblas's dtypes, GEMMs under `_blas.SMALL_GEMM_FLOPS` an
    image and a non-empty output."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if kh != 1 or kw != 1 or any(padding) or groups != 1 or cg != c or \
            not _compiled(x, w) or not _blas.has_gemm(x.dtype) or min(n, c, h, wd, o) <= 0:
        return False
    p = -(-h // stride[0]) * -(-wd // stride[1])
    return bool(2 * o * c * p < _blas.SMALL_GEMM_FLOPS)


def _im2col_fused_hw(x: np.ndarray, w: np.ndarray, stride: Pair, padding: Pair,
                     dilation: Pair, groups: int) -> Pair | None:
    """The output's ``(OH, OW)`` where `_conv2d` would take the im2col path with one group
    and cblas's GEMMs under `_blas.SMALL_GEMM_FLOPS` an image (`_conv_chunks` then runs it
    with the epilogue), else None."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if groups != 1 or cg != c or not _compiled(x, w) or not _blas.has_gemm(x.dtype) or \
            (kh == kw == 1 and not any(padding)):
        return None
    oh = _out_size(h, kh, stride[0], padding[0], dilation[0])
    ow = _out_size(wd, kw, stride[1], padding[1], dilation[1])
    if min(n, c, oh, ow, o) <= 0 or 2 * o * c * kh * kw * oh * ow >= _blas.SMALL_GEMM_FLOPS or \
            _takes_taps(x, w, stride, padding, groups, ow) or \
            _takes_shifted(x, stride, padding, oh, ow):
        return None
    return oh, ow


#: layers with at most this many filters (O*C) take Winograd: their transformed filters are
#: kept between calls (`_derived`, checked against the weights each call) at 4.6x the
#: weights' bytes, and read back from memory on each call; in ResNet-18 on the development
#: VM the 256x256 filters of the 14x14 blocks made that 2.3 ms a layer against 1.7 on the
#: GEMM path (alone, with the transforms in cache: 1.5 against 1.7)
_WINOGRAD_FILTERS = 128 * 128


def _winograd_tile(x: np.ndarray, w: np.ndarray, stride: Pair, padding: Pair,
                   dilation: Pair, groups: int) -> int:
    """The tile size ``m`` of F(m x m, 3 x 3) `fused_conv2d` computes this convolution by, or
    0 for the GEMM paths: 3x3, stride 1, one group, float32/float64, enough channels for the
    GEMMs, maps of at least 14x14 outputs (smaller ones waste more of the tiles' edges: 16x16
    computed for 14x14) and at most `_WINOGRAD_FILTERS` filters."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    if kh != 3 or kw != 3 or tuple(stride) != (1, 1) or tuple(dilation) != (1, 1) or \
            groups != 1 or w.shape[1] != c or not _compiled(x, w) or n == 0:
        return 0
    oh, ow = h + 2 * padding[0] - 2, wd + 2 * padding[1] - 2
    if c < 32 or o < 32 or o * c > _WINOGRAD_FILTERS or min(oh, ow) < 14:
        return 0
    return 4


def shifted_cols(x: np.ndarray, k: Pair, padding: Pair, dilation: Pair
                 ) -> tuple[np.ndarray, int, int]:
    """The im2col matrix of a stride-1 convolution as ``[C*kh*kw, N*Hp*Wp]`` (and ``Hp, Wp``):
    row ``(c, i, j)`` is channel ``c``'s zero-padded planes laid end to end over the batch,
    shifted left by the kernel offset ``(i*dh, j*dw)``, so column ``n*Hp*Wp + y*Wp + x`` holds
    the receptive field of output ``(n, y, x)`` (columns with ``y >= OH`` or ``x >= OW`` are
    spare).  Each row is one contiguous copy, where a per-output-row im2col moves ``OW``
    elements at a time; the spare columns cost ``Hp*Wp / (OH*OW)`` more GEMM work."""
    n, c, h, w = x.shape
    (kh, kw), (ph, pw), (dh, dw) = k, padding, dilation
    hp, wp = h + 2 * ph, w + 2 * pw
    size = n * hp * wp
    buf = np.zeros((c, size + (kh - 1) * dh * wp + (kw - 1) * dw), x.dtype)
    buf[:, :size].reshape(c, n, hp, wp)[:, :, ph:ph + h, pw:pw + w] = x.transpose(1, 0, 2, 3)
    item = buf.itemsize
    rows = as_strided(buf, (c, kh, kw, size), (buf.strides[0], dh * wp * item, dw * item, item),
                      writeable=False)
    return np.ascontiguousarray(rows).reshape(c * kh * kw, size), hp, wp


def _conv2d_numpy(x: np.ndarray, w: np.ndarray, stride: Pair, padding: Pair, dilation: Pair,
                  groups: int) -> np.ndarray:
    """conv2d through a ``sliding_window_view`` (other dtypes, empty shapes)."""
    n = x.shape[0]
    o, cg, kh, kw = w.shape
    xp = _zero_pad(x, padding, padding)
    win = _windows(xp, (kh, kw), stride, dilation)  # [N, C, OH, OW, kh, kw]
    oh, ow = win.shape[2], win.shape[3]
    cols = win.transpose(0, 1, 4, 5, 2, 3).reshape(n, groups, cg * kh * kw, oh * ow)
    wg = w.reshape(groups, o // groups, cg * kh * kw)
    out: np.ndarray = np.matmul(wg, cols)
    return out.reshape(n, o, oh, ow)


def conv_transpose2d(x: np.ndarray, w: np.ndarray, stride: Pair = (1, 1),
                     padding: Pair = (0, 0), output_padding: Pair = (0, 0),
                     dilation: Pair = (1, 1), groups: int = 1) -> np.ndarray:
    """The gradient of conv2d with respect to its input: ``w[C, O/groups, kh, kw]``."""
    check_shapes(nn.conv_transpose2d, [x.shape, w.shape],
                 dict(stride=stride, padding=padding, output_padding=output_padding,
                      dilation=dilation, groups=groups))
    dt = x.dtype
    if dt in LOW:
        return conv_transpose2d(x.astype(F32), w.astype(F32), stride, padding, output_padding,
                                dilation, groups).astype(dt)
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    oh = (h - 1) * stride[0] - 2 * padding[0] + dilation[0] * (kh - 1) + output_padding[0] + 1
    ow = (wd - 1) * stride[1] - 2 * padding[1] + dilation[1] * (kw - 1) + output_padding[1] + 1
    if not _compiled(x, w) or min(n, c, h, wd, og, oh, ow) <= 0:
        return _conv_transpose2d_numpy(x, w, stride, padding, output_padding, dilation, groups)
    # one GEMM per group gives every input pixel's contribution to its receptive field,
    # cols[N, O*kh*kw, H, W]; col2im adds them up at their output positions
    cg = c // groups
    wt = np.ascontiguousarray(w).reshape(groups, cg, og * kh * kw).transpose(0, 2, 1)
    cols = np.matmul(wt, np.ascontiguousarray(x).reshape(n, groups, cg, h * wd))
    out = np.zeros((n, groups * og, oh, ow), dt)
    _conv_jit.col2im(cols.reshape(n, groups * og * kh * kw, h, wd), out,
                     _geometry(kh, kw, stride, padding, dilation))
    return out


def _conv_transpose2d_numpy(x: np.ndarray, w: np.ndarray, stride: Pair, padding: Pair,
                            output_padding: Pair, dilation: Pair, groups: int) -> np.ndarray:
    """conv_transpose2d as conv2d of the zero-dilated input with the flipped kernel."""
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    sh, sw = stride
    # insert stride - 1 zeros between input pixels
    if sh > 1 or sw > 1:
        up = np.zeros((n, c, (h - 1) * sh + 1, (wd - 1) * sw + 1), x.dtype)
        up[:, :, ::sh, ::sw] = x
    else:
        up = x
    qh = dilation[0] * (kh - 1) - padding[0]
    qw = dilation[1] * (kw - 1) - padding[1]
    before = (max(qh, 0), max(qw, 0))
    after = (max(qh + output_padding[0], 0), max(qw + output_padding[1], 0))
    up = _zero_pad(up, before, after)
    # padding larger than the kernel span crops instead
    ch0, cw0 = max(-qh, 0), max(-qw, 0)
    ch1, cw1 = max(-(qh + output_padding[0]), 0), max(-(qw + output_padding[1]), 0)
    if ch0 or cw0 or ch1 or cw1:
        up = up[:, :, ch0:up.shape[2] - ch1, cw0:up.shape[3] - cw1]
    cg = c // groups
    wt = w.reshape(groups, cg, og, kh, kw).transpose(0, 2, 1, 3, 4).reshape(groups * og, cg, kh, kw)
    return _conv2d_numpy(up, wt[:, :, ::-1, ::-1], (1, 1), (0, 0), dilation, groups)


def _conv1d(x: np.ndarray, w: np.ndarray, stride: tuple[int] = (1,), padding: tuple[int] = (0,),
            dilation: tuple[int] = (1,), groups: int = 1) -> np.ndarray:
    out = conv2d(x[:, :, None, :], w[:, :, None, :], (1, stride[0]), (0, padding[0]),
                 (1, dilation[0]), groups)
    return out[:, :, 0, :]


def _conv_transpose1d(x: np.ndarray, w: np.ndarray, stride: tuple[int] = (1,),
                      padding: tuple[int] = (0,), output_padding: tuple[int] = (0,),
                      dilation: tuple[int] = (1,), groups: int = 1) -> np.ndarray:
    out = conv_transpose2d(x[:, :, None, :], w[:, :, None, :], (1, stride[0]), (0, padding[0]),
                           (0, output_padding[0]), (1, dilation[0]), groups)
    return out[:, :, 0, :]


# -- pooling ----------------------------------------------------------------------------------

def _lowest(dt: np.dtype[Any]) -> Any:
    if dt.kind == "f":
        return -np.inf
    if dt.kind == "b":
        return False
    return np.iinfo(dt).min


def _max_pool2d(x: np.ndarray, kernel_size: Pair = (1, 1), stride: Pair = (1, 1),
                padding: Pair = (0, 0), dilation: Pair = (1, 1),
                ceil_mode: bool = False) -> tuple[np.ndarray, np.ndarray]:
    check_shapes(nn.max_pool2d, [x.shape], dict(kernel_size=kernel_size, stride=stride,
                                                padding=padding, dilation=dilation,
                                                ceil_mode=ceil_mode))
    dt = x.dtype
    xs = x.astype(F32) if dt in LOW else x
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_size, stride, padding, dilation
    oh = pool_output_size(h, kh, sh, ph, dh, ceil_mode)
    ow = pool_output_size(w, kw, sw, pw, dw, ceil_mode)
    # pad so that every (possibly ceil-mode) window lies inside the array
    if (xs.dtype == F32 or xs.dtype == F64) and min(n, c, oh, ow) > 0:
        values = np.empty((n, c, oh, ow), xs.dtype)
        indices = np.empty((n, c, oh, ow), np.int64)
        _conv_jit.max_pool2d(np.ascontiguousarray(xs), values, indices,
                             _geometry(kh, kw, (sh, sw), (ph, pw), (dh, dw)))
        return values.astype(dt, copy=False), indices
    eh = max((oh - 1) * sh + dh * (kh - 1) + 1 - (h + 2 * ph), 0)
    ew = max((ow - 1) * sw + dw * (kw - 1) + 1 - (w + 2 * pw), 0)
    xp = _zero_pad(xs, (ph, pw), (ph + eh, pw + ew), _lowest(xs.dtype))
    win = _windows(xp, (kh, kw), (sh, sw), (dh, dw))[:, :, :oh, :ow]
    flat = win.reshape(n, c, oh, ow, kh * kw)
    arg = flat.argmax(axis=-1)  # first maximum, or the first nan (PyTorch's rule)
    values = np.take_along_axis(flat, arg[..., None], axis=-1)[..., 0]
    # the window position back to a flat index into the unpadded H*W plane
    h0 = np.arange(oh)[:, None] * sh - ph
    w0 = np.arange(ow)[None, :] * sw - pw
    row = h0 + (arg // kw) * dh
    col = w0 + (arg % kw) * dw
    outside = (row < 0) | (row >= h) | (col < 0) | (col >= w)
    if outside.any():
        # a window whose every value equals the padding value (-inf, or an int type's minimum):
        # PyTorch reports its first position inside the input
        first_row = h0 + (-(np.minimum(h0, 0) // dh)) * dh
        first_col = w0 + (-(np.minimum(w0, 0) // dw)) * dw
        row = np.where(outside, first_row, row)
        col = np.where(outside, first_col, col)
    return values.astype(dt, copy=False), (row * w + col).astype(np.int64)


def max_pool2d_values(x: np.ndarray, kernel_size: Pair = (1, 1), stride: Pair = (1, 1),
                      padding: Pair = (0, 0), dilation: Pair = (1, 1),
                      ceil_mode: bool = False) -> np.ndarray:
    """`max_pool2d`'s values alone (``ember.ops.composite.max_pool2d_values``): a window's
    maximum is the maximum of its columns' maxima.  float32/float64 (and float16/bfloat16,
    widened): one compiled pass per output row, down the window's rows, then along the
    result with the stride, no padded copy (ResNet's stem, one thread, 2-core VM: 0.99 ->
    0.17 ms); other dtypes: strided ``np.maximum`` over a copy padded with the lowest value.
    No positions to track: far faster than the indices kernel."""
    # the compiled loop has no bounds checks: the rule keeps every window inside the input
    check_shapes(cops.max_pool2d_values, [x.shape], dict(
        kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation,
        ceil_mode=ceil_mode))
    dt = x.dtype
    xs = x.astype(F32) if dt in LOW else x
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_size, stride, padding, dilation
    oh = pool_output_size(h, kh, sh, ph, dh, ceil_mode)
    ow = pool_output_size(w, kw, sw, pw, dw, ceil_mode)
    if min(n, c, oh, ow) <= 0:
        return np.empty((n, c, max(oh, 0), max(ow, 0)), dt)
    if xs.dtype == F32 or xs.dtype == F64:
        xs = np.ascontiguousarray(xs)
        values = np.empty((n, c, oh, ow), xs.dtype)
        geometry = _geometry(kh, kw, (sh, sw), (ph, pw), (dh, dw))
        # a small pass (a stem's is ~0.2 ms) in two chunks: one a thread
        workers = _workers.threads()
        step = _workers.split(c, workers, 1)
        _workers.run(lambda i: _conv_jit.max_pool2d_values(
            xs, values, (i * step, min(c, (i + 1) * step)), geometry), -(-c // step), workers)
        return values.astype(dt, copy=False)
    rows = (oh - 1) * sh + dh * (kh - 1) + 1  # padded rows and columns the windows cover
    cols = (ow - 1) * sw + dw * (kw - 1) + 1
    xp = xs
    padded = bool(ph or pw or rows > h or cols > w)
    if padded:
        # a work buffer whose border keeps the lowest value (only this caller writes the key)
        low = _lowest(xs.dtype)
        xp, fresh = scratch(("max_pool2d.pad", h, w, ph, pw, low), (n, c, max(rows, h + ph),
                                                                    max(cols, w + pw)), xs.dtype)
        if fresh:
            xp.fill(low)
    if padded:
        xp[:, :, ph:ph + h, pw:pw + w] = xs
    xp = xp[:, :, :rows, :cols]
    # nan propagates through np.maximum: a window with a nan yields nan, as PyTorch's
    wide, _ = scratch(("max_pool2d.rows",), (n, c, rows, ow), xs.dtype)  # [N, C, rows, OW]
    np.copyto(wide, xp[:, :, :, 0:(ow - 1) * sw + 1:sw])
    for j in range(1, kw):
        np.maximum(wide, xp[:, :, :, j * dw:j * dw + (ow - 1) * sw + 1:sw], out=wide)
    out = wide[:, :, 0:(oh - 1) * sh + 1:sh].copy()
    for i in range(1, kh):
        np.maximum(out, wide[:, :, i * dh:i * dh + (oh - 1) * sh + 1:sh], out=out)
    return out.astype(dt, copy=False)


def _avg_divisor(n: int, o: int, k: int, s: int, p: int, count_include_pad: bool) -> np.ndarray:
    start = np.arange(o) * s - p
    end = np.minimum(start + k, n + p)
    size = end - start
    if not count_include_pad:
        size = np.minimum(end, n) - np.maximum(start, 0)
    return size


def _avg_pool2d(x: np.ndarray, kernel_size: Pair = (1, 1), stride: Pair = (1, 1),
                padding: Pair = (0, 0), ceil_mode: bool = False,
                count_include_pad: bool = True) -> np.ndarray:
    check_shapes(nn.avg_pool2d, [x.shape], dict(kernel_size=kernel_size, stride=stride,
                                                padding=padding, ceil_mode=ceil_mode,
                                                count_include_pad=count_include_pad))
    dt = x.dtype
    xs = x.astype(F32) if dt in LOW else x
    h, w = x.shape[2:]
    (kh, kw), (sh, sw), (ph, pw) = kernel_size, stride, padding
    oh = pool_output_size(h, kh, sh, ph, 1, ceil_mode)
    ow = pool_output_size(w, kw, sw, pw, 1, ceil_mode)
    eh = max((oh - 1) * sh + kh - (h + 2 * ph), 0)
    ew = max((ow - 1) * sw + kw - (w + 2 * pw), 0)
    div_h = _avg_divisor(h, oh, kh, sh, ph, count_include_pad)
    div_w = _avg_divisor(w, ow, kw, sw, pw, count_include_pad)
    n, c = x.shape[:2]
    if (xs.dtype == F32 or xs.dtype == F64) and min(n, c, oh, ow) > 0 and \
            ph <= kh // 2 and pw <= kw // 2:
        # compiled: one pass per output row, no padded copy (Inception's 3x3 stride-1
        # pooling of 256x28x28, one thread, 2-core VM: 10 -> 0.2 ms).  The check above
        # keeps every window's first row and column inside the padded input, the loop
        # reads only rows and columns inside x
        xs = np.ascontiguousarray(xs)
        out = np.empty((n, c, oh, ow), xs.dtype)
        inv_h = (1.0 / div_h).astype(xs.dtype)
        inv_w = (1.0 / div_w).astype(xs.dtype)
        workers = _workers.threads()
        step = _workers.split(c, workers, 1)
        _workers.run(lambda i: _conv_jit.avg_pool2d(
            xs, out, (i * step, min(c, (i + 1) * step)), (kh, kw), (sh, sw), (ph, pw), inv_h,
            inv_w), -(-c // step), workers)
        return out.astype(dt, copy=False)
    xp = _zero_pad(xs, (ph, pw), (ph + eh, pw + ew))
    sums = _windows(xp, (kh, kw), (sh, sw), (1, 1))[:, :, :oh, :ow].sum(axis=(-2, -1))
    div = np.outer(div_h, div_w)
    mean: np.ndarray = sums / div
    return mean.astype(dt, copy=False)


def _adaptive_bounds(n: int, o: int) -> tuple[np.ndarray, np.ndarray]:
    i = np.arange(o)
    return (i * n) // o, -((-(i + 1) * n) // o)  # floor(i*n/o), ceil((i+1)*n/o)


def _adaptive_avg_pool2d(x: np.ndarray, output_size: Pair = (1, 1)) -> np.ndarray:
    check_shapes(nn.adaptive_avg_pool2d, [x.shape], dict(output_size=output_size))
    dt = x.dtype
    n, c, h, w = x.shape
    oh, ow = output_size
    # an integral image in float64 turns every window sum into four look-ups
    s = np.zeros((n, c, h + 1, w + 1), F64)
    np.cumsum(np.cumsum(x, axis=2, dtype=F64), axis=3, out=s[:, :, 1:, 1:])
    h0, h1 = _adaptive_bounds(h, oh)
    w0, w1 = _adaptive_bounds(w, ow)
    a, b = h0[:, None], h1[:, None]
    total = s[:, :, b, w1] - s[:, :, a, w1] - s[:, :, b, w0] + s[:, :, a, w0]
    mean: np.ndarray = total / ((h1 - h0)[:, None] * (w1 - w0)[None, :])
    return mean.astype(dt)


def _embedding(weight: np.ndarray, indices: np.ndarray) -> np.ndarray:
    return np.take(weight, indices, axis=0)


# -- interpolation ----------------------------------------------------------------------------

def _interpolate(x: np.ndarray, size: tuple[int, ...] = (), mode: str = "nearest",
                 align_corners: bool | None = None) -> np.ndarray:
    check_shapes(nn.interpolate, [x.shape], dict(size=size, mode=mode,
                                                 align_corners=align_corners))
    dt = x.dtype

    def lerp(lo: np.ndarray, hi: np.ndarray, lam: np.ndarray, axis: int) -> np.ndarray:
        shape = [1] * lo.ndim
        shape[axis] = lam.size
        w = lam.reshape(shape).astype(lo.dtype)
        out: np.ndarray = lo * (1 - w) + hi * w
        return out

    out = interpolate(x.astype(F32) if dt in LOW else x, x.shape, size, mode, align_corners,
                      take=lambda a, index, axis: np.take(a, index, axis=axis), lerp=lerp,
                      device="cpu")
    return out.astype(dt, copy=False)


KERNELS: dict[Any, Any] = {
    nn.conv1d: _conv1d,
    nn.conv2d: conv2d,
    cops.fused_conv2d: fused_conv2d,
    nn.conv_transpose1d: _conv_transpose1d,
    nn.conv_transpose2d: conv_transpose2d,
    nn.max_pool2d: _max_pool2d,
    cops.max_pool2d_values: max_pool2d_values,
    nn.avg_pool2d: _avg_pool2d,
    nn.adaptive_avg_pool2d: _adaptive_avg_pool2d,
    nn.embedding: _embedding,
    nn.interpolate: _interpolate,
}
