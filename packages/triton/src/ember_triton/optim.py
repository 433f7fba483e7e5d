"""Fused optimizer updates: Adam / AdamW reading each parameter, its gradient and both moments
once and writing the three new values (`ember.ops.composite.adam_step`), for many parameters
in one launch (`adam_steps`, PyTorch's multi-tensor Adam), and with the step count on the
device (`adam_step_capturable`).

The kernels are generated per number of parameters ``t`` (up to `MAX_TENSORS` per launch):
each parameter's blocks are a range of program ids, and a chain of ``if pid < end_i`` picks
the parameter a program works on.  The update itself is ``mathlib.adam_block_``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ember.ops import composite as cops

from ._array import DeviceArray, contiguous_strides
from ._codegen import contiguous

if TYPE_CHECKING:
    from .backend import TritonBackend

__all__ = ["KERNELS", "MAX_TENSORS"]

#: parameters updated by one launch (each takes nine kernel arguments)
MAX_TENSORS = 16
_BLOCK = 1024
_POINTERS = ("po", "mo", "vo", "p", "g", "m", "v")
_SCALARS = ("lr", "beta1", "beta2", "eps", "weight_decay", "decay")


def _source(name: str, t: int, capturable: bool) -> str:
    """A kernel updating ``t`` parameters; ``capturable`` reads the step count from ``step``
    and computes both bias corrections from it (so a replayed graph sees the count move).
    Arguments: every pointer, then every size and block end, then the float scalars."""
    args = [f"{a}{i}" for i in range(t) for a in _POINTERS] + (["step"] if capturable else [])
    args += [f"{a}{i}" for i in range(t) for a in ("n", "end")]
    args += [*_SCALARS, "log_b1", "log_b2"] if capturable else \
        [*_SCALARS, "step_size", "bc2_sqrt"]
    lines = ["@triton.jit",
             f"def {name}({', '.join(args)}, HAS_WD: tl.constexpr, DECOUPLED: tl.constexpr,",
             "        MAXIMIZE: tl.constexpr, BLOCK: tl.constexpr):",
             "    pid = tl.program_id(0)"]
    if capturable:  # step_size = lr / (1 - beta1**t), bc2_sqrt = sqrt(1 - beta2**t)
        lines += ["    t = tl.load(step).to(tl.float32)",
                  "    step_size = lr / one_minus_exp_(t * log_b1)",
                  "    bc2_sqrt = tl.sqrt_rn(one_minus_exp_(t * log_b2))"]
    for i in range(t):
        call = (f"adam_block_(po{i}, mo{i}, vo{i}, p{i}, g{i}, m{i}, v{i}, n{i}, "
                f"pid{f' - end{i - 1}' if i else ''}, {', '.join(_SCALARS)}, step_size, "
                "bc2_sqrt, HAS_WD, DECOUPLED, MAXIMIZE, BLOCK)")
        if t == 1:
            lines.append(f"    {call}")
            break
        lines.append(f"    {'if' if i == 0 else 'elif'} pid < end{i}:" if i < t - 1 else
                     "    else:")
        lines.append(f"        {call}")
    return "\n".join(lines) + "\n"


def _kernel(be: TritonBackend, t: int, capturable: bool) -> Any:
    name = f"adam_step{'_capturable' if capturable else 's'}{t}"
    return be.library.generated(("adam", t, capturable), name,
                                lambda: _source(name, t, capturable), be.kernel_scope)


def _update(be: TritonBackend, ps: Sequence[DeviceArray], gs: Sequence[DeviceArray],
            ms: Sequence[DeviceArray], vs: Sequence[DeviceArray], tail: Sequence[Any], *,
            lr: float, beta1: float, beta2: float, eps: float, weight_decay: float,
            decoupled: bool, maximize: bool, step: DeviceArray | None = None,
            out: Sequence[DeviceArray | None] | None = None) -> tuple[DeviceArray, ...]:
    """New ``(p_1..p_n, m_1..m_n, v_1..v_n)``: one launch per `MAX_TENSORS` parameters.

    ``out`` (one entry per result, ``None`` for a new array) gives buffers to write results
    into: `ember.compile` passes a parameter's or a moment's own buffer where the update may
    overwrite it (`can_update`); each element is read before it is written, by one program.

    A recurring update (the same parameter shapes and options, every operand contiguous and
    16-byte aligned) replays the launches it recorded the first time (`_replay`)."""
    floats = (lr, beta1, beta2, eps, weight_decay, 1.0 - lr * weight_decay, *tail)
    specs = [(p.shape, p.dtype) for p in ps]
    pkey = (tuple(specs), step is not None, weight_decay != 0.0, decoupled, maximize)
    plan = be.adam_plans.get(pkey) if out is None else None
    if plan is not None:
        done = _replay(be, plan, specs, ps, gs, ms, vs, step, floats)
        if done is not None:
            return done
    if out is None:
        # the moments of all the parameters in one allocation (they are always replaced
        # together); the parameters one each (a kept parameter value keeps only itself alive)
        moments = be.memory.empty_many(specs * 2)
    else:
        moments = [o if o is not None else be.empty(shape, dtype)
                   for o, (shape, dtype) in zip(out[len(ps):], specs * 2, strict=True)]
    outs = [[o if o is not None else be.empty(p.shape, p.dtype)
             for o, p in zip((out or [None] * len(ps))[:len(ps)], ps, strict=True)],
            moments[:len(ps)], moments[len(ps):]]
    live = [i for i, p in enumerate(ps) if p.size]
    meta: dict[str, Any] = {"HAS_WD": weight_decay != 0.0, "DECOUPLED": decoupled,
                            "MAXIMIZE": maximize, "BLOCK": _BLOCK}
    if not be.memory.interpret:
        meta["num_warps"] = 4
    chunks: list[tuple[list[int], Any, tuple[int, ...], list[int]]] | None = []
    for first in range(0, len(live), MAX_TENSORS):
        chunk = live[first:first + MAX_TENSORS]
        arrays: list[DeviceArray] = []
        ints: list[int] = []
        end = 0
        for i in chunk:
            end += -(-ps[i].size // _BLOCK)
            arrays += [outs[0][i], outs[1][i], outs[2][i],
                       *(contiguous(be, a[i]) for a in (ps, gs, ms, vs))]
            ints += [ps[i].size, end]
        if step is not None:
            arrays.append(step)
        key = ("adam", len(chunk), step is not None, tuple(a.dtype for a in arrays), *ints,
               *meta.values())
        be.launch_planned(key, _kernel(be, len(chunk), step is not None), (end,), arrays,
                          (*ints, *floats), **meta)
        entry = be._planned.get(key)
        if chunks is not None and entry is not None:
            chunks.append((chunk, entry, (end,), ints))
        else:
            chunks = None
    if chunks is not None and out is None and \
            all(_dense(a) for group in (ps, gs, ms, vs) for a in group):
        if len(be.adam_plans) >= 256:
            be.adam_plans.clear()
        be.adam_plans[pkey] = chunks
    return (*outs[0], *outs[1], *outs[2])


def _dense(a: DeviceArray) -> bool:
    return a.strides == contiguous_strides(a.shape)


def _replay(be: TritonBackend, chunks: list[tuple[list[int], Any, tuple[int, ...], list[int]]],
            specs: list[tuple[tuple[int, ...], Any]], ps: Sequence[DeviceArray],
            gs: Sequence[DeviceArray], ms: Sequence[DeviceArray], vs: Sequence[DeviceArray],
            step: DeviceArray | None,
            floats: tuple[float, ...]) -> tuple[DeviceArray, ...] | None:
    """`_update`'s recorded launches on new operands (``specs``: the parameters' shapes and
    dtypes), or ``None`` (nothing launched) where an operand is not contiguous or not 16-byte
    aligned."""
    if not all(_dense(a) for group in (ps, gs, ms, vs) for a in group):
        return None
    n = len(ps)
    moments = be.memory.empty_many(specs * 2)
    outs = [be.empty(shape, dtype) for shape, dtype in specs]
    launches = []
    bits = 0 if step is None else step.ptr
    for chunk, entry, grid, ints in chunks:
        raw: list[Any] = []
        for i in chunk:
            raw += (outs[i].ptr, moments[i].ptr, moments[n + i].ptr, ps[i].ptr, gs[i].ptr,
                    ms[i].ptr, vs[i].ptr)
        for p in raw:
            bits |= p
        if step is not None:
            raw.append(step.ptr)
        launches.append((entry, grid, [*raw, *ints, *floats]))
    if bits & 15:
        return None
    stream = be.memory.stream()
    for entry, grid, raw in launches:
        entry(grid, stream, raw)
    return (*outs, *moments)


def adam_steps(be: TritonBackend, *arrays: DeviceArray, step_size: float,
               bias_correction2_sqrt: float, **options: Any) -> tuple[DeviceArray, ...]:
    n = len(arrays) // 4
    ps, gs, ms, vs = (arrays[k * n:(k + 1) * n] for k in range(4))
    return _update(be, ps, gs, ms, vs, (step_size, bias_correction2_sqrt), **options)


def adam_step(be: TritonBackend, p: DeviceArray, g: DeviceArray, m: DeviceArray,
              v: DeviceArray, *, step_size: float, bias_correction2_sqrt: float,
              **options: Any) -> tuple[DeviceArray, ...]:
    return _update(be, (p,), (g,), (m,), (v,), (step_size, bias_correction2_sqrt), **options)


def adam_step_capturable(be: TritonBackend, p: DeviceArray, g: DeviceArray, m: DeviceArray,
                         v: DeviceArray, step: DeviceArray,
                         **options: Any) -> tuple[DeviceArray, ...]:
    return _update(be, (p,), (g,), (m,), (v,), _logs(options), step=step, **options)


def adam_steps_capturable(be: TritonBackend, *arrays: DeviceArray,
                          **options: Any) -> tuple[DeviceArray, ...]:
    """`adam_step_capturable` for n parameters sharing the step count (the last array)."""
    n = len(arrays) // 4
    ps, gs, ms, vs = (arrays[k * n:(k + 1) * n] for k in range(4))
    return _update(be, ps, gs, ms, vs, _logs(options), step=arrays[-1], **options)


def updated_output(fn: Any, n_inputs: int, position: int) -> int | None:
    """Which result of Adam kernel ``fn`` (called on ``n_inputs`` arrays) replaces its input
    at ``position``: ``p_i`` -> ``p_i'``, ``m_i`` -> ``m_i'``, ``v_i`` -> ``v_i'``; ``None``
    for a gradient, the step count, or a function that is not an Adam kernel."""
    if fn not in KERNELS.values():
        return None
    n = n_inputs // 4
    if position < n:
        return position
    if 2 * n <= position < 4 * n:
        return position - n
    return None


def _logs(options: dict[str, Any]) -> tuple[float, float]:
    """log(beta1), log(beta2): the kernel computes both bias corrections from the count."""
    b1, b2 = options["beta1"], options["beta2"]
    return (math.log(b1) if b1 > 0 else -math.inf, math.log(b2) if b2 > 0 else -math.inf)


KERNELS: dict[Any, Any] = {cops.adam_step: adam_step, cops.adam_steps: adam_steps,
                           cops.adam_step_capturable: adam_step_capturable,
                           cops.adam_steps_capturable: adam_steps_capturable}
