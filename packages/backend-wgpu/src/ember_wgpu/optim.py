"""Fused optimizer updates (`ember.ops.composite.adam_step`, ``adam_steps``,
``adam_step_capturable``, ``adam_steps_capturable``): one dispatch per parameter instead of
about fifteen primitive ops.

One generated kernel (`strided.map_into`) reads a parameter, its gradient and both moments
and stores the three new values, in the order of `ember.optim.Adam` (PyTorch's single-tensor
Adam): ``maximize``, weight decay, the lerp of ``exp_avg``, ``exp_avg_sq``, then
``p - step_size * exp_avg / (sqrt(exp_avg_sq) / bias_correction2_sqrt + eps)``.  Every dtype
computes in f32 (float16 widened as it is loaded; bfloat16 is stored as f32 values) and is
rounded once as it is stored.  The hyper-parameters are parameter words, so one pipeline
serves all their values; only the switches (maximize, weight decay or none, decoupled) and
the dtype pick the source.  The capturable variants read the step count ``t`` from the
device and form both bias corrections there, ``1 - beta**t`` as ``-expm1(t * log(beta))``
(no cancellation where ``beta**t`` is near 1).
"""

from __future__ import annotations

import math
from typing import Any

from ember.backend import DTypeError, ShapeError
from ember.ops import composite as cops

from .fusion_reduce import max_buffers
from .runtime import STORAGE, Runtime, WGArray
from .strided import is_float, map_into

__all__ = ["kernels"]

#: a parameter, its gradient and its two moments
Four = tuple[WGArray, WGArray, WGArray, WGArray]
#: what the kernel calls its inputs: parameter, gradient, moments, the step count
_NAMES = ("p", "g", "m", "v", "count")
#: log(beta) for beta == 0: exp of it times any count >= 1 is 0 in f32, and it is finite
#: (WGSL lets drivers assume no infinities)
_LOG_ZERO = -1.0e4


def _lines(maximize: bool, has_wd: bool, decoupled: bool, capturable: bool) -> list[str]:
    """The update in WGSL ``let`` lines, ending in ``p2``, ``m1``, ``v1``.  Scalars: ``s0``
    the weight decay's factor (``1 - lr * wd`` decoupled, ``wd`` coupled), ``s1 = 1 - beta1``,
    ``s2 = beta2``, ``s3 = 1 - beta2``, ``s4 = eps``, then ``s5 = step_size`` and
    ``s6 = bias_correction2_sqrt``, or (capturable) ``s5 = lr``, ``s6 = log(beta1)``,
    ``s7 = log(beta2)``."""
    out = [f"let g1 = {'-g' if maximize else 'g'};"]
    if has_wd and decoupled:
        out += ["let p1 = p * s0;", "let g2 = g1;"]
    elif has_wd:
        out += ["let p1 = p;", "let g2 = g1 + p * s0;"]
    else:
        out += ["let p1 = p;", "let g2 = g1;"]
    if capturable:
        out += ["let tc = f32(count);",
                "let step_size = s5 / (-expm1_(tc * s6));",
                "let bc2_sqrt = sqrt(-expm1_(tc * s7));"]
    else:
        out += ["let step_size = s5;", "let bc2_sqrt = s6;"]
    out += ["let m1 = m + (g2 - m) * s1;",  # a lerp, as PyTorch
            "let v1 = v * s2 + g2 * g2 * s3;",
            "let denom = sqrt(v1) / bc2_sqrt + s4;",
            "let p2 = p1 - (m1 / denom) * step_size;"]
    return out


def _check(op: str, p: WGArray, *others: WGArray) -> None:
    if not is_float(p.dtype):
        raise DTypeError(f"{op}: needs a floating-point parameter, got {p.dtype}")
    if p.dtype.name not in STORAGE:  # float64: the device makes no such tensor
        raise DTypeError(f"{op}: the WebGPU device has no {p.dtype} parameters")
    for a in others:
        if a.shape != p.shape or a.dtype != p.dtype:
            raise ShapeError(f"{op}: parameter, gradient and moments must share shape and "
                             f"dtype, got {[(b.shape, str(b.dtype)) for b in (p, *others)]}")


def _log(beta: float) -> float:
    return math.log(beta) if beta > 0 else _LOG_ZERO


