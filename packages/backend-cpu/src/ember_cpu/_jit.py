"""Loops numpy cannot express in one pass, compiled with numba (imported on first use).

numba earns its place where a kernel would otherwise make many passes over memory with one
numpy call each: GELU's error function (scipy's ``erf`` costs ~15 ns an element in float32; the
rational form below, compiled, ~0.7 ns), and the optimizer updates that touch every parameter
once.  Transcendentals numpy already vectorises (``exp``, ``tanh``) stay in numpy: numba's are
scalar on this CPU.  Kernels are compiled once per process and cached on disk beside this file
(``cache=True``).

``error_model="numpy"`` lets division vectorise (no zero-division check per element).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

__all__ = ["adam_update", "gelu_erf", "gelu_erf_grad"]

_SQRT1_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)

# erf(z) = z * P(z^2) / Q(z^2) on |z| <= 3.92 (beyond, erf rounds to +-1 in float32): a
# rational least-squares fit made for ember (Sanathanan-Koerner iterations on 20,000 points),
# absolute error below 4e-7 evaluated in float32 and 2.5e-7 in float64
_P = (1.12837916e+00, 1.83665222e-01, 5.19715568e-02, 3.50860845e-03, 2.84720359e-04,
      2.17540271e-06)
_Q = (1.0, 4.96102250e-01, 1.11426916e-01, 1.44489325e-02, 1.11074227e-03, 3.93815941e-05)
_ZMAX = 3.92


@functools.cache
def _compiled() -> dict[str, Callable[..., Any]]:
    import numba
    import numpy as np

    # fast-math without "no nans / no infs": those must flow through as numpy's would
    fast = {"nsz", "arcp", "contract", "afn", "reassoc"}
    jit = numba.njit(cache=True, fastmath=fast, error_model="numpy", nogil=True)
    p0, p1, p2, p3, p4, p5 = _P
    _, q1, q2, q3, q4, q5 = _Q
    zmax, s12, inv = _ZMAX, _SQRT1_2, _INV_SQRT_2PI

    @jit  # type: ignore[misc]  # numba's decorator is untyped
    def cdf(v: float) -> float:
        """Phi(v) = (1 + erf(v / sqrt 2)) / 2 through the rational erf, in float64."""
        z = v * s12
        if z > zmax:  # erf is 1 in float32 beyond
            return 1.0
        if z < -zmax:
            return 0.0
        t = z * z
        p = ((((p5 * t + p4) * t + p3) * t + p2) * t + p1) * t + p0
        q = ((((q5 * t + q4) * t + q3) * t + q2) * t + q1) * t + 1.0
        return 0.5 + 0.5 * z * p / q

    @jit  # type: ignore[misc]
    def gelu(x: Any, out: Any) -> None:
        for i in range(x.size):
            v = np.float64(x[i])
            out[i] = v * cdf(v)

    @jit  # type: ignore[misc]
    def gelu_grad(g: Any, x: Any, e: Any, out: Any) -> None:
        # e = exp(-x^2 / 2), from numpy's vectorised exp
        for i in range(x.size):
            v = np.float64(x[i])
            out[i] = np.float64(g[i]) * (cdf(v) + v * inv * np.float64(e[i]))

    @jit  # type: ignore[misc]
    def adam(p: Any, g: Any, m: Any, v: Any, lr: float, b1: float, b2: float, eps: float,
             wd: float, decoupled: bool, sign: float, step_size: float, bc2: float) -> None:
        for i in range(p.size):
            gi = sign * np.float64(g[i])
            pi = np.float64(p[i])
            if wd != 0.0:
                if decoupled:
                    pi = pi * (1.0 - lr * wd)
                else:
                    gi = gi + wd * pi
            mi = np.float64(m[i])
            mi = mi + (gi - mi) * (1.0 - b1)
            vi = np.float64(v[i]) * b2 + (1.0 - b2) * gi * gi
            m[i] = mi
            v[i] = vi
            p[i] = pi - step_size * mi / (math.sqrt(vi) / bc2 + eps)

    return {"gelu": gelu, "gelu_grad": gelu_grad, "adam": adam}


def gelu_erf(x: Any) -> Any:
    """Exact GELU of a float32 array (float64 inside), a new array of ``x``'s shape."""
    import numpy as np

    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(flat.shape, x.dtype)
    _compiled()["gelu"](flat, out)
    return out.reshape(x.shape)


def gelu_erf_grad(g: Any, x: Any) -> Any:
    """``g * d gelu(x) / dx`` for float32 ``g`` and ``x`` of one shape."""
    import numpy as np

    xf = np.ascontiguousarray(x).reshape(-1)
    e = np.multiply(xf, xf)
    e *= -0.5
    np.exp(e, out=e)
    out = np.empty(xf.shape, x.dtype)
    _compiled()["gelu_grad"](np.ascontiguousarray(g).reshape(-1), xf, e, out)
    return out.reshape(x.shape)


def adam_update(p: Any, g: Any, m: Any, v: Any, **params: Any) -> None:
    """One Adam/AdamW update of contiguous float32 arrays, in place (``p``, ``m``, ``v``)."""
    _compiled()["adam"](p.reshape(-1), g.reshape(-1), m.reshape(-1), v.reshape(-1),
                        float(params["lr"]), float(params["beta1"]), float(params["beta2"]),
                        float(params["eps"]), float(params["weight_decay"]),
                        bool(params["decoupled"]), -1.0 if params["maximize"] else 1.0,
                        float(params["step_size"]), float(params["bias_correction2_sqrt"]))
