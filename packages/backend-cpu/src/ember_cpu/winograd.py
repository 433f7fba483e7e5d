"""3x3 stride-1 convolutions by Winograd's minimal filtering F(m x m, 3 x 3), m = 2 or 4.

An ``m x m`` block of outputs costs ``(m + 2)^2`` multiplies per input and output channel
instead of ``9 m^2``: 2.25x fewer for F(2,3), 4x for F(4,3), in ``(m + 2)^2`` GEMMs
``[O, C] @ [C, tiles]``.  The input, filter and output transforms (`_winograd_jit`) cost
passes over memory and extra rounding: in float32, F(2,3) is about as close to the exact sum
as the direct GEMM, F(4,3) tens of times less (~1e-5 of the output's magnitude at 64-512
channels: its transforms have entries up to 8 and divide by 24; the tests hold the bounds).
The transformed filters are kept from call to call (`_derived`): every call compares the
weights with the copy they were transformed from, bit for bit, a range a thread, and
transforms again the ranges that differ (an array can change under the same object: a
compiled step's in-place plan, DLPack sharing).  `fused_conv2d` uses it for inference; plain
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


#: the fewest output channels a thread's block of the products takes
_BLOCK_ROWS = 32
#: blocks of the products a thread (each block reads all of V: fewer, larger ones ran faster)
_BLOCKS = 1


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
    kron = _filter_transform(m, dt)
    workers = _workers.threads()
    # chunks: a few per thread, so that a thread that loses its core holds up little
    c_step = _workers.split(c, workers, 4)
    # blocks of at least _BLOCK_ROWS output channels: every block reads all of V
    o_step = max(_workers.split(o, workers, _BLOCKS), min(o, _BLOCK_ROWS))

    f_step = -(-o // workers)  # the filters in one chunk a thread, first

    def transform(i: int) -> None:
        if i < workers:  # U[xi, o*C + c] for a range of o, where w changed: [alpha^2, 9] @ [9, k*C]
            q0, q1 = i * f_step * c, min((i + 1) * f_step, o) * c
            if q1 > q0 and filters.stale(wf, q0, q1):
                np.matmul(kron, wf[q0:q1].T, out=u[:, q0:q1])
        else:
            c0 = (i - workers) * c_step
            c1 = min(c0 + c_step, c)
            xp[:, c0:c1, ph:ph + h, pw:pw + wd] = x[:, c0:c1]
            _winograd_jit.inputs(m, xp, v, c0, c1, th, tw)

    def product(i: int) -> None:
        # the 36 products' rows o0:o1 (numpy's loop over the stack calls the BLAS for each),
        # then those output channels' transform: no wait between the two
        o0 = i * o_step
        k = min(o_step, o - o0)
        np.matmul(_stack(u[:, o0 * c:], a2, k, c), _stack(v, a2, c, tiles),
                  out=_stack(mm[:, o0 * tiles:], a2, k, tiles))
        _winograd_jit.outputs(m, mm, out, scale, shift, res, relu, o0, o0 + k, th, tw)

    with _blas.one_thread(0):
        _workers.run(transform, workers + -(-c // c_step), workers)
        filters.done()
        _workers.run(product, -(-o // o_step), workers)
    return out