def _update(rt: Runtime, op: str, four: Four, count: WGArray | None, tail: tuple[float, ...],
            *, lr: float, beta1: float, beta2: float, eps: float, weight_decay: float,
            decoupled: bool, maximize: bool) -> tuple[WGArray, WGArray, WGArray]:
    """New ``(p, exp_avg, exp_avg_sq)`` from ``four = (p, g, exp_avg, exp_avg_sq)`` by one
    dispatch; ``tail``: the scalars after ``eps`` (see `_lines`)."""
    p, g, m, v = four
    _check(op, p, g, m, v)
    has_wd = weight_decay != 0.0
    outs = [rt.empty(p.shape, p.dtype) for _ in range(3)]
    lines = _lines(bool(maximize), has_wd, bool(decoupled), count is not None)
    factor = 1.0 - lr * weight_decay if decoupled else weight_decay
    scalars = [("float32", x) for x in (factor, 1.0 - beta1, beta2, 1.0 - beta2, eps, *tail)]
    inputs = [p, g, m, v] if count is None else [p, g, m, v, count]
    map_into(rt, lines, list(zip(("p2", "m1", "v1"), outs, strict=True)), inputs, _NAMES,
             scalars)
    return outs[0], outs[1], outs[2]


def _count(op: str, step: WGArray) -> WGArray:
    """The step count as a 0-d view (broadcast over the parameter by the kernel's walk)."""
    if step.size != 1:
        raise ShapeError(f"{op}: step must be one number, got shape {step.shape}")
    return step.view((), (), step.offset)


def _split(op: str, arrays: tuple[WGArray, ...], extra: int) -> list[Four]:
    """``p_1..p_n, g_1..g_n, exp_avg_1..exp_avg_n, exp_avg_sq_1..exp_avg_sq_n`` (and ``extra``
    arrays after them) as one ``(p, g, m, v)`` per parameter."""
    if len(arrays) % 4 != extra:
        what = "four lists of n tensors" + (" and a step count" if extra else "")
        raise ValueError(f"{op}: expected {what}, got {len(arrays)} tensors")
    n = len(arrays) // 4
    return [(arrays[i], arrays[n + i], arrays[2 * n + i], arrays[3 * n + i]) for i in range(n)]


def _gather(outs: list[tuple[WGArray, WGArray, WGArray]]) -> tuple[WGArray, ...]:
    return (*(o[0] for o in outs), *(o[1] for o in outs), *(o[2] for o in outs))


def kernels(rt: Runtime) -> dict[Any, Any]:
    def adam_step(p: WGArray, g: WGArray, m: WGArray, v: WGArray, *, step_size: float,
                  bias_correction2_sqrt: float, **options: Any
                  ) -> tuple[WGArray, WGArray, WGArray]:
        """One Adam / AdamW update of one parameter: ``(p, exp_avg, exp_avg_sq)``."""
        return _update(rt, "adam_step", (p, g, m, v), None,
                       (step_size, bias_correction2_sqrt), **options)

    def adam_steps(*arrays: WGArray, step_size: float, bias_correction2_sqrt: float,
                   **options: Any) -> tuple[WGArray, ...]:
        """`adam_step` for n parameters (one dispatch each)."""
        return _gather([_update(rt, "adam_steps", four, None,
                                (step_size, bias_correction2_sqrt), **options)
                        for four in _split("adam_steps", arrays, 0)])

    def adam_step_capturable(p: WGArray, g: WGArray, m: WGArray, v: WGArray, step: WGArray,
                             **options: Any) -> tuple[WGArray, WGArray, WGArray]:
        """`adam_step` with both bias corrections formed on the device from ``step``."""
        op = "adam_step_capturable"
        tail = (options["lr"], _log(options["beta1"]), _log(options["beta2"]))
        return _update(rt, op, (p, g, m, v), _count(op, step), tail, **options)

    def adam_steps_capturable(*arrays: WGArray, **options: Any) -> tuple[WGArray, ...]:
        """`adam_step_capturable` for n parameters sharing the step count (the last array)."""
        op = "adam_steps_capturable"
        fours = _split(op, arrays, 1)
        count = _count(op, arrays[-1])
        tail = (options["lr"], _log(options["beta1"]), _log(options["beta2"]))
        return _gather([_update(rt, op, four, count, tail, **options) for four in fours])

    # a kernel binds its seven arrays (eight with the count) and the parameter words: where
    # a shader stage may bind fewer storage buffers (WebGPU's minimum is 8), the ops it
    # cannot run decompose instead
    table: dict[Any, Any] = {}
    if max_buffers(rt) >= 8:
        table.update({cops.adam_step: adam_step, cops.adam_steps: adam_steps})
    if max_buffers(rt) >= 9:
        table.update({cops.adam_step_capturable: adam_step_capturable,
                      cops.adam_steps_capturable: adam_steps_capturable})
    return table

