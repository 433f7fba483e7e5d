"""Convolutions, pooling, embedding and interpolation: sliding windows and ``einsum``.

Layouts are PyTorch's: ``x[N, C, *spatial]``, ``weight[O, C/groups, *kernel]`` (transposed
convolutions: ``weight[C, O/groups, *kernel]``).  1-D ops reuse the 2-D ones with height 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ember import ops


def _windows(xp: np.ndarray, k: tuple[int, int], s: tuple[int, int], d: tuple[int, int],
             out: tuple[int, int]) -> np.ndarray:
    """``[N, C, OH, OW, KH, KW]`` windows of an already padded ``xp``."""
    span = (d[0] * (k[0] - 1) + 1, d[1] * (k[1] - 1) + 1)
    w = sliding_window_view(xp, span, axis=(2, 3))[..., ::d[0], ::d[1]]
    return w[:, :, : s[0] * (out[0] - 1) + 1: s[0], : s[1] * (out[1] - 1) + 1: s[1]]


def conv2d(x: np.ndarray, w: np.ndarray, stride: Any, padding: Any, dilation: Any,
           groups: int) -> np.ndarray:
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    win = _windows(xp, (kh, kw), stride, dilation, (oh, ow))
    win = win.reshape(n, groups, cg, oh, ow, kh, kw)
    wg = w.reshape(groups, o // groups, cg, kh, kw)
    out: np.ndarray = np.einsum("ngchwij,goc ij->ngohw".replace(" ", ""), win, wg)
    return out.reshape(n, o, oh, ow).astype(x.dtype)


def conv_transpose2d(x: np.ndarray, w: np.ndarray, stride: Any, padding: Any,
                     output_padding: Any, dilation: Any, groups: int) -> np.ndarray:
    """A transposed convolution is a stride-1 convolution of the input with zeros inserted
    between pixels, padded by ``dilation * (k - 1) - padding``, with the kernel flipped."""
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    up = np.zeros((n, c, (h - 1) * stride[0] + 1, (wd - 1) * stride[1] + 1), x.dtype)
    up[:, :, :: stride[0], :: stride[1]] = x
    pads = []
    for i, k in enumerate((kh, kw)):
        p = dilation[i] * (k - 1) - padding[i]
        pads.append((p, p + output_padding[i]))
    # negative padding crops
    crop = tuple(slice(max(-a, 0), up.shape[2 + i] - max(-b, 0)) for i, (a, b) in
                 enumerate(pads))
    up = np.pad(up[:, :, crop[0], crop[1]],
                ((0, 0), (0, 0), *[(max(a, 0), max(b, 0)) for a, b in pads]))
    # [C, O/g, kh, kw] -> [O, C/g, kh, kw], flipped
    wf = w.reshape(groups, c // groups, og, kh, kw).transpose(0, 2, 1, 3, 4)
    wf = wf.reshape(groups * og, c // groups, kh, kw)[:, :, ::-1, ::-1]
    return conv2d(up, wf, (1, 1), (0, 0), dilation, groups)


def _one_d(f: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def kernel(x: np.ndarray, w: np.ndarray, **p: Any) -> np.ndarray:
        q = {k: (v if isinstance(v, int) else (1 if k in ("stride", "dilation") else 0, v[0]))
             for k, v in p.items()}
        return f(x[:, :, None], w[:, :, None], **q)[:, :, 0]
    return kernel


def _pool_out(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    span = size + 2 * p - d * (k - 1) - 1
    out = (math.ceil(span / s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _pool_pad(x: np.ndarray, k: Any, s: Any, p: Any, d: Any, ceil_mode: bool,
              fill: Any) -> tuple[np.ndarray, tuple[int, int]]:
    out = tuple(_pool_out(x.shape[2 + i], k[i], s[i], p[i], d[i], ceil_mode) for i in range(2))
    extra = [max((out[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1 - x.shape[2 + i] - 2 * p[i], 0)
             for i in range(2)]
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0] + extra[0]), (p[1], p[1] + extra[1])),
                constant_values=fill)
    return xp, out  # type: ignore[return-value]


def max_pool2d(x: np.ndarray, kernel_size: Any, stride: Any, padding: Any, dilation: Any,
               ceil_mode: bool) -> tuple[np.ndarray, np.ndarray]:
    n, c, _, w = x.shape
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    xp, (oh, ow) = _pool_pad(x, kernel_size, stride, padding, dilation, ceil_mode, low)
    win = _windows(xp, kernel_size, stride, dilation, (oh, ow)).reshape(n, c, oh, ow, -1)
    best = win.argmax(-1)  # the first maximum
    values = np.take_along_axis(win, best[..., None], -1)[..., 0]
    # window position -> row and column of the unpadded input
    ki, kj = np.divmod(best, kernel_size[1])
    rows = np.arange(oh)[:, None] * stride[0] - padding[0] + ki * dilation[0]
    cols = np.arange(ow)[None, :] * stride[1] - padding[1] + kj * dilation[1]
    return values.copy(), (rows * w + cols).astype(np.int64)


def avg_pool2d(x: np.ndarray, kernel_size: Any, stride: Any, padding: Any, ceil_mode: bool,
               count_include_pad: bool) -> np.ndarray:
    h, w = x.shape[2:]
    ones = (1, 1)
    xp, out = _pool_pad(x, kernel_size, stride, padding, ones, ceil_mode, 0)
    total = _windows(xp, kernel_size, stride, ones, out).sum(axis=(-1, -2))
    # what each window divides by: the padded area (not the ceil-mode overhang) or the input
    inside = np.ones((1, 1, h, w))
    if count_include_pad:
        inside = np.pad(inside, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2),
                        constant_values=1)
        inside, _ = _pool_pad(inside, kernel_size, stride, (0, 0), ones, ceil_mode, 0)
        inside = inside[:, :, : xp.shape[2], : xp.shape[3]]
        inside = np.pad(inside, ((0, 0), (0, 0), (0, xp.shape[2] - inside.shape[2]),
                                 (0, xp.shape[3] - inside.shape[3])))
    else:
        inside, _ = _pool_pad(inside, kernel_size, stride, padding, ones, ceil_mode, 0)
    count = _windows(inside, kernel_size, stride, ones, out).sum(axis=(-1, -2))
    mean: np.ndarray = total / count
    return mean.astype(x.dtype)


def adaptive_avg_pool2d(x: np.ndarray, output_size: Any) -> np.ndarray:
    h, w = x.shape[2:]
    oh, ow = output_size
    out = np.empty((*x.shape[:2], oh, ow), x.dtype)
    for i in range(oh):
        for j in range(ow):
            r = slice(i * h // oh, -(-(i + 1) * h // oh))
            q = slice(j * w // ow, -(-(j + 1) * w // ow))
            out[:, :, i, j] = x[:, :, r, q].mean(axis=(2, 3))
    return out


def interpolate(x: np.ndarray, size: Any, mode: str, align_corners: bool) -> np.ndarray:
    out = x.astype(np.float64)
    for axis, n_out in enumerate(size, start=2):
        n_in = out.shape[axis]
        dst = np.arange(n_out)
        if mode == "nearest":  # PyTorch's legacy rule
            out = np.take(out, np.minimum(dst * n_in // n_out, n_in - 1), axis)
            continue
        if align_corners:
            raise NotImplementedError("numpyref: interpolate(align_corners=True)")
        src = np.maximum((dst + 0.5) * n_in / n_out - 0.5, 0)
        lo = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
        hi = np.minimum(lo + 1, n_in - 1)
        frac = (src - lo).reshape([-1 if a == axis else 1 for a in range(out.ndim)])
        out = np.take(out, lo, axis) * (1 - frac) + np.take(out, hi, axis) * frac
    return out.astype(x.dtype)


TABLE: dict[Any, Any] = {
    ops.conv2d: conv2d,
    ops.conv1d: _one_d(conv2d),
    ops.conv_transpose2d: conv_transpose2d,
    ops.conv_transpose1d: _one_d(conv_transpose2d),
    ops.max_pool2d: max_pool2d,
    ops.avg_pool2d: avg_pool2d,
    ops.adaptive_avg_pool2d: adaptive_avg_pool2d,
    ops.embedding: lambda weight, indices: weight[indices],
    ops.interpolate: interpolate,
}
