"""Row programs (`ember.backend.rows`) as OpenCL C, and the composite ops built on them.

OpenCL C's spelling of the shared scheduling loop (`ember.backend.row_schedule`): a work-group
of `LANES` lanes per row; each pass walks the row with the lanes side by side (lane ``l``
takes columns ``l, l + LANES, ...``), each lane accumulates its share, and a local-memory
tree combines the lanes (nan-propagating extremes, the first index of an arg-reduction).
Primitives are spelled by `ember_opencl.render` (the elementwise kernels' table).

The composite ops layer_norm and rms_norm run as one kernel each from their row programs
(`ember.backend.row_kernels`), the normalised axes flattened; the softmax family (see
`kernels`), the norms' backwards and cross entropy keep core's decomposition.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
from ember.backend import rows
from ember.backend.ir import Value
from ember.backend.row_schedule import RowRenderer
from ember.backend.strided import contiguous_strides
from ember.ops import composite as cops

from . import render
from .runtime import GROUP, CLArray, Runtime, load_expr, store_expr
from .strided import contiguous

__all__ = ["LANES", "ClRows", "kernels", "row_kernel", "run", "softmax_kernel", "source"]

#: the most lanes (work-items) that compute one row together
LANES = 64
#: lanes of every row kernel when set (tests reach both kinds of kernel with it)
LANES_OVERRIDE = 0


class ClRows(RowRenderer):
    """OpenCL C's spelling of a row program (see the module docstring), ``lanes`` a row."""

    CODE: ClassVar[dict[str, str]] = {}  # every primitive goes through `render.TABLE`

    def __init__(self, p: rows.RowProgram, lanes: int) -> None:
        super().__init__(p)
        self.lanes = lanes

    def spell(self, v: Value, args: list[str]) -> str:
        return render.TABLE.expr(v, args, [])

    def const(self, v: Value) -> str:
        return render._const(v.arg, v.dtype)

    def assign(self, name: str, expr: str, v: Value) -> str:
        return f"{render.C_TYPES[v.dtype]} {name} = {expr};"

    def load(self, index: int, layout: str, dtype: str) -> str:
        at = {"elem": "base + j", "row": "row", "col": "j"}[layout]
        return load_expr(np.dtype(_np_name(dtype)), f"in{index}[io{index} + {at}]")

    def column(self) -> str:
        return "j"

    def rowlen(self) -> str:
        return "N"

    def open_pass(self) -> list[str]:
        return [f"for (long j = lid; j < N; j += {self.lanes}) {{"]

    def close_pass(self) -> list[str]:
        return ["}"]

    ACC_DECL = "{type} {acc} = {init};"
    INDEX_DECL = "long {acc}i = 0;"
    ACC_UPDATE: ClassVar[dict[str, tuple[str, ...]]] = {
        "sum": ("{acc} += {v};",),
        "prod": ("{acc} *= {v};",),
        "extreme": ("{acc} = ({v} != {v} || {v} {cmp} {acc}) ? {v} : {acc};",),
        "arg": ("int {acc}b = {v} {cmp} {acc} || ({v} != {v} && {acc} == {acc});",
                "{acc}i = {acc}b ? j : {acc}i;", "{acc} = {acc}b ? {v} : {acc};"),
    }

    def type_name(self, dtype: str) -> str:
        return render.C_TYPES[dtype]

    def literal(self, value: int, dtype: str) -> str:
        if dtype == "int64" and abs(value) > 2 ** 62:
            return "LONG_MIN" if value < 0 else "LONG_MAX"
        return str(value) if dtype == "bool" else f"(({render.C_TYPES[dtype]}){value})"

    def infinity(self, dtype: str, negative: bool) -> str:
        return f"({'-' if negative else ''}({render.C_TYPES[dtype]})INFINITY)"

    def acc_final(self, r: Value, acc: str, out: str) -> list[str]:
        kind, t = r.arg, render.C_TYPES[r.src[0].dtype]
        sh = f"sh_{acc}"
        arg = kind.startswith("arg")
        cmp = ">" if kind in ("max", "argmax") else "<"
        if kind == "sum":
            comb = [f"{sh}[lid] = a + b;"]
        elif kind == "prod":
            comb = [f"{sh}[lid] = a * b;"]
        elif not arg:
            comb = [f"{sh}[lid] = (a != a || a {cmp} b) ? a : b;"]
        else:  # the extreme, nan first; of equals the smaller index
            comb = [f"long ai = {sh}i[lid], bi = {sh}i[lid + s];",
                    "int an = a != a, bn = b != b;",
                    f"int bb = (bn && !an) || (!an && !bn && b {cmp} a) || "
                    "(((an && bn) || b == a) && bi < ai);",
                    f"if (bb) {{ {sh}[lid] = b; {sh}i[lid] = bi; }}"]
        res = render.C_TYPES[r.dtype]
        if self.lanes == 1:
            return [f"{res} {out} = {acc}i;" if arg else f"{res} {out} = {acc};"]
        lines = [f"__local {t} {sh}[{self.lanes}];", f"{sh}[lid] = {acc};"]
        if arg:
            lines += [f"__local long {sh}i[{self.lanes}];", f"{sh}i[lid] = {acc}i;"]
        lines += ["barrier(CLK_LOCAL_MEM_FENCE);",
                  f"for (int s = {self.lanes // 2}; s > 0; s >>= 1) {{",
                  f"    if (lid < s) {{ {t} a = {sh}[lid], b = {sh}[lid + s];",
                  *("        " + c for c in comb), "    }",
                  "    barrier(CLK_LOCAL_MEM_FENCE);", "}"]
        lines.append(f"{res} {out} = {sh}i[0];" if arg else f"{res} {out} = {sh}[0];")
        return lines

    def store(self, k: int, layout: str, value: Value, spelled: str) -> list[str]:
        dt = np.dtype(_np_name(self.p.outputs[k][1]))
        src = render.C_TYPES[value.dtype]
        if layout == "elem":
            return [f"out{k}[base + j] = {store_expr(dt, spelled, src)};"]
        guard = "" if self.lanes == 1 else "if (lid == 0) "
        return [f"{guard}out{k}[row] = {store_expr(dt, spelled, src)};"]


