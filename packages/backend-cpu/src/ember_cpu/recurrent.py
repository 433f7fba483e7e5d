"""One LSTM or GRU time step as one kernel, forward and backward (`ember.ops.composite`'s
``lstm_cell``, ``gru_cell`` and their ``_backward``), as PyTorch's fused cells split the work:
the input projection of every step is one matmul outside the loop; a step is the hidden
matmul, the gates and the state update, written into preallocated halves and quarters of one
buffer.  float16 / bfloat16 compute in float32.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ember.ops import composite

from ._common import LOW, quiet, wide

__all__ = ["KERNELS", "gru_cell", "gru_cell_backward", "lstm_cell", "lstm_cell_backward"]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-x))`` in place (exp overflows to inf for very negative x: 1/inf = 0)."""
    np.negative(x, out=x)
    np.exp(x, out=x)
    x += 1.0
    return np.reciprocal(x, out=x)


def _check(name: str, gates: int, gx: np.ndarray, state: np.ndarray, w_hh: np.ndarray,
           b: tuple[np.ndarray, ...], width: int) -> int:
    """The hidden size, after checking every shape and dtype (``width``: state columns per
    hidden unit, 2 for LSTM's ``[h, c]``)."""
    hs = w_hh.shape[1] if w_hh.ndim == 2 else -1
    n = gx.shape[0] if gx.ndim == 2 else -1
    ok = (hs >= 0 and n >= 0 and w_hh.shape[0] == gates * hs and gx.shape[1] == gates * hs
          and state.shape == (n, width * hs) and all(t.shape == (gates * hs,) for t in b)
          and all(t.dtype == gx.dtype for t in (state, w_hh, *b)))
    if not ok:
        got = ", ".join(f"{t.shape} {t.dtype}" for t in (gx, state, w_hh, *b))
        raise ValueError(f"{name}: expected gates_x[N, {gates}H], state[N, {width}H], "
                         f"w_hh[{gates}H, H] and b_hh[{gates}H] of one dtype, got {got}")
    return int(hs)


