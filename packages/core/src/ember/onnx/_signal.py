"""Signal processing: DFT (forward, inverse, one-sided, irfft), STFT, the Hann, Hamming and
Blackman windows and MelWeightMatrix.

A DFT is a matmul with cosine and sine matrices built on the host in float64 (ember has no
complex dtype: ONNX's complex values are a trailing axis of 2, real and imaginary); the
product runs in float64 and is cast back, so results agree with an FFT to float64 rounding,
and gradients flow through it.  The windows and the mel filter bank depend only on scalar
inputs and are computed on the host.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ember as E
from ember import Tensor

from ._dtypes import numpy_dtype
from ._registry import Node, Run, op


def _split(node: Node, t: Tensor) -> tuple[Tensor, Tensor | None]:
    """The real and imaginary parts (None for a real signal) of ``[..., 1 or 2]``."""
    c = t.shape[-1]
    if c not in (1, 2):
        raise ValueError(f"{node.where()}: the last axis has {c} components; ONNX signals end "
                         "in 1 (real) or 2 (real, imaginary)")
    re = E.select(t, -1, 0).double()
    return re, (E.select(t, -1, 1).double() if c == 2 else None)


def _along(v: Tensor, axis: int, n: int) -> Tensor:
    """``v`` with ``axis`` moved last, cut to its first ``n`` cells (zero padding is the
    matrices' business)."""
    v = E.movedim(v, axis, -1)
    return E.narrow(v, -1, 0, min(n, v.shape[-1]))


def _dft(r: Run, node: Node, t: Tensor, length: int, axis: int, inverse: bool,
         onesided: bool) -> Tensor:
    """The DFT of ``t`` [..., 1|2] along ``axis`` (of the signal, the component axis
    excluded) with ``length`` points; the result is [..., 2] (or [..., 1] for irfft)."""
    re, im = _split(node, t)
    nd = re.ndim
    axis %= nd
    if length <= 0:
        raise ValueError(f"{node.where()}: dft_length must be positive, got {length}")
    xr = _along(re, axis, length)
    xi = _along(im, axis, length) if im is not None else None
    m = xr.shape[-1]
    if inverse and onesided:  # irfft: a one-sided spectrum to a real signal of `length`
        half = length // 2 + 1
        xr = E.narrow(xr, -1, 0, min(m, half))
        xi = E.narrow(xi, -1, 0, min(m, half)) if xi is not None else None
        k = np.arange(xr.shape[-1])[:, None]
        n = np.arange(length)[None, :]
        w = np.where((k == 0) | ((length % 2 == 0) & (k == length // 2)), 1.0, 2.0) / length
        ang = 2 * np.pi * (k * n % length) / length
        y = E.matmul(xr, r.tensor(w * np.cos(ang)))
        if xi is not None:
            y = y - E.matmul(xi, r.tensor(w * np.sin(ang)))
        return E.movedim(y, -1, axis).unsqueeze(-1).to(t.dtype)
    bins = length // 2 + 1 if onesided and not inverse else length
    n = np.arange(m)[:, None]
    k = np.arange(bins)[None, :]
    ang = 2 * np.pi * (n * k % length) / length
    cos, sin = r.tensor(np.cos(ang)), r.tensor(np.sin(ang))
    if not inverse:  # X = sum x e^{-i...}: (xr + i xi)(cos - i sin)
        yr = E.matmul(xr, cos)
        yi = -E.matmul(xr, sin)
        if xi is not None:
            yr = yr + E.matmul(xi, sin)
            yi = yi + E.matmul(xi, cos)
    else:  # x = 1/L sum X e^{+i...}
        yr = E.matmul(xr, cos)
        yi = E.matmul(xr, sin)
        if xi is not None:
            yr = yr - E.matmul(xi, sin)
            yi = yi + E.matmul(xi, cos)
        yr, yi = yr / length, yi / length
    y = E.stack([yr, yi], dim=-1)
    return E.movedim(y, -2, axis).to(t.dtype)


@op("DFT", host_inputs=(1, 2), note="forward, inverse, one-sided, irfft; dft_length; axis "
    "(attribute before opset 20, input from 20); as matmuls in float64")
def dft(r: Run, node: Node, x: Any, dft_length: Any = None, axis: Any = None) -> Tensor:
    t = r.tensor(x)
    at = node.attrs
    if node.opset < 20:
        ax = int(at.get("axis", 1))
    else:
        ax = int(r.ints(axis)[0]) if axis is not None else -2
    ax %= t.ndim
    if ax == t.ndim - 1:
        raise ValueError(f"{node.where()}: axis {ax} is the component axis")
    inverse, onesided = bool(at.get("inverse", 0)), bool(at.get("onesided", 0))
    if dft_length is not None and r.host(dft_length).size:
        length = r.ints(dft_length)[0]
    elif inverse and onesided:
        length = 2 * (t.shape[ax] - 1)
    else:
        length = t.shape[ax]
    return _dft(r, node, t, length, ax, inverse, onesided)


@op("STFT", host_inputs=(1, 3), note="frames of frame_step, window, frame_length, onesided")
def stft(r: Run, node: Node, x: Any, frame_step: Any, window: Any = None,
         frame_length: Any = None) -> Tensor:
    t = r.tensor(x)
    if t.ndim != 3:
        raise ValueError(f"{node.where()}: signal {tuple(t.shape)} is not [batch, length, "
                         "1 or 2]")
    step = r.ints(frame_step)[0]
    w = r.tensor(window) if window is not None else None
    if frame_length is not None:
        fl = r.ints(frame_length)[0]
    elif w is not None:
        fl = w.shape[0]
    else:
        fl = t.shape[1]
    if w is not None and w.shape[0] != fl:
        raise ValueError(f"{node.where()}: window of {w.shape[0]} for frame_length {fl}")
    if step <= 0 or fl <= 0 or fl > t.shape[1]:
        raise ValueError(f"{node.where()}: frame_step {step}, frame_length {fl} for a signal "
                         f"of {t.shape[1]}")
    frames = 1 + (t.shape[1] - fl) // step
    f = E.stack([E.narrow(t, 1, i * step, fl) for i in range(frames)], dim=1)  # [B, F, L, c]
    if w is not None:
        f = f * w.reshape(1, 1, fl, 1).to(t.dtype)
    return _dft(r, node, f, fl, 2, False, bool(node.attrs.get("onesided", 1)))


def _window_host(kind: str) -> Any:
    def run(node: Node, size: np.ndarray) -> np.ndarray:
        n = int(np.asarray(size).reshape(-1)[0])
        if n < 0:
            raise ValueError(f"{node.where()}: window size {n} is negative")
        dtype = numpy_dtype(int(node.attrs.get("output_datatype", 1)), node.where())
        periodic = int(node.attrs.get("periodic", 1))
        span = n if periodic else n - 1
        i = np.arange(n, dtype=np.float64)
        a = 2 * np.pi * i / span if span else np.zeros(n)
        if kind == "hann":
            w = np.sin(a / 2) ** 2
        elif kind == "hamming":
            alpha = 25.0 / 46.0
            w = alpha - (1 - alpha) * np.cos(a)
        else:
            w = 0.42 - 0.5 * np.cos(a) + 0.08 * np.cos(2 * a)
        return w.astype(dtype)
    return run


def _window(kind: str) -> Any:
    host = _window_host(kind)

    def device(r: Run, node: Node, size: Any) -> Tensor:
        return r.tensor(host(node, r.host(size)))
    return device


for _op, _kind in (("HannWindow", "hann"), ("HammingWindow", "hamming"),
                   ("BlackmanWindow", "blackman")):
    op(_op, host=_window_host(_kind), host_inputs=(0,),
       note="periodic and symmetric; output_datatype")(_window(_kind))


def _mel_host(node: Node, bins: np.ndarray, dft_length: np.ndarray, rate: np.ndarray,
              lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    nm = int(np.asarray(bins).reshape(-1)[0])
    length = int(np.asarray(dft_length).reshape(-1)[0])
    sr = int(np.asarray(rate).reshape(-1)[0])
    lo = float(np.asarray(lower).reshape(-1)[0])
    hi = float(np.asarray(upper).reshape(-1)[0])
    if nm <= 0 or length <= 0 or sr <= 0 or not 0 <= lo < hi:
        raise ValueError(f"{node.where()}: num_mel_bins {nm}, dft_length {length}, sample_rate "
                         f"{sr}, edges [{lo}, {hi}] are not valid")
    spec = length // 2 + 1
    mel_lo = 2595 * np.log1p(lo / 700) / np.log(10)
    mel_hi = 2595 * np.log1p(hi / 700) / np.log(10)
    pts = np.arange(nm + 2) * ((mel_hi - mel_lo) / (nm + 2)) + mel_lo
    hz = 700 * np.expm1(pts / 2595 * np.log(10))
    edge = (((length + 1) * hz) // sr).astype(np.int64)
    out = np.zeros((spec, nm))
    for i in range(nm):
        left, center, right = edge[i], edge[i + 1], edge[i + 2]
        if center == left:
            out[center, i] = 1.0
        else:
            j = np.arange(left, center + 1)
            out[j, i] = (j - left) / (center - left)
        if right > center:
            j = np.arange(center, right)
            out[j, i] = (right - j) / (right - center)
    return out.astype(numpy_dtype(int(node.attrs.get("output_datatype", 1)), node.where()))


@op("MelWeightMatrix", host=_mel_host, host_inputs=(0, 1, 2, 3, 4),
    note="as the ONNX reference (triangular filters on integer bins)")
def mel_weight_matrix(r: Run, node: Node, *xs: Any) -> Tensor:
    return r.tensor(_mel_host(node, *[r.host(v) for v in xs]))
