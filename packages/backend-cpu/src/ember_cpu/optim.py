"""Fused optimizer updates (`ember.ops.composite.adam_step`, ``adam_steps``,
``adam_step_capturable``): one dispatch per step instead of about fifteen primitive ops per
parameter.

A parameter's update runs in float32 for float16 / bfloat16 (rounded once at the end) and in
its own dtype otherwise, in the order of `ember.optim.Adam` (PyTorch's single-tensor Adam):
``maximize``, weight decay, the lerp of ``exp_avg``, ``exp_avg_sq``, then
``p - step_size * exp_avg / (sqrt(exp_avg_sq) / bias_correction2_sqrt + eps)``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from ember.backend import DTypeError, ShapeError
from ember.ops import composite as cops

from ._common import F32, LOW, quiet
from ._jit import adam_update

__all__ = ["KERNELS", "adam_step", "adam_step_capturable", "adam_steps",
           "adam_steps_capturable"]


def _compute(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` the update may overwrite: float32 for half types."""
    return a.astype(F32) if a.dtype in LOW else a.copy()


def _check(op: str, p: np.ndarray, *others: np.ndarray) -> None:
    if p.dtype.kind != "f" and p.dtype not in LOW:
        raise DTypeError(f"{op}: needs a floating-point parameter, got {p.dtype}")
    for a in others:
        if a.shape != p.shape or a.dtype != p.dtype:
            raise ShapeError(f"{op}: parameter, gradient and moments must share shape and "
                             f"dtype, got {[(b.shape, str(b.dtype)) for b in (p, *others)]}")


def _adam(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, lr: float, beta1: float,
          beta2: float, eps: float, weight_decay: float, decoupled: bool, maximize: bool,
          step_size: float, bias_correction2_sqrt: float
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    dt = p.dtype
    if dt == F32 or dt == np.float64:  # one compiled pass instead of a dozen numpy ones
        return adam_update(p, g, m, v, lr, beta1, beta2, eps, weight_decay, decoupled,
                           maximize, step_size, bias_correction2_sqrt)
    pf = _compute(p)
    gf = _compute(g)
    if maximize:
        np.negative(gf, out=gf)
    if weight_decay:
        if decoupled:
            pf *= 1.0 - lr * weight_decay
        else:
            gf += pf * weight_decay
    # exp_avg: m + (g - m) * (1 - beta1), a lerp as PyTorch
    mf = np.subtract(gf, m, dtype=pf.dtype)
    mf *= 1.0 - beta1
    mf += m
    # exp_avg_sq: v * beta2 + g * g * (1 - beta2); gf becomes the scratch buffer
    vf = np.multiply(v, beta2, dtype=pf.dtype)
    gf *= gf
    gf *= 1.0 - beta2
    vf += gf
    denom = np.sqrt(vf, out=gf)
    denom /= bias_correction2_sqrt
    denom += eps
    np.divide(mf, denom, out=denom)
    denom *= step_size
    pf -= denom
    if dt in LOW:
        return pf.astype(dt), mf.astype(dt), vf.astype(dt)
    return pf, mf, vf


@quiet
def adam_step(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, **params: Any
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One Adam / AdamW update of one parameter: ``(p, exp_avg, exp_avg_sq)``."""
    _check("adam_step", p, g, m, v)
    return _adam(p, g, m, v, **params)


@quiet
def adam_steps(*arrays: np.ndarray, **params: Any) -> tuple[np.ndarray, ...]:
    """`adam_step` for n parameters (``p_1..p_n, g_1..g_n, exp_avg_1..exp_avg_n,
    exp_avg_sq_1..exp_avg_sq_n``): ``(p_1..p_n, exp_avg_1..exp_avg_n, exp_avg_sq_1..)``."""
    if len(arrays) % 4:
        raise ValueError(f"adam_steps: expected four lists of n tensors, got {len(arrays)} "
                         f"tensors")
    n = len(arrays) // 4
    ps, ms, vs = [], [], []
    for i in range(n):
        p, g, m, v = arrays[i], arrays[n + i], arrays[2 * n + i], arrays[3 * n + i]
        _check("adam_steps", p, g, m, v)
        po, mo, vo = _adam(p, g, m, v, **params)
        ps.append(po)
        ms.append(mo)
        vs.append(vo)
    return (*ps, *ms, *vs)


def _one_minus_pow(beta: float, t: float) -> float:
    """``1 - beta**t`` without cancellation when ``beta**t`` is near 1."""
    return -math.expm1(t * math.log(beta)) if beta > 0 else 1.0


@quiet
def adam_step_capturable(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray,
                         step: np.ndarray, *, lr: float, beta1: float, beta2: float, eps: float,
                         weight_decay: float, decoupled: bool, maximize: bool
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`adam_step` with the bias corrections computed from ``step`` (0-d, this step counted).
    On the host there is nothing to capture: the count is simply read."""
    _check("adam_step_capturable", p, g, m, v)
    if step.shape != () and step.size != 1:
        raise ShapeError(f"adam_step_capturable: step must be one number, got shape "
                         f"{step.shape}")
    t = float(step.reshape(()))
    return _adam(p, g, m, v, lr, beta1, beta2, eps, weight_decay, decoupled, maximize,
                 step_size=lr / _one_minus_pow(beta1, t),
                 bias_correction2_sqrt=math.sqrt(_one_minus_pow(beta2, t)))


def adam_steps_capturable(*arrays: np.ndarray, **params: Any) -> tuple[np.ndarray, ...]:
    """`adam_step_capturable` for n parameters sharing the step count (the last array)."""
    if len(arrays) % 4 != 1:
        raise ValueError(f"adam_steps_capturable: expected four lists of n tensors and a step "
                         f"count, got {len(arrays)} tensors")
    n, step = len(arrays) // 4, arrays[-1]
    outs = [adam_step_capturable(arrays[i], arrays[n + i], arrays[2 * n + i], arrays[3 * n + i],
                                 step, **params) for i in range(n)]
    return (*(o[0] for o in outs), *(o[1] for o in outs), *(o[2] for o in outs))


KERNELS: dict[Any, Any] = {
    cops.adam_step: adam_step,
    cops.adam_steps: adam_steps,
    cops.adam_step_capturable: adam_step_capturable,
    cops.adam_steps_capturable: adam_steps_capturable,
}