def _back(dt: np.dtype, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    return tuple(a.astype(dt) for a in arrays) if dt in LOW else arrays


@quiet
def lstm_cell(gx: np.ndarray, hc: np.ndarray, w_hh: np.ndarray, *b: np.ndarray,
              bias: bool = False) -> tuple[np.ndarray, ...]:
    """``(hc', gates)``: the new ``[h, c]`` and the activated gates ``i, f, g, o``."""
    hs = _check("lstm_cell", 4, gx, hc, w_hh, b, 2)
    dt = gx.dtype
    gx, hc, w_hh = wide(gx), wide(hc), wide(w_hh)
    gates = np.matmul(hc[:, :hs], w_hh.T)
    gates += gx
    if b:
        gates += wide(b[0])
    _sigmoid(gates[:, :2 * hs])
    np.tanh(gates[:, 2 * hs:3 * hs], out=gates[:, 2 * hs:3 * hs])
    _sigmoid(gates[:, 3 * hs:])
    i, f, g, o = (gates[:, k * hs:(k + 1) * hs] for k in range(4))
    out = np.empty_like(hc)
    h, c = out[:, :hs], out[:, hs:]
    np.multiply(f, hc[:, hs:], out=c)
    c += i * g
    np.tanh(c, out=h)
    h *= o
    return _back(dt, out, gates)


@quiet
def lstm_cell_backward(g: np.ndarray, hc: np.ndarray, w_hh: np.ndarray, hc_new: np.ndarray,
                       gates: np.ndarray, bias: bool = False) -> tuple[np.ndarray, ...]:
    """``(dgates_x, dhc, dw_hh, db_hh)``; ``db_hh`` is empty without a bias."""
    hs = _check("lstm_cell_backward", 4, gates, hc, w_hh, (), 2)
    if g.shape != hc.shape or hc_new.shape != hc.shape or g.dtype != hc.dtype:
        raise ValueError(f"lstm_cell_backward: g {g.shape} {g.dtype} and hc' {hc_new.shape} "
                         f"must match hc {hc.shape} {hc.dtype}")
    dt = hc.dtype
    g, hc, w_hh, gates = wide(g), wide(hc), wide(w_hh), wide(gates)
    i, f, gg, o = (gates[:, k * hs:(k + 1) * hs] for k in range(4))
    gh = g[:, :hs]
    tc = np.tanh(wide(hc_new[:, hs:]))
    d = np.empty_like(gates)
    di, df, dg, do = (d[:, k * hs:(k + 1) * hs] for k in range(4))
    # do = gh * tanh(c') * o (1 - o)
    np.multiply(gh, tc, out=do)
    dc = do * o  # gh * o * tanh(c')
    np.subtract(1.0, o, out=di)
    do *= di
    do *= o
    # dc = gc + gh * o * (1 - tanh(c')^2)
    np.multiply(tc, tc, out=tc)
    np.subtract(1.0, tc, out=tc)
    np.multiply(gh, o, out=di)
    di *= tc
    np.add(di, g[:, hs:], out=dc)
    # di = dc * g * i (1 - i); df = dc * c * f (1 - f); dg = dc * i * (1 - g^2)
    np.multiply(gg, gg, out=dg)
    np.subtract(1.0, dg, out=dg)
    dg *= i
    dg *= dc
    np.subtract(1.0, i, out=di)
    di *= i
    di *= gg
    di *= dc
    np.subtract(1.0, f, out=df)
    df *= f
    df *= hc[:, hs:]
    df *= dc
    dhc = np.empty_like(hc)
    dhc[:, :hs] = np.matmul(d, w_hh)
    np.multiply(dc, f, out=dhc[:, hs:])
    dw = np.matmul(d.T, hc[:, :hs])
    db = d.sum(axis=0) if bias else np.empty((0,), d.dtype)
    return _back(dt, d, dhc, dw, db)


@quiet
def gru_cell(gx: np.ndarray, h: np.ndarray, w_hh: np.ndarray, *b: np.ndarray,
             bias: bool = False) -> tuple[np.ndarray, ...]:
    """``(h', work)``: the new state and ``r, z, n, W_hn h + b_hn``."""
    hs = _check("gru_cell", 3, gx, h, w_hh, b, 1)
    dt = gx.dtype
    gx, h, w_hh = wide(gx), wide(h), wide(w_hh)
    gh = np.matmul(h, w_hh.T)
    if b:
        gh += wide(b[0])
    work = np.empty((gx.shape[0], 4 * hs), gh.dtype)
    rz, n, hn = work[:, :2 * hs], work[:, 2 * hs:3 * hs], work[:, 3 * hs:]
    np.add(gx[:, :2 * hs], gh[:, :2 * hs], out=rz)
    _sigmoid(rz)
    hn[...] = gh[:, 2 * hs:]
    np.multiply(work[:, :hs], hn, out=n)
    n += gx[:, 2 * hs:]
    np.tanh(n, out=n)
    # h' = (1 - z) n + z h = n + z (h - n)
    out = h - n
    out *= work[:, hs:2 * hs]
    out += n
    return _back(dt, out, work)


@quiet
def gru_cell_backward(g: np.ndarray, h: np.ndarray, w_hh: np.ndarray, work: np.ndarray,
                      bias: bool = False) -> tuple[np.ndarray, ...]:
    """``(dgates_x, dh, dw_hh, db_hh)``; ``db_hh`` is empty without a bias."""
    hs = _check("gru_cell_backward", 3, work[:, :3 * work.shape[1] // 4], h, w_hh, (), 1)
    if g.shape != h.shape or g.dtype != h.dtype or work.shape != (h.shape[0], 4 * hs):
        raise ValueError(f"gru_cell_backward: g {g.shape} {g.dtype} and work {work.shape} "
                         f"do not fit h {h.shape} {h.dtype}")
    dt = h.dtype
    g, h, w_hh, work = wide(g), wide(h), wide(w_hh), wide(work)
    r, z, n, hn = (work[:, k * hs:(k + 1) * hs] for k in range(4))
    dx = np.empty((h.shape[0], 3 * hs), g.dtype)
    dr, dz, dn = (dx[:, k * hs:(k + 1) * hs] for k in range(3))
    # dn = g (1 - z) (1 - n^2)
    np.multiply(n, n, out=dn)
    np.subtract(1.0, dn, out=dn)
    dn *= g
    np.subtract(1.0, z, out=dz)
    dn *= dz
    # dz = g (h - n) z (1 - z)
    dz *= z
    dz *= g
    dz *= h - n
    # dr = dn * hn * r (1 - r)
    np.subtract(1.0, r, out=dr)
    dr *= r
    dr *= hn
    dr *= dn
    dgh = dx.copy()
    dgh[:, 2 * hs:] *= r
    dh = np.matmul(dgh, w_hh)
    dh += g * z
    dw = np.matmul(dgh.T, h)
    db = dgh.sum(axis=0) if bias else np.empty((0,), dx.dtype)
    return _back(dt, dx, dh, dw, db)


KERNELS: dict[Any, Any] = {
    composite.lstm_cell: lstm_cell,
    composite.lstm_cell_backward: lstm_cell_backward,
    composite.gru_cell: gru_cell,
    composite.gru_cell_backward: gru_cell_backward,
}
