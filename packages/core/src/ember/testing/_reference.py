"""Naive numpy float64 references for the nn primitives: loops over kernel offsets, written
for clarity rather than speed (the suite's shapes are tiny).  PyTorch's layouts and rules."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["adam_step", "adaptive_avg_pool2d", "avg_pool2d", "conv2d", "conv_transpose2d",
           "interpolate", "max_pool2d"]

Pair = tuple[int, int]


def conv2d(x: np.ndarray, w: np.ndarray, stride: Pair, padding: Pair, dilation: Pair,
           groups: int) -> np.ndarray:
    """``x[N, C, H, W]`` with ``w[O, C/groups, KH, KW]``; conv1d is this with H = KH = 1."""
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        ws = w[g * og:(g + 1) * og]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh,
                           j * dw: j * dw + sw * (ow - 1) + 1: sw]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    return out


def conv_transpose2d(x: np.ndarray, w: np.ndarray, stride: Pair, padding: Pair,
                     output_padding: Pair, dilation: Pair, groups: int) -> np.ndarray:
    """``x[N, C, H, W]`` with ``w[C, O/groups, KH, KW]``: every input pixel scatters a kernel."""
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    (sh, sw), (ph, pw), (oph, opw), (dh, dw) = stride, padding, output_padding, dilation
    fh = (h - 1) * sh + dh * (kh - 1) + 1 + oph
    fw = (wd - 1) * sw + dw * (kw - 1) + 1 + opw
    full = np.zeros((n, og * groups, fh, fw))
    cg = c // groups
    for g in range(groups):
        xs = x[:, g * cg:(g + 1) * cg]
        ws = w[g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                full[:, g * og:(g + 1) * og, i * dh: i * dh + sh * (h - 1) + 1: sh,
                     j * dw: j * dw + sw * (wd - 1) + 1: sw] += np.einsum(
                         "nchw,co->nohw", xs, ws[:, :, i, j])
    return full[:, :, ph: fh - ph, pw: fw - pw]


def _pool_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    span = size + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:  # the last window must start inside
        out -= 1
    return out


def max_pool2d(x: np.ndarray, kernel_size: Pair, stride: Pair, padding: Pair, dilation: Pair,
               ceil_mode: bool) -> tuple[np.ndarray, np.ndarray]:
    n, c, h, w = x.shape
    oh = _pool_size(h, kernel_size[0], stride[0], padding[0], dilation[0], ceil_mode)
    ow = _pool_size(w, kernel_size[1], stride[1], padding[1], dilation[1], ceil_mode)
    values = np.full((n, c, oh, ow), -np.inf)
    indices = np.zeros((n, c, oh, ow), dtype=np.int64)
    for a in range(oh):
        for b in range(ow):
            for i in range(kernel_size[0]):
                for j in range(kernel_size[1]):
                    r = a * stride[0] - padding[0] + i * dilation[0]
                    q = b * stride[1] - padding[1] + j * dilation[1]
                    if 0 <= r < h and 0 <= q < w:
                        v = x[:, :, r, q]
                        better = v > values[:, :, a, b]  # the first maximum wins
                        values[:, :, a, b] = np.where(better, v, values[:, :, a, b])
                        indices[:, :, a, b] = np.where(better, r * w + q, indices[:, :, a, b])
    return values, indices


def avg_pool2d(x: np.ndarray, kernel_size: Pair, stride: Pair, padding: Pair, ceil_mode: bool,
               count_include_pad: bool) -> np.ndarray:
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw) = kernel_size, stride, padding
    oh = _pool_size(h, kh, sh, ph, 1, ceil_mode)
    ow = _pool_size(w, kw, sw, pw, 1, ceil_mode)
    out = np.zeros((n, c, oh, ow))
    for a in range(oh):
        for b in range(ow):
            r0, q0 = a * sh - ph, b * sw - pw
            r1, q1 = min(r0 + kh, h + ph), min(q0 + kw, w + pw)
            pool = (r1 - r0) * (q1 - q0)
            rs, re, qs, qe = max(r0, 0), min(r1, h), max(q0, 0), min(q1, w)
            total = x[:, :, rs:re, qs:qe].sum(axis=(2, 3))
            out[:, :, a, b] = total / (pool if count_include_pad else (re - rs) * (qe - qs))
    return out


def adaptive_avg_pool2d(x: np.ndarray, output_size: Pair) -> np.ndarray:
    n, c, h, w = x.shape
    oh, ow = output_size
    out = np.zeros((n, c, oh, ow))
    for a in range(oh):
        for b in range(ow):
            r0, r1 = (a * h) // oh, -(-((a + 1) * h) // oh)
            q0, q1 = (b * w) // ow, -(-((b + 1) * w) // ow)
            out[:, :, a, b] = x[:, :, r0:r1, q0:q1].mean(axis=(2, 3))
    return out


def _linear_axis(x: np.ndarray, axis: int, size: int, align_corners: bool) -> Any:
    n_in = x.shape[axis]
    dst = np.arange(size, dtype=np.float64)
    if align_corners:
        src = dst * ((n_in - 1) / (size - 1)) if size > 1 else np.zeros(size)
    else:
        src = np.maximum((dst + 0.5) * (n_in / size) - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    lam = src - i0
    shape = [1] * x.ndim
    shape[axis] = size
    lam = lam.reshape(shape)
    return np.take(x, i0, axis) * (1 - lam) + np.take(x, i1, axis) * lam


def interpolate(x: np.ndarray, size: tuple[int, ...], mode: str,
                align_corners: bool) -> np.ndarray:
    out = x
    for k, s in enumerate(size):
        axis = 2 + k
        if mode == "nearest":
            src = np.minimum((np.arange(s) * x.shape[axis]) // s, x.shape[axis] - 1)
            out = np.take(out, src, axis)
        else:
            out = _linear_axis(out, axis, s, align_corners)
    return out


def erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x) if x.size else x.astype(np.float64)


def adam_step(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, t: int, lr: float,
              b1: float, b2: float, eps: float, wd: float, decoupled: bool, maximize: bool
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One step of PyTorch's Adam (``decoupled=False``) / AdamW at step count ``t``, in the
    textbook form (bias-corrected moments): the new parameter and moments."""
    g = -g if maximize else g
    if decoupled:
        p = p * (1 - lr * wd)
    else:
        g = g + wd * p
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    mhat, vhat = m / (1 - b1 ** t), v / (1 - b2 ** t)
    return p - lr * mhat / (np.sqrt(vhat) + eps), m, v