def _np_name(dtype: str) -> Any:
    if dtype == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return dtype


def _storage_type(dtype: str) -> str:
    return "ushort" if dtype in ("float16", "bfloat16") else render.C_TYPES[dtype]


def source(p: rows.RowProgram, lanes: int) -> str:
    """The OpenCL C kernel ``row_kernel`` of ``p``: ``lanes`` work-items a row (1: a
    work-item a row, ``GROUP`` rows a work-group)."""
    body = ClRows(p, lanes).body()
    params = [f"__global {_storage_type(s)}* out{k}" for k, (_, s) in enumerate(p.outputs)]
    for i, dt in enumerate(p.dtypes):
        params += [f"__global const {_storage_type(dt)}* in{i}", f"long io{i}"]
    params += ["long M", "long N"]
    if lanes == 1:
        head = ["    const long row = get_global_id(0);", "    if (row >= M) return;",
                "    const int lid = 0;"]
    else:
        head = ["    const long row = get_group_id(0);", "    const int lid = get_local_id(0);"]
    group = GROUP if lanes == 1 else lanes
    return "\n".join([
        f"__kernel __attribute__((reqd_work_group_size({group}, 1, 1)))",
        f"void row_kernel({', '.join(params)}) {{", *head,
        "    const long base = row * N;",
        *("    " + s for s in body), "}"]) + "\n"


_SOURCES: dict[tuple[int, int], tuple[rows.RowProgram, str]] = {}


