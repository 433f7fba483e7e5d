"""Row programs (`ember.backend.rows`) as Triton kernels: Triton's spelling of the shared
scheduling loop (`ember.backend.row_schedule`), and the kernels built from it.

A program takes ``BLOCK_M`` rows; elem values are ``[BLOCK_M, BLOCK_N]`` blocks, row values
``[BLOCK_M]`` vectors.  A row that fits one block (``ONE``) is one scope: every input is read
once and kept in registers; longer rows are walked in ``BLOCK_N`` chunks, once per stage of
reductions and once to store.  Reductions accumulate lane-wise over the chunks and combine the
lanes at the end (``tl.sum``; the extremes with nan carried by a lane count; the arg-
reductions as the smallest index among the lanes holding the extreme).  Primitives are spelled
by `ember_triton.render` (the elementwise kernels' table), so both share one spelling.
Half types compute in float32, float64 in float64; offsets are int64.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from ember.backend import ir, rows
from ember.backend.ir import Value
from ember.backend.row_schedule import RowRenderer

from . import render
from ._codegen import contiguous
from .rows import _Plan

if TYPE_CHECKING:
    from ._array import DeviceArray
    from .backend import TritonBackend

__all__ = ["TritonRows", "kernel", "run", "source"]

_BIG = 1 << 62
_KERNELS: dict[tuple[int, bool, str], tuple[rows.RowProgram, Any]] = {}


class TritonRows(RowRenderer):
    """Triton's spelling of a row program (see the module docstring)."""

    CODE: ClassVar[dict[str, str]] = {}  # every primitive goes through `render._expr`

    def spell(self, v: Value, args: list[str]) -> str:
        if v.op == "pow" or (v.op == "fdiv" and v.src[0].op == "const"):
            # mathlib's helpers read their first operand's dtype: give constants a tensor's
            args = [f"(tl.zeros_like({args[1]}) + {args[0]})" if s.op == "const" else a
                    for s, a in zip(v.src, args, strict=True)]
            if v.op == "fdiv":
                return f"div_({args[0]}, {args[1]})"
        return render._expr(v, args)

    def const(self, v: Value) -> str:
        return render._const(v.arg)

    def cast(self, v: Value, src: str) -> str:  # pragma: no cover - `spell` renders casts
        return render._expr(v, [src])

    def load(self, index: int, layout: str, dtype: str) -> str:
        t = render.TL_TYPES[ir.compute_dtype(dtype)]
        if layout == "elem":
            return f"tl.load(in{index} + base + kk[None, :], mask=mk, other=0).to({t})"
        if layout == "row":
            return f"tl.load(in{index} + rows, mask=rmask, other=0).to({t})"
        return f"tl.load(in{index} + kk, mask=kmask, other=0).to({t})[None, :]"

    def column(self) -> str:
        return "kk[None, :].to(tl.int64)"

    def rowlen(self) -> str:
        return "(tl.zeros([BLOCK_M], tl.int64) + N)"

    def broadcast(self, name: str) -> str:
        return f"{name}[:, None]"

    def open_pass(self) -> list[str]:
        return ["for k0 in range(0, N, BLOCK_N):", "kk = k0 + cols", "kmask = kk < N",
                "mk = rmask[:, None] & kmask[None, :]"]

    ACC_DECL = "{acc} = tl.full([BLOCK_M, BLOCK_N], {init}, {type})"
    INDEX_DECL = "{acc}i = tl.zeros([BLOCK_M, BLOCK_N], tl.int64)"
    ACC_UPDATE: ClassVar[dict[str, tuple[str, ...]]] = {  # no prod: Triton has no product
        "sum": ("{acc} += tl.where(mk, {v}, 0)",),
        "extreme": ("{acc} = tl.where(mk & (({v} {cmp} {acc}) | ({v} != {v})), {v}, {acc})",),
        "arg": ("{acc}b = mk & (({v} {cmp} {acc}) | (({v} != {v}) & ({acc} == {acc})))",
                "{acc}i = tl.where({acc}b, kk[None, :].to(tl.int64), {acc}i)",
                "{acc} = tl.where({acc}b, {v}, {acc})"),
    }

    def type_name(self, dtype: str) -> str:
        return render.TL_TYPES[dtype]

    def infinity(self, dtype: str, negative: bool) -> str:
        return f"float('{'-' if negative else ''}inf')"

    def acc_final(self, r: Value, acc: str, out: str) -> list[str]:
        kind = r.arg
        if kind == "sum":
            return [f"{out} = tl.sum({acc}, axis=1)"]
        fn = "tl.max" if kind in ("max", "argmax") else "tl.min"
        top = f"{fn}({acc}, axis=1)"
        if ir.is_float(r.src[0].dtype):  # a lane holding nan makes the row's extreme nan
            top = (f"tl.where(tl.max(({acc} != {acc}).to(tl.int32), axis=1) > 0, "
                   f"float('nan'), {top})")
        if kind in ("max", "min"):
            return [f"{out} = {top}"]
        return [f"{out}m = {top}",
                f"{out}h = ({acc} == {out}m[:, None]) | (({acc} != {acc}) & "
                f"({out}m != {out}m)[:, None])",
                f"{out} = tl.min(tl.where({out}h, {acc}i, {_BIG}), axis=1)"]

    def store(self, k: int, layout: str, value: Value, spelled: str) -> list[str]:
        cast = f"out{k}.dtype.element_ty"
        if layout == "elem":
            return [f"tl.store(out{k} + base + kk[None, :], tl.broadcast_to({spelled}, "
                    f"[BLOCK_M, BLOCK_N]).to({cast}), mask=mk)"]
        return [f"tl.store(out{k} + rows, ({spelled}).to({cast}), mask=rmask)"]


