"""One LSTM or GRU time step as one kernel, forward and backward (`ember.ops.composite`'s
``lstm_cell``, ``gru_cell`` and their ``_backward``), as PyTorch's fused cells split the work:
the input projection of every step is one matmul outside the loop; a step is the hidden
matmul, the gates and the state update.  float16 / bfloat16 compute in float32.

At the sizes of a language model (batch 16, hidden 128) a step is ~10k elements, where each
numpy call costs more in overhead than in arithmetic: the elementwise work runs in a few
numba loops (one pass each, float64 inside), between which numpy's vectorised ``exp`` and
``tanh`` (numba's are scalar here, ~5x slower) take the transcendentals in one call a block.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
from ember.ops import composite

from ._common import LOW, quiet, wide

__all__ = ["KERNELS", "gru_cell", "gru_cell_backward", "gru_layer", "gru_layer_backward",
           "lstm_cell", "lstm_cell_backward", "lstm_layer", "lstm_layer_backward"]


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


@functools.cache
def _loops() -> dict[str, Callable[..., Any]]:
    """The elementwise passes, compiled on first use (cached on disk beside this file).

    Sigmoids are taken as ``1 / (1 + e)`` from ``e = exp(-x)``, which numpy computes in place
    between two passes (exp overflows to inf for very negative x: 1/inf = 0).  The forward
    computes in its dtype (as numpy would), the backward in float64."""
    import numba

    # fast-math without "no nans / no infs": those must flow through as numpy's would
    fast = {"nsz", "arcp", "contract", "afn", "reassoc"}
    jit = numba.njit(cache=True, fastmath=fast, error_model="numpy", nogil=True)

    @jit
    def lstm_pre(wh: Any, gx: Any, b: Any, gates: Any, hs: int) -> None:
        # gates = (W_hh h^T)^T + x-projection + bias; the sigmoid gates i, f, o negated
        for n in range(gates.shape[0]):
            for j in range(2 * hs):
                gates[n, j] = -(wh[j, n] + gx[n, j] + b[j])
            for j in range(2 * hs, 3 * hs):
                gates[n, j] = wh[j, n] + gx[n, j] + b[j]
            for j in range(3 * hs, 4 * hs):
                gates[n, j] = -(wh[j, n] + gx[n, j] + b[j])

    @jit
    def lstm_post(gates: Any, hc: Any, out: Any, hs: int) -> None:
        # exp(-x) -> sigmoid for i, f, o (g is tanh'ed already); c' = f c + i g
        one = gates.dtype.type(1.0)
        for n in range(gates.shape[0]):
            for j in range(hs):
                i = one / (one + gates[n, j])
                f = one / (one + gates[n, hs + j])
                gates[n, j] = i
                gates[n, hs + j] = f
                gates[n, 3 * hs + j] = one / (one + gates[n, 3 * hs + j])
                out[n, hs + j] = f * hc[n, hs + j] + i * gates[n, 2 * hs + j]

    @jit
    def lstm_back(g: Any, carry: Any, hc: Any, hc_new: Any, gates: Any, d: Any, dhc: Any,
                  db: Any, hs: int) -> None:
        # d: the gates' pre-activation gradients; dhc[:, hs:] = dc f.  The state's gradient is
        # g + carry (the later step's dhc; carry may be dhc itself, or empty).  tanh(c') =
        # h' / o (to an ulp or two); where o is 0 it does not matter (each use has a factor o)
        more = carry.shape[0] > 0
        for n in range(d.shape[0]):
            for j in range(hs):
                i = np.float64(gates[n, j])
                f = np.float64(gates[n, hs + j])
                gg = np.float64(gates[n, 2 * hs + j])
                o = np.float64(gates[n, 3 * hs + j])
                t = np.float64(hc_new[n, j]) / o if o != 0.0 else 0.0
                gh = np.float64(g[n, j])
                gc = np.float64(g[n, hs + j])
                if more:
                    gh += np.float64(carry[n, j])
                    gc += np.float64(carry[n, hs + j])
                dc = gc + gh * o * (1.0 - t * t)
                d[n, j] = dc * gg * i * (1.0 - i)
                d[n, hs + j] = dc * np.float64(hc[n, hs + j]) * f * (1.0 - f)
                d[n, 2 * hs + j] = dc * i * (1.0 - gg * gg)
                d[n, 3 * hs + j] = gh * t * o * (1.0 - o)
                dhc[n, hs + j] = dc * f
        if db.shape[0]:
            for j in range(4 * hs):
                acc = 0.0
                for n in range(d.shape[0]):
                    acc += np.float64(d[n, j])
                db[j] = acc

    @jit
    def gru_pre(gx: Any, wh: Any, b: Any, work: Any, hs: int) -> None:
        # work = [-(r, z pre-activations) | . | W_hn h + b_hn], from wh = W_hh h^T
        for n in range(gx.shape[0]):
            for j in range(2 * hs):
                work[n, j] = -(gx[n, j] + wh[j, n] + b[j])
            for j in range(hs):
                work[n, 3 * hs + j] = wh[2 * hs + j, n] + b[2 * hs + j]

    @jit
    def gru_mid(gx: Any, work: Any, hs: int) -> None:
        # exp(-x) -> r, z; the pre-activation of n = x_n + r (W_hn h + b_hn)
        one = work.dtype.type(1.0)
        for n in range(gx.shape[0]):
            for j in range(hs):
                r = one / (one + work[n, j])
                work[n, j] = r
                work[n, hs + j] = one / (one + work[n, hs + j])
                work[n, 2 * hs + j] = gx[n, 2 * hs + j] + r * work[n, 3 * hs + j]

    @jit
    def gru_post(h: Any, work: Any, out: Any, hs: int) -> None:
        # h' = (1 - z) n + z h = n + z (h - n)
        for n in range(h.shape[0]):
            for j in range(hs):
                nn = work[n, 2 * hs + j]
                out[n, j] = nn + work[n, hs + j] * (h[n, j] - nn)

    @jit
    def gru_back(g: Any, carry: Any, h: Any, work: Any, dx: Any, dgh: Any, dhz: Any, db: Any,
                 hs: int) -> None:
        # the state's gradient is g + carry (as in lstm_back; carry may be dhz itself)
        more = carry.shape[0] > 0
        for n in range(h.shape[0]):
            for j in range(hs):
                r = np.float64(work[n, j])
                z = np.float64(work[n, hs + j])
                nn = np.float64(work[n, 2 * hs + j])
                gv = np.float64(g[n, j])
                if more:
                    gv += np.float64(carry[n, j])
                dn = gv * (1.0 - z) * (1.0 - nn * nn)
                dz = gv * (np.float64(h[n, j]) - nn) * z * (1.0 - z)
                dr = dn * np.float64(work[n, 3 * hs + j]) * r * (1.0 - r)
                dx[n, j] = dr
                dx[n, hs + j] = dz
                dx[n, 2 * hs + j] = dn
                dgh[n, j] = dr
                dgh[n, hs + j] = dz
                dgh[n, 2 * hs + j] = dn * r
                dhz[n, j] = gv * z
        if db.shape[0]:
            for j in range(3 * hs):
                acc = 0.0
                for n in range(h.shape[0]):
                    acc += np.float64(dgh[n, j])
                db[j] = acc

    return {"lstm_pre": lstm_pre, "lstm_post": lstm_post, "lstm_back": lstm_back,
            "gru_pre": gru_pre, "gru_mid": gru_mid, "gru_post": gru_post, "gru_back": gru_back}


_ZEROS: dict[tuple[np.dtype[Any], int], np.ndarray] = {}


def _bias(b: tuple[np.ndarray, ...], dt: np.dtype[Any], size: int) -> np.ndarray:
    """The bias, or zeros (read-only, shared) in its place."""
    if b:
        return wide(b[0])
    zeros = _ZEROS.get((dt, size))
    if zeros is None:
        zeros = _ZEROS[dt, size] = np.zeros((size,), dt)
        zeros.flags.writeable = False
    return zeros


def _lstm_step(gx: np.ndarray, hc: np.ndarray, w_hh: np.ndarray, b: np.ndarray,
               out: np.ndarray, gates: np.ndarray, hs: int) -> None:
    """One step into ``out`` (the new ``[h, c]``) and ``gates``."""
    loops = _loops()
    # W_hh h^T, read transposed: OpenBLAS is ~2x faster with the long side (4H) as its rows
    loops["lstm_pre"](np.matmul(w_hh, hc[:, :hs].T), gx, b, gates, hs)
    np.exp(gates[:, :2 * hs], out=gates[:, :2 * hs])
    np.tanh(gates[:, 2 * hs:3 * hs], out=gates[:, 2 * hs:3 * hs])
    np.exp(gates[:, 3 * hs:], out=gates[:, 3 * hs:])
    loops["lstm_post"](gates, hc, out, hs)
    h = out[:, :hs]
    np.tanh(out[:, hs:], out=h)
    h *= gates[:, 3 * hs:]


def _gru_step(gx: np.ndarray, h: np.ndarray, w_hh: np.ndarray, b: np.ndarray,
              out: np.ndarray, work: np.ndarray, hs: int) -> None:
    """One step into ``out`` (the new ``h``) and ``work``."""
    loops = _loops()
    loops["gru_pre"](gx, np.matmul(w_hh, h.T), b, work, hs)  # W_hh h^T as in _lstm_step
    np.exp(work[:, :2 * hs], out=work[:, :2 * hs])
    loops["gru_mid"](gx, work, hs)
    np.tanh(work[:, 2 * hs:3 * hs], out=work[:, 2 * hs:3 * hs])
    loops["gru_post"](h, work, out, hs)


def _empty2(dt: np.dtype[Any]) -> np.ndarray:
    """``carry`` when there is none."""
    return np.empty((0, 0), dt)


def _previous(states: np.ndarray, first: np.ndarray, hs: int, reverse: bool) -> np.ndarray:
    """The ``h`` before every step, ``[T, N, H]`` (the first state's at the first step)."""
    out = np.empty((*states.shape[:2], hs), states.dtype)
    if reverse:
        out[-1] = first[:, :hs]
        out[:-1] = states[1:, :, :hs]
    else:
        out[0] = first[:, :hs]
        out[1:] = states[:-1, :, :hs]
    return out


def _step0(x: np.ndarray) -> np.ndarray:
    """``x[0]`` of a ``[T, ...]`` array (an empty one of that shape when T is 0)."""
    return x[0] if x.shape[0] else np.empty(x.shape[1:], x.dtype)


def _check_layer(name: str, gates: int, gx: np.ndarray, state: np.ndarray, w_hh: np.ndarray,
                 b: tuple[np.ndarray, ...], width: int) -> int:
    if gx.ndim != 3:
        raise ValueError(f"{name}: gates_x must be [T, N, {gates}H], got {gx.shape}")
    return _check(name, gates, _step0(gx), state, w_hh, b, width)


def _sum_rows(d: np.ndarray, bias: bool) -> np.ndarray:
    return d.reshape(-1, d.shape[-1]).sum(axis=0) if bias else np.empty((0,), d.dtype)


@quiet
def lstm_cell(gx: np.ndarray, hc: np.ndarray, w_hh: np.ndarray, *b: np.ndarray,
              bias: bool = False) -> tuple[np.ndarray, ...]:
    """``(hc', gates)``: the new ``[h, c]`` and the activated gates ``i, f, g, o``."""
    hs = _check("lstm_cell", 4, gx, hc, w_hh, b, 2)
    dt = gx.dtype
    gx, hc, w_hh = wide(gx), wide(hc), wide(w_hh)
    out = np.empty_like(hc)
    gates = np.empty(gx.shape, hc.dtype)
    _lstm_step(gx, hc, w_hh, _bias(b, hc.dtype, 4 * hs), out, gates, hs)
    return _back(dt, out, gates)


@quiet
def lstm_layer(gx: np.ndarray, hc: np.ndarray, w_hh: np.ndarray, *b: np.ndarray,
               bias: bool = False, reverse: bool = False) -> tuple[np.ndarray, ...]:
    """``(hcs, gates)``: `lstm_cell` over every step, ``[T, N, 2H]`` and ``[T, N, 4H]``."""
    hs = _check_layer("lstm_layer", 4, gx, hc, w_hh, b, 2)
    dt = gx.dtype
    gx, hc, w_hh = wide(gx), wide(hc), wide(w_hh)
    n_steps = gx.shape[0]
    hcs = np.empty((n_steps, *hc.shape), hc.dtype)
    gates = np.empty(gx.shape, hc.dtype)
    bb = _bias(b, hc.dtype, 4 * hs)
    state = hc
    for t in range(n_steps - 1, -1, -1) if reverse else range(n_steps):
        _lstm_step(gx[t], state, w_hh, bb, hcs[t], gates[t], hs)
        state = hcs[t]
    return _back(dt, hcs, gates)


def _check_backward(name: str, g: np.ndarray, state: np.ndarray, new: np.ndarray) -> None:
    if g.shape != new.shape or g.dtype != state.dtype or new.dtype != state.dtype \
            or g.shape[-2:] != state.shape:
        raise ValueError(f"{name}: g {g.shape} {g.dtype} and the new state {new.shape} "
                         f"{new.dtype} do not fit the state {state.shape} {state.dtype}")


@quiet
def lstm_cell_backward(g: np.ndarray, hc: np.ndarray, w_hh: np.ndarray, hc_new: np.ndarray,
                       gates: np.ndarray, bias: bool = False) -> tuple[np.ndarray, ...]:
    """``(dgates_x, dhc, dw_hh, db_hh)``; ``db_hh`` is empty without a bias."""
    hs = _check("lstm_cell_backward", 4, gates, hc, w_hh, (), 2)
    _check_backward("lstm_cell_backward", g, hc, hc_new)
    dt = hc.dtype
    g, hc, w_hh, gates = wide(g), wide(hc), wide(w_hh), wide(gates)
    d = np.empty_like(gates)
    dhc = np.empty_like(hc)
    db = np.empty((4 * hs if bias else 0,), d.dtype)
    _loops()["lstm_back"](g, _empty2(d.dtype), hc, wide(hc_new), gates, d, dhc, db, hs)
    dhc[:, :hs] = np.matmul(d, w_hh)
    dw = np.matmul(d.T, hc[:, :hs])
    return _back(dt, d, dhc, dw, db)


@quiet
def lstm_layer_backward(g: np.ndarray, hc: np.ndarray, w_hh: np.ndarray, hcs: np.ndarray,
                        gates: np.ndarray, bias: bool = False,
                        reverse: bool = False) -> tuple[np.ndarray, ...]:
    """``(dgates_x, dhc, dw_hh, db_hh)`` of `lstm_layer`: the steps from the last back, each
    step's ``dhc`` carried into the one before; ``dw_hh`` one matmul over every step."""
    hs = _check_layer("lstm_layer_backward", 4, gates, hc, w_hh, (), 2)
    _check_backward("lstm_layer_backward", g, hc, hcs)
    dt = hc.dtype
    g, hc, w_hh, hcs, gates = wide(g), wide(hc), wide(w_hh), wide(hcs), wide(gates)
    back = _loops()["lstm_back"]
    n_steps = g.shape[0]
    d = np.empty_like(gates)
    dhc = np.zeros_like(hc)
    none, carry = np.empty((0,), d.dtype), _empty2(d.dtype)
    for t in range(n_steps) if reverse else range(n_steps - 1, -1, -1):
        prev = hcs[t + 1 if reverse else t - 1] if t != (n_steps - 1 if reverse else 0) else hc
        back(g[t], carry, prev, hcs[t], gates[t], d[t], dhc, none, hs)
        dhc[:, :hs] = np.matmul(d[t], w_hh)
        carry = dhc
    prev_h = _previous(hcs, hc, hs, reverse)
    dw = np.matmul(d.reshape(-1, 4 * hs).T, prev_h.reshape(-1, hs))
    return _back(dt, d, dhc, dw, _sum_rows(d, bias))


@quiet
def gru_cell(gx: np.ndarray, h: np.ndarray, w_hh: np.ndarray, *b: np.ndarray,
             bias: bool = False) -> tuple[np.ndarray, ...]:
    """``(h', work)``: the new state and ``r, z, n, W_hn h + b_hn``."""
    hs = _check("gru_cell", 3, gx, h, w_hh, b, 1)
    dt = gx.dtype
    gx, h, w_hh = wide(gx), wide(h), wide(w_hh)
    out = np.empty_like(h)
    work = np.empty((gx.shape[0], 4 * hs), h.dtype)
    _gru_step(gx, h, w_hh, _bias(b, h.dtype, 3 * hs), out, work, hs)
    return _back(dt, out, work)


@quiet
def gru_layer(gx: np.ndarray, h: np.ndarray, w_hh: np.ndarray, *b: np.ndarray,
              bias: bool = False, reverse: bool = False) -> tuple[np.ndarray, ...]:
    """``(hs, work)``: `gru_cell` over every step, ``[T, N, H]`` and ``[T, N, 4H]``."""
    hs = _check_layer("gru_layer", 3, gx, h, w_hh, b, 1)
    dt = gx.dtype
    gx, h, w_hh = wide(gx), wide(h), wide(w_hh)
    n_steps = gx.shape[0]
    states = np.empty((n_steps, *h.shape), h.dtype)
    work = np.empty((n_steps, h.shape[0], 4 * hs), h.dtype)
    bb = _bias(b, h.dtype, 3 * hs)
    state = h
    for t in range(n_steps - 1, -1, -1) if reverse else range(n_steps):
        _gru_step(gx[t], state, w_hh, bb, states[t], work[t], hs)
        state = states[t]
    return _back(dt, states, work)


def _check_work(name: str, work: np.ndarray, h: np.ndarray) -> int:
    hs = h.shape[-1]
    if work.shape[-1] != 4 * hs or work.shape[-2] != h.shape[0] or work.dtype != h.dtype:
        raise ValueError(f"{name}: work {work.shape} {work.dtype} does not fit h {h.shape} "
                         f"{h.dtype}")
    return int(hs)


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
    dx = np.empty((h.shape[0], 3 * hs), g.dtype)
    dgh = np.empty_like(dx)
    dh = np.empty_like(h)
    db = np.empty((3 * hs if bias else 0,), dx.dtype)
    _loops()["gru_back"](g, _empty2(dx.dtype), h, work, dx, dgh, dh, db, hs)
    dh += np.matmul(dgh, w_hh)
    dw = np.matmul(dgh.T, h)
    return _back(dt, dx, dh, dw, db)


@quiet
def gru_layer_backward(g: np.ndarray, h: np.ndarray, w_hh: np.ndarray, states: np.ndarray,
                       work: np.ndarray, bias: bool = False,
                       reverse: bool = False) -> tuple[np.ndarray, ...]:
    """``(dgates_x, dh, dw_hh, db_hh)`` of `gru_layer`, as `lstm_layer_backward`."""
    if work.ndim != 3:
        raise ValueError(f"gru_layer_backward: work must be [T, N, 4H], got {work.shape}")
    hs = _check("gru_layer_backward", 3, _step0(work)[:, :3 * work.shape[-1] // 4], h, w_hh,
                (), 1)
    _check_work("gru_layer_backward", work, h)
    _check_backward("gru_layer_backward", g, h, states)
    dt = h.dtype
    g, h, w_hh, states, work = wide(g), wide(h), wide(w_hh), wide(states), wide(work)
    back = _loops()["gru_back"]
    n_steps = g.shape[0]
    dx = np.empty((n_steps, h.shape[0], 3 * hs), h.dtype)
    dgh = np.empty_like(dx)
    dh = np.zeros_like(h)
    none, carry = np.empty((0,), h.dtype), _empty2(h.dtype)
    for t in range(n_steps) if reverse else range(n_steps - 1, -1, -1):
        prev = states[t + 1 if reverse else t - 1] if t != (n_steps - 1 if reverse else 0) \
            else h
        back(g[t], carry, prev, work[t], dx[t], dgh[t], dh, none, hs)
        dh += np.matmul(dgh[t], w_hh)
        carry = dh
    prev_h = _previous(states, h, hs, reverse)
    dw = np.matmul(dgh.reshape(-1, 3 * hs).T, prev_h.reshape(-1, hs))
    return _back(dt, dx, dh, dw, _sum_rows(dgh, bias))


KERNELS: dict[Any, Any] = {
    composite.lstm_cell: lstm_cell,
    composite.lstm_cell_backward: lstm_cell_backward,
    composite.gru_cell: gru_cell,
    composite.gru_cell_backward: gru_cell_backward,
    composite.lstm_layer: lstm_layer,
    composite.lstm_layer_backward: lstm_layer_backward,
    composite.gru_layer: gru_layer,
    composite.gru_layer_backward: gru_layer_backward,
}
