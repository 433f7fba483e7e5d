"""3x3 stride-1 convolutions by Winograd's minimal filtering F(m x m, 3 x 3), m = 2 or 4.

An ``m x m`` block of outputs costs ``(m + 2)^2`` multiplies per input and output channel
instead of ``9 m^2``: 2.25x fewer for F(2,3), 4x for F(4,3), in ``(m + 2)^2`` GEMMs
``[O, C] @ [C, tiles]``.  The input, filter and output transforms (`_winograd_jit`) cost
passes over memory and extra rounding: in float32, F(2,3) is about as close to the exact sum
as the direct GEMM, F(4,3) tens of times less (~1e-5 of the output's magnitude at 64-512
channels: its transforms have entries up to 8 and divide by 24; the tests hold the bounds).
The transformed filters are kept from call to call (`_derived`): every call compares the
weights with the copy they were transformed from, bit for bit (~10-40 us for ResNet's
64x64 and 128x128 filters), and transforms them again if they differ (an array can change
under the same object: a compiled step's in-place plan, DLPack sharing), so the rest of a
layer runs as one stage of work for the threads: bands of tile rows, each taken from the
padded input to the output by one thread.  `fused_conv2d` uses it for inference; plain
``conv2d``, which autodiff runs forward, keeps the direct GEMMs.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from . import _blas, _derived, _winograd_jit, _workers
from ._scratch import scratch

__all__ = ["conv3x3"]

Pair = tuple[int, int]

_G = {2: np.array([[1, 0, 0], [1 / 2, 1 / 2, 1 / 2], [1 / 2, -1 / 2, 1 / 2], [0, 0, 1]]),
      4: np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                   [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])}


@functools.cache
def _filter_transform(m: int, dtype: np.dtype[Any]) -> np.ndarray:
    """``[alpha^2, 9]``: row ``a*alpha + b`` gives ``(G g G^T)[a, b]`` from ``g`` flattened."""
    g = _G[m]
    return np.kron(g, g).astype(dtype)


#: about the most bytes of transformed input (V) a band of tiles makes (the L2 of a core
#: on the development VM)
_BAND_BYTES = 2 << 20


def _plane_length(size: int, dtype: np.dtype[Any]) -> int:
    """At least ``size`` elements, an odd number of cache lines: planes a power-of-two apart
    (64 or 128 channels squared) all fall into the same cache sets, and the transforms, which
    write or read every plane at once, ran 2-7x slower."""
    lines = -(-size * dtype.itemsize // 64)
    lines += 1 - lines % 2
    return lines * 64 // dtype.itemsize


def _planes(key: str, count: int, size: int, dtype: np.dtype[Any]) -> np.ndarray:
    """A work buffer of ``count`` rows (planes) of at least ``size`` elements each, laid
    `_plane_length` apart."""
    buf, _ = scratch((key,), (count, _plane_length(size, dtype)), dtype)
    return buf


def _stack(planes: np.ndarray, count: int, rows: int, cols: int) -> np.ndarray:
    """The first ``count`` planes as a stack of ``[rows, cols]`` matrices (a view; ``planes``
    may start inside its rows)."""
    item = planes.itemsize
    return as_strided(planes, (count, rows, cols), (planes.strides[0], cols * item, item))


def conv3x3(x: np.ndarray, w: np.ndarray, padding: Pair, m: int, scale: np.ndarray,
            shift: np.ndarray, residual: np.ndarray | None, relu: bool) -> np.ndarray:
    """``relu(conv2d(x, w, padding=padding) * scale[o] + shift[o] + residual)`` for a 3x3
    kernel, stride 1, no dilation, one group, by F(m x m, 3 x 3); ``x`` and ``w`` float32 or
    float64 of one dtype, ``scale`` (empty: 1) and ``shift`` of that dtype, ``[O]``."""
    dt = x.dtype
    n, c, h, wd = x.shape
    o = w.shape[0]
    ph, pw = padding
    oh, ow = h + 2 * ph - 2, wd + 2 * pw - 2
    th, tw = -(-oh // m), -(-ow // m)
    tiles, a2 = n * th * tw, (m + 2) ** 2
    # the padded input, covering every tile: its border stays zero (only this caller writes
    # this key, and only inside); each chunk of the input transform copies its own channels
    xp, _ = scratch(("winograd.pad", m, ph, pw, h, wd), (n, c, th * m + 2, tw * m + 2), dt,
                    True)
    v = _planes("winograd.inputs", a2, c * tiles, dt)
    mm = _planes("winograd.products", a2, o * tiles, dt)
    out = np.empty((n, o, oh, ow), dt)
    res = np.empty((0, 0, 0, 0), dt) if residual is None else \
        np.ascontiguousarray(residual, dtype=dt)
    wf = np.ascontiguousarray(w).reshape(o * c, 9)
    # the transformed filters U[xi, o*C + c], kept while w's values stay the same (`_derived`
    # compares them on every call); rows an odd number of cache lines apart, as `_planes`
    stride = _plane_length(o * c, dt)
    filters = _derived.derived(w, wf, ("winograd", m), (a2, stride), dt)
    u = filters.value
    if filters.stale(wf, 0, o * c):  # the weights changed (or are new): U again
        np.matmul(_filter_transform(m, dt), wf.T, out=u[:, :o * c])
    filters.done()
    workers = _workers.threads()
    # bands of tile rows (over the batch), each carried through by one thread: the padded
    # copy and the input transform of its rows, the products of its tiles, the output
    # transform and epilogue of its outputs; no thread waits for another (one hand-off a
    # layer).  One band a thread (two made the GEMMs narrower and ResNet's 56x56 layers
    # 0.73 -> 0.93 ms on two idle cores), more where V would pass _BAND_BYTES
    rows = n * th
    bands = min(rows, max(workers, -(-a2 * c * tiles * dt.itemsize // _BAND_BYTES)))
    us, vs, ms = _stack(u, a2, o, c), _stack(v, a2, c, tiles), _stack(mm, a2, o, tiles)
    if workers > 1 and rows % workers and rows < 4 * workers:
        # too few tile rows to share out evenly (ResNet's 28x28 layers: 7): two stages,
        # the input transform by channels, then the products and the output transform by
        # blocks of output channels (each block reads all of V)
        c_step = _workers.split(c, workers, 4)
        o_step = _workers.split(o, workers, 1)

        def inputs(i: int) -> None:
            c0, c1 = i * c_step, min(c, (i + 1) * c_step)
            xp[:, c0:c1, ph:ph + h, pw:pw + wd] = x[:, c0:c1]
            _winograd_jit.inputs(m, xp, v, c0, c1, 0, rows, th, tw)

        def products(i: int) -> None:
            o0, o1 = i * o_step, min(o, (i + 1) * o_step)
            np.matmul(us[:, o0:o1], vs, out=ms[:, o0:o1])
            _winograd_jit.outputs(m, mm, out, scale, shift, res, relu, o0, o1, 0, rows, th,
                                  tw)

        with _blas.one_thread(0):
            _workers.run(inputs, -(-c // c_step), workers)
            _workers.run(products, -(-o // o_step), workers)
        return out

    def band(i: int) -> None:
        r0, r1 = i * rows // bands, (i + 1) * rows // bands  # sizes differ by one at most
        for b in range(r0 // th, (r1 - 1) // th + 1):  # this band's input rows, padded
            y0 = max((max(r0, b * th) - b * th) * m - ph, 0)
            y1 = min((min(r1, (b + 1) * th) - b * th) * m + 2 - ph, h)
            if y1 > y0:
                xp[b, :, ph + y0:ph + y1, pw:pw + wd] = x[b, :, y0:y1]
        _winograd_jit.inputs(m, xp, v, 0, c, r0, r1, th, tw)
        t0, t1 = r0 * tw, r1 * tw
        np.matmul(us, vs[:, :, t0:t1], out=ms[:, :, t0:t1])
        _winograd_jit.outputs(m, mm, out, scale, shift, res, relu, 0, o, r0, r1, th, tw)

    with _blas.one_thread(0):
        _workers.run(band, bands, workers)
    return out
