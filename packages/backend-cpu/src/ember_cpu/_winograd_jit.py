"""The transforms of Winograd's minimal filtering F(m x m, 3 x 3), m = 2 or 4, compiled with
numba (first use; cached on disk beside this file).

A 3x3 stride-1 convolution computed on tiles: each ``alpha x alpha`` patch ``d`` of the padded
input (``alpha = m + 2``, patches ``m`` apart) becomes ``V = B^T d B``, each filter ``g``
becomes ``U = G g G^T``, and an ``m x m`` block of outputs is ``A^T (sum_c U * V) A``; the sum
over channels is ``alpha^2`` independent GEMMs ``M[xi] = U[xi] @ V[xi]``, ``[O, C] @ [C, T]``
over the ``T`` tiles (`ember_cpu.winograd` runs them).  The matrices are Lavin and Gray's
("Fast Algorithms for Convolutional Neural Networks", 2015) with interpolation points
0, +-1 (F(2,3)) and 0, +-1, +-2 (F(4,3)).

The filter transform is one small GEMM (in the caller).  Each kernel here takes a range of
channels or output channels, so that callers may split the work over threads (they release the
GIL).  The ``alpha^2`` planes of ``V`` and ``M`` are rows of 2-D arrays whose length the caller
may pad (see `ember_cpu.winograd`): plane ``xi`` of channel ``c`` and tile ``t`` is
``v[xi, c*T + t]``.  Constants are float32 globals: float32 arrays stay in
float32 arithmetic, float64 arrays in float64.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["inputs", "outputs"]

_2, _4, _5, _8 = np.float32(2), np.float32(4), np.float32(5), np.float32(8)


@functools.cache
def _loops() -> dict[str, Callable[..., Any]]:
    import numba

    fast = {"nsz", "arcp", "contract", "afn", "reassoc"}
    jit = numba.njit(cache=True, fastmath=fast, error_model="numpy", nogil=True)

    # -- the 1-D transforms: B^T d (alpha -> alpha), A^T v (alpha -> m) --

    @jit
    def bt2(d0: Any, d1: Any, d2: Any, d3: Any) -> Any:
        return d0 - d2, d1 + d2, d2 - d1, d1 - d3

    @jit
    def bt4(d0: Any, d1: Any, d2: Any, d3: Any, d4: Any, d5: Any) -> Any:
        return (_4 * d0 - _5 * d2 + d4, d3 + d4 - _4 * (d1 + d2), _4 * (d1 - d2) + d4 - d3,
                _2 * (d3 - d1) + d4 - d2, _2 * (d1 - d3) + d4 - d2, _4 * d1 - _5 * d3 + d5)

    @jit
    def at2(v0: Any, v1: Any, v2: Any, v3: Any) -> Any:
        return v0 + v1 + v2, v1 - v2 - v3

    @jit
    def at4(v0: Any, v1: Any, v2: Any, v3: Any, v4: Any, v5: Any) -> Any:
        s12, d12, s34, d34 = v1 + v2, v1 - v2, v3 + v4, v3 - v4
        return v0 + s12 + s34, d12 + _2 * d34, s12 + _4 * s34, d12 + _8 * d34 + v5

    # -- inputs: V[a*alpha + b, c, t] = (B^T d B)[a, b] for the tile t = (n*TH + ty)*TW + tx;
    # B^T down the columns of a tile row first (contiguous loads), then along its rows

    @jit
    def inputs2(xp: Any, v: Any, c0: int, c1: int, r0: int, r1: int, th: int,
                tw: int) -> None:
        # xp: [N, C, TH*2 + 2, TW*2 + 2], zero-padded
        n_, wp = xp.shape[0], xp.shape[3]
        tiles = n_ * th * tw
        down = np.empty((4, wp), xp.dtype)  # down[a] = (B^T d)[a] across the tile row
        for c in range(c0, c1):
            for row in range(r0, r1):
                n, ty = row // th, row % th
                p = xp[n, c]
                r = ty * 2
                for x in range(wp):
                    down[0, x], down[1, x], down[2, x], down[3, x] = bt2(
                        p[r, x], p[r + 1, x], p[r + 2, x], p[r + 3, x])
                t0 = c * tiles + row * tw
                for a in range(4):
                    src = down[a]
                    v0, v1 = v[a * 4, t0:t0 + tw], v[a * 4 + 1, t0:t0 + tw]
                    v2, v3 = v[a * 4 + 2, t0:t0 + tw], v[a * 4 + 3, t0:t0 + tw]
                    for tx in range(tw):
                        x = tx * 2
                        v0[tx], v1[tx], v2[tx], v3[tx] = bt2(src[x], src[x + 1],
                                                             src[x + 2], src[x + 3])

    @jit
    def inputs4(xp: Any, v: Any, c0: int, c1: int, r0: int, r1: int, th: int,
                tw: int) -> None:
        n_, wp = xp.shape[0], xp.shape[3]
        tiles = n_ * th * tw
        down = np.empty((6, wp), xp.dtype)
        for c in range(c0, c1):
            for row in range(r0, r1):
                n, ty = row // th, row % th
                p = xp[n, c]
                r = ty * 4
                for x in range(wp):
                    (down[0, x], down[1, x], down[2, x], down[3, x], down[4, x],
                     down[5, x]) = bt4(p[r, x], p[r + 1, x], p[r + 2, x], p[r + 3, x],
                                       p[r + 4, x], p[r + 5, x])
                t0 = c * tiles + row * tw
                for a in range(6):
                    src = down[a]
                    v0, v1 = v[a * 6, t0:t0 + tw], v[a * 6 + 1, t0:t0 + tw]
                    v2, v3 = v[a * 6 + 2, t0:t0 + tw], v[a * 6 + 3, t0:t0 + tw]
                    v4, v5 = v[a * 6 + 4, t0:t0 + tw], v[a * 6 + 5, t0:t0 + tw]
                    for tx in range(tw):
                        x = tx * 4
                        v0[tx], v1[tx], v2[tx], v3[tx], v4[tx], v5[tx] = bt4(
                            src[x], src[x + 1], src[x + 2], src[x + 3], src[x + 4],
                            src[x + 5])

    # -- outputs: Y = A^T M A per tile, then the epilogue (scale, shift, residual, ReLU) --

    @jit
    def store(line: Any, dst: Any, k: Any, s: Any, res: Any, added: bool, relu: bool) -> None:
        # dst = line * k + s (+ res when added), then ReLU
        zero = dst.dtype.type(0)
        if not added:
            for q in range(dst.size):
                y = line[q] * k + s
                dst[q] = zero if relu and y < zero else y
        else:
            for q in range(dst.size):
                y = line[q] * k + s + res[q]
                dst[q] = zero if relu and y < zero else y

    @jit
    def outputs2(mm: Any, out: Any, scale: Any, shift: Any, residual: Any, relu: bool,
                 o0: int, o1: int, r0: int, r1: int, th: int, tw: int) -> None:
        n_, _, oh, _ = out.shape
        tiles = n_ * th * tw
        scaled, added = scale.size > 0, residual.size > 0
        cols = np.empty((4, 2, tw), mm.dtype)  # cols[a, j, tx] = (M_a A)[j]
        line = np.empty((2, tw * 2), mm.dtype)  # two output rows of the tile row
        for o in range(o0, o1):
            k = scale[o] if scaled else out.dtype.type(1)
            s = shift[o]
            for row in range(r0, r1):
                n, ty = row // th, row % th
                t0 = o * tiles + row * tw
                for a in range(4):
                    for tx in range(tw):
                        y0, y1 = at2(mm[a * 4, t0 + tx], mm[a * 4 + 1, t0 + tx],
                                     mm[a * 4 + 2, t0 + tx], mm[a * 4 + 3, t0 + tx])
                        cols[a, 0, tx] = y0
                        cols[a, 1, tx] = y1
                for j in range(2):
                    for tx in range(tw):
                        y0, y1 = at2(cols[0, j, tx], cols[1, j, tx], cols[2, j, tx],
                                     cols[3, j, tx])
                        line[0, tx * 2 + j] = y0
                        line[1, tx * 2 + j] = y1
                for i in range(min(2, oh - ty * 2)):
                    r = ty * 2 + i
                    if added:
                        store(line[i], out[n, o, r], k, s, residual[n, o, r], True, relu)
                    else:
                        store(line[i], out[n, o, r], k, s, line[i], False, relu)

    @jit
    def outputs4(mm: Any, out: Any, scale: Any, shift: Any, residual: Any, relu: bool,
                 o0: int, o1: int, r0: int, r1: int, th: int, tw: int) -> None:
        n_, _, oh, _ = out.shape
        tiles = n_ * th * tw
        scaled, added = scale.size > 0, residual.size > 0
        cols = np.empty((6, 4, tw), mm.dtype)
        line = np.empty((4, tw * 4), mm.dtype)
        for o in range(o0, o1):
            k = scale[o] if scaled else out.dtype.type(1)
            s = shift[o]
            for row in range(r0, r1):
                n, ty = row // th, row % th
                t0 = o * tiles + row * tw
                for a in range(6):
                    for tx in range(tw):
                        y0, y1, y2, y3 = at4(mm[a * 6, t0 + tx], mm[a * 6 + 1, t0 + tx],
                                             mm[a * 6 + 2, t0 + tx], mm[a * 6 + 3, t0 + tx],
                                             mm[a * 6 + 4, t0 + tx], mm[a * 6 + 5, t0 + tx])
                        cols[a, 0, tx] = y0
                        cols[a, 1, tx] = y1
                        cols[a, 2, tx] = y2
                        cols[a, 3, tx] = y3
                for j in range(4):
                    for tx in range(tw):
                        y0, y1, y2, y3 = at4(cols[0, j, tx], cols[1, j, tx], cols[2, j, tx],
                                             cols[3, j, tx], cols[4, j, tx], cols[5, j, tx])
                        line[0, tx * 4 + j] = y0
                        line[1, tx * 4 + j] = y1
                        line[2, tx * 4 + j] = y2
                        line[3, tx * 4 + j] = y3
                for i in range(min(4, oh - ty * 4)):
                    r = ty * 4 + i
                    if added:
                        store(line[i], out[n, o, r], k, s, residual[n, o, r], True, relu)
                    else:
                        store(line[i], out[n, o, r], k, s, line[i], False, relu)

    return {"inputs2": inputs2, "inputs4": inputs4, "outputs2": outputs2,
            "outputs4": outputs4}


def inputs(m: int, xp: Any, v: Any, c0: int, c1: int, r0: int, r1: int, th: int,
           tw: int) -> None:
    """``v[alpha^2, C*T (+ padding)]`` for channels ``c0:c1`` and the tiles of tile rows
    ``r0:r1`` (row ``n*th + ty``: tiles ``r0*tw:r1*tw``) from ``xp[N, C, th*m + 2,
    tw*m + 2]``, the zero-padded input (C-contiguous, of ``v``'s dtype; only the rows these
    tiles cover are read)."""
    _loops()[f"inputs{m}"](xp, v, c0, c1, r0, r1, th, tw)


def outputs(m: int, mm: Any, out: Any, scale: Any, shift: Any, residual: Any, relu: bool,
            o0: int, o1: int, r0: int, r1: int, th: int, tw: int) -> None:
    """``out[N, O, OH, OW]`` for output channels ``o0:o1`` and the tiles of tile rows
    ``r0:r1`` from the GEMMs' ``mm[alpha^2, O*T (+ padding)]``: ``A^T M A``, times
    ``scale[o]`` (left out when empty) plus ``shift[o]`` plus ``residual`` (left out when
    empty), then ReLU when ``relu`` (nan stays nan)."""
    _loops()[f"outputs{m}"](mm, out, scale, shift, residual, relu, o0, o1, r0, r1, th, tw)