def source(p: rows.RowProgram, one: bool) -> str:
    """The Triton kernel ``row_kernel(out0.., in0.., M, N, BLOCK_M, BLOCK_N)`` of ``p``."""
    body = TritonRows(p, one).body()
    args = [*(f"out{k}" for k in range(len(p.outputs))),
            *(f"in{i}" for i in range(len(p.layouts))), "M", "N"]
    lines = ["@triton.jit",
             f"def row_kernel({', '.join(args)}, BLOCK_M: tl.constexpr, "
             "BLOCK_N: tl.constexpr):",
             "    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)",
             "    rmask = rows < M",
             "    base = rows[:, None] * N",
             "    cols = tl.arange(0, BLOCK_N)"]
    if one:
        lines += ["    kk = cols", "    kmask = kk < N", "    mk = rmask[:, None] & kmask[None, :]"]
    lines += ["    " + s for s in body]
    return "\n".join(lines) + "\n"


def _storage(name: str, arrays: Sequence[DeviceArray]) -> np.dtype[Any]:
    for a in arrays:
        if a.dtype.name == name:
            return np.dtype(a.dtype)
    return np.dtype(name)


def run(be: TritonBackend, p: rows.RowProgram, arrays: Sequence[DeviceArray]
        ) -> list[DeviceArray]:
    """``p`` on ``arrays`` (elem ``[*lead, N]``, row ``lead``, col ``[N]``): its outputs."""
    lead, m, n = rows.geometry(p, [tuple(a.shape) for a in arrays])
    ins = [contiguous(be, a) for a in arrays]
    outs = [be.empty((*lead, n) if lay == "elem" else lead, _storage(store, arrays))
            for (_, store), lay in zip(p.outputs, p.out_layouts(), strict=True)]
    if m:
        wide = any(a.dtype.itemsize == 8 for a in ins)
        plan = _Plan(be, m, n, np.dtype(np.float64 if wide else np.float32))
        key = (id(p), plan.one, be.library.mode)
        got = _KERNELS.get(key)
        if got is None or got[0] is not p:  # the program is kept: its id is not reused
            fn = be.library.generated(("rows", *key), "row_kernel",
                                      lambda: source(p, plan.one), be.library.scope)
            got = _KERNELS[key] = (p, fn)
        be.launch(got[1], (plan.programs,), *outs, *ins, m, n, **plan.meta)
    return outs


def kernel(name: str) -> Any:
    """A Triton kernel of row kernel ``name`` (what ``TritonBackend.row_kernel`` adopts)."""
    def run_kernel(be: TritonBackend, *arrays: DeviceArray, **params: Any) -> Any:
        p = rows.expand(name, [a.dtype.name for a in arrays], params)
        outs = run(be, p, arrays)
        return outs[0] if len(outs) == 1 else tuple(outs)

    run_kernel.__name__ = name
    return run_kernel