def lanes_for(rt: Runtime, m: int, n: int) -> int:
    """Work-items a row: one on a CPU device (PoCL runs a work-group's items as vector lanes
    of one loop, and its barriers cost more than the tree saves: 2-30x slower with 64 lanes)
    or where the rows alone fill the device, else up to `LANES`."""
    import pyopencl as cl

    if rt.device.type & cl.device_type.CPU or m >= 1024 or n <= 16:
        return 1
    return min(LANES, 1 << max(0, (n // 4 - 1).bit_length()))


def run(rt: Runtime, p: rows.RowProgram, arrays: Sequence[CLArray]) -> list[CLArray]:
    """``p`` on ``arrays`` (elem ``[*lead, N]``, row ``lead``, col ``[N]``): its outputs."""
    lead, m, n = rows.geometry(p, [a.shape for a in arrays])
    ins = [contiguous(rt, a) for a in arrays]
    outs = [rt.empty((*lead, n) if lay == "elem" else lead, np.dtype(_np_name(store)))
            for (_, store), lay in zip(p.outputs, p.out_layouts(), strict=True)]
    if m:
        lanes = LANES_OVERRIDE or lanes_for(rt, m, n)
        key = (id(p), lanes)
        got = _SOURCES.get(key)
        if got is None or got[0] is not p:  # the program is kept: its id is not reused
            got = _SOURCES[key] = (p, source(p, lanes))
        k = rt.kernel(got[1], "row_kernel")
        args: list[Any] = [o.buffer for o in outs]
        for a in ins:
            args += [a.buffer, np.int64(a.offset)]
        if lanes == 1:
            gsize, lsize = (-(-m // GROUP) * GROUP,), (GROUP,)
        else:
            gsize, lsize = (m * lanes,), (lanes,)
        rt.launch(k, gsize, lsize, *args, np.int64(m), np.int64(n))
    return outs


def row_kernel(rt: Runtime, name: str) -> Callable[..., Any]:
    """An opencl kernel of row kernel ``name`` (what ``OpenCLBackend.row_kernel`` adopts)."""
    def kernel(*arrays: CLArray, **params: Any) -> Any:
        p = rows.expand(name, [a.dtype.name for a in arrays], params)
        outs = run(rt, p, arrays)
        return outs[0] if len(outs) == 1 else tuple(outs)

    kernel.__name__ = name
    return kernel


# -- the composite ops ------------------------------------------------------------------------


def _last(rt: Runtime, x: CLArray, dim: int) -> tuple[CLArray, tuple[int, ...]]:
    """``x`` with axis ``dim`` moved last, contiguous, and the order of its axes."""
    if x.ndim == 0:
        return x.view((1,), (1,), x.offset), ()
    order = (*(i for i in range(x.ndim) if i != dim), dim)
    return contiguous(rt, x.permute(order)), order


def _back(out: CLArray, order: tuple[int, ...]) -> CLArray:
    if not order:
        return out.view((), (), out.offset)
    if order == tuple(range(len(order))):
        return out
    return out.permute(tuple(int(i) for i in np.argsort(order)))


def softmax_kernel(rt: Runtime, name: str) -> Any:
    """The kernel of composite op ``name`` of the softmax family (``x`` or ``y, g``, ``dim``)."""
    def kernel(*xs: CLArray, dim: int) -> CLArray:
        moved = [_last(rt, x, dim) for x in xs]
        p = rows.expand(name, [x.dtype.name for x in xs], {})
        return _back(run(rt, p, [m for m, _ in moved])[0], moved[0][1])

    kernel.__name__ = name
    return kernel


def _rows_of(rt: Runtime, x: CLArray, ndim: int) -> tuple[CLArray, tuple[int, ...], int]:
    lead = x.shape[:x.ndim - ndim]
    n = math.prod(x.shape[x.ndim - ndim:])
    c = contiguous(rt, x)
    return c.view((*lead, n), contiguous_strides((*lead, n)), c.offset), lead, n


def _flat(rt: Runtime, t: CLArray, n: int) -> CLArray:
    c = contiguous(rt, t)
    return c.view((n,), (1,), c.offset)


def _norm_kernel(rt: Runtime, name: str) -> Any:
    def kernel(x: CLArray, *wb: CLArray, ndim: int, eps: float, weight: bool,
               bias: bool = False) -> tuple[CLArray, ...]:
        xr, _, n = _rows_of(rt, x, ndim)
        params: dict[str, Any] = {"eps": float(eps), "weight": weight}
        if name == "layer_norm":
            params["bias"] = bias
        ins = [xr, *(_flat(rt, t, n) for t in wb)]
        outs = run(rt, rows.expand(name, [a.dtype.name for a in ins], params), ins)
        y = outs[0]
        return (y.view(x.shape, contiguous_strides(x.shape), y.offset), *outs[1:])

    kernel.__name__ = name
    return kernel


def kernels(rt: Runtime) -> dict[Any, Any]:
    """The composite ops that run as one row kernel here: those faster than core's
    decomposition (`benchmarks/rows_opencl.py`).  The softmax family is not: on PoCL its row
    kernels took 1.7-4x the decomposition's time on rows of 1024 and 8192 (a work-item
    computes its row's exponentials twice, scalar, where the decomposition's elementwise
    kernel vectorises them), and its backwards 0.8-1.8x."""
    return {
        cops.layer_norm: _norm_kernel(rt, "layer_norm"),
        cops.rms_norm: _norm_kernel(rt, "rms_norm"),
    }
