"""The OpenCL C renderer of the fusion compiler (`fusion.py`): one kernel from a group's nodes.

`KernelSource` gives each outer position a work-item (or a work-group of `LANES` lanes) and
writes every node it needs as C: an elementwise node is one statement in registers (the
backend's own expression), a reduction a loop recomputing its prologue (a local-memory tree
across the lanes at the outer level), and only the targets are stored.  Values are emitted once
per loop scope and index, hoisted to the outermost scope whose loop variables they use.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from ember import ops
from ember.backend import numpy_dtype
from ember.backend.schedule import RowSchedule, Scope

from .elementwise import cast_expr, clamp_expr, op_expr
from .reduction import _arg_helper, _spec
from .runtime import compute_type, ctype

if TYPE_CHECKING:
    from ember.backend import FusedGroup

__all__ = ["LANES", "KernelSource"]

EW = ops.elementwise
ARG = ("argmax", "argmin")
#: lanes of a work-group kernel (PoCL compiles one work-group function per local size: fixed)
LANES = 64


def _literal(t: str, value: Any) -> str:
    if t in ("float", "double"):
        v = float(value)
        if math.isnan(v):
            return f"({t})NAN"
        if math.isinf(v):
            return f"({t})({'-' if v < 0 else ''}INFINITY)"
        return v.hex() + ("f" if t == "float" else "")
    v = int(value)
    if v == -(2 ** 63):
        return "(long)(-9223372036854775807L - 1)"
    return f"({t})({v}L)"


_NP_OF = {"float": np.float32, "double": np.float64, "long": np.int64}


class KernelSource(RowSchedule):
    """Writes one kernel computing ``targets`` over an outer space ``outer`` (the leading axes
    every target shares) in OpenCL C; `RowSchedule` schedules it (see the module docstring)."""

    DECL = "const long {var} = {value};"
    LANE_ZERO = "lid == 0"
    ANCESTORS_FIRST = False

    def __init__(self, g: FusedGroup, targets: Sequence[int], outer: tuple[int, ...],
                 lanes: int) -> None:
        super().__init__(g, targets, outer)
        self.lanes = lanes
        self.params: list[str] = []
        self.values: list[Any] = []
        self.inputs: dict[int, tuple[int, ...]] = {}  # input -> axes whose strides it takes

    # -- spelling ------------------------------------------------------------------------------

    def sym(self, value: Any, t: str = "long") -> str:
        """A kernel argument carrying ``value`` (so sizes never enter the source)."""
        name = f"e{len(self.values)}"
        self.params.append(f"{t} {name}")
        self.values.append(_NP_OF[t](value))
        return name

    def work_group(self) -> bool:
        return self.lanes > 1

    def for_loop(self, k: str, total: str, body: list[str]) -> list[str]:
        return _for(k, total, self.lanes > 1, body)

    # -- values --------------------------------------------------------------------------------

    def input_address(self, k: int, axes: list[int]) -> tuple[str, list[str]]:
        self.inputs[k] = tuple(axes)
        return f"po{k}", [f"pq{k}_{d}" for d in axes]

    def load_line(self, name: str, k: int, addr: str) -> str:
        return f"const {ctype(self.g.numpy_dtype(-1 - k))} {name} = p{k}[{addr}];"

    def elementwise(self, j: int, idx: tuple[str, ...], scope: Scope) -> str:
        g = self.g
        node = g.nodes[j]
        op = node.op
        vals = self.args(j, idx)
        dts = g.arg_dtypes(j)
        scalars: list[tuple[str, Any]] = []
        if op is EW.where:
            expr = "a ? b : c"
        elif op is EW.clamp:
            expr, scalars = clamp_expr(dts[0], node.params.get("min"), node.params.get("max"))
        elif op is ops.creation.cast:
            expr = cast_expr(dts[0], numpy_dtype(node.dtype))
        else:  # the op's definition in the kernel IR
            expr, _, helpers = op_expr(op, dts)
            if helpers:
                self.helpers[helpers] = None
        decls = [f"const {compute_type(dt)} {nm} = {v};"
                 for nm, dt, v in zip("abc", dts, vals, strict=False)]
        decls += [f"const {t} s{i} = {_literal(t, v)};" for i, (t, v) in enumerate(scalars)]
        out_t = ctype(numpy_dtype(node.dtype))
        name = self.fresh("v")
        scope.lines.append(f"{out_t} {name}; {{ {' '.join(decls)} {name} = ({out_t})({expr}); }}")
        return name

    # -- reductions: the accumulator's spelling ------------------------------------------------

    def declare(self, name: str, dtype: np.dtype[Any], expr: str) -> str:
        return f"const {compute_type(dtype)} {name} = {expr};"

    def converted(self, dtype: np.dtype[Any], expr: str) -> str:
        return f"({ctype(dtype)})({expr})"

    def float_sym(self, value: float, dtype: np.dtype[Any]) -> str:
        return self.sym(value, compute_type(dtype))

    def _spec(self, kind: str, dtype: np.dtype[Any]) -> tuple[str, str, str]:
        t = compute_type(dtype)
        return (t, "0", "") if kind in ARG else _spec(kind, t, dtype.kind == "f")

    def acc_init(self, kind: str, dtype: np.dtype[Any], c: str) -> list[str]:
        acc_t, init, _ = self._spec(kind, dtype)
        kahan = " " + f"{acc_t} m{c} = 0;" if _kahan(kind, dtype) else ""
        return [f"{acc_t} r{c} = {init};{kahan}" + (f" long i{c} = -1;" if kind in ARG else "")]

    def acc_update(self, kind: str, dtype: np.dtype[Any], c: str, v: str, k: str
                   ) -> list[str]:
        acc_t, _, comb = self._spec(kind, dtype)
        acc = f"r{c}"
        if kind in ARG:
            t = compute_type(dtype)
            helper = _arg_helper(t, dtype.kind == "f", kind == "argmax")
            self.helpers[helper.replace("arg_first", f"{kind}_{t}")] = None
            return [f"if (!{kind}_{t}({acc}, i{c}, {v}, {k})) {{ {acc} = {v}; i{c} = {k}; }}"]
        if _kahan(kind, dtype):
            return [f"{{ {acc_t} y = {v} - m{c}; {acc_t} s = {acc} + y; "
                    f"m{c} = isinf(s) ? 0 : (s - {acc}) - y; {acc} = s; }}"]
        return [f"{acc} = {_combine(comb, acc, v)};"]

    def reduce_loop(self, k: str, total: str, tree: bool, depth: int, body: list[str]
                    ) -> list[str]:
        return _for(k, total, tree, body)

    def acc_tree(self, kind: str, dtype: np.dtype[Any], c: str) -> list[str]:
        acc_t, _, comb = self._spec(kind, dtype)
        acc, sh = f"r{c}", f"sh{c}"
        self.decls.append(f"__local {acc_t} {sh}[{LANES}];")
        lines = [f"{sh}[lid] = {acc};"]
        if kind in ARG:
            t = compute_type(dtype)
            self.decls.append(f"__local long shi{c}[{LANES}];")
            lines.append(f"shi{c}[lid] = i{c};")
            merge = (f"if (!{kind}_{t}({sh}[lid], shi{c}[lid], {sh}[lid + s], "
                     f"shi{c}[lid + s])) {{ {sh}[lid] = {sh}[lid + s]; "
                     f"shi{c}[lid] = shi{c}[lid + s]; }}")
        else:
            merge = f"{sh}[lid] = {_combine(comb, f'{sh}[lid]', f'{sh}[lid + s]')};"
        return lines + self.tree_steps(
            "barrier(CLK_LOCAL_MEM_FENCE);", f"for (int s = {LANES // 2}; s > 0; s >>= 1) {{",
            merge, f"{acc} = {sh}[0];" + (f" i{c} = shi{c}[0];" if kind in ARG else ""))

    # -- the kernel ----------------------------------------------------------------------------

    def build(self) -> str:
        g = self.g
        lanes = self.lanes > 1
        lid = "const int lid = get_local_id(0);" if lanes else ""
        pos = self.sym(math.prod(self.outer))
        head = [f"const long gid = {'get_group_id(0)' if lanes else 'get_global_id(0)'};", lid]
        if not lanes:
            head.append(f"if (gid >= {pos}) return;")
        self.store_targets(head, "gid")
        out_params = [f"__global {ctype(g.numpy_dtype(t))}* out{i}"
                      for i, t in enumerate(self.targets)]
        in_params = []
        for k, axes in sorted(self.inputs.items()):
            in_params += [f"__global const {ctype(g.numpy_dtype(-1 - k))}* p{k}", f"long po{k}"]
            in_params += [f"long pq{k}_{d}" for d in axes]
        body = "\n    ".join([*self.decls, *head, *self.top.lines])
        return (f"#pragma OPENCL FP_CONTRACT OFF\n{''.join(self.helpers)}\n"
                f"__kernel void fused({', '.join(out_params + in_params + self.params)})\n"
                f"{{\n    {body}\n}}\n")

    def store_line(self, out: int, addr: str, t: int, value: str) -> str:
        return f"out{out}[{addr}] = {value};"


def _for(k: str, total: str, lanes: bool, body: list[str]) -> list[str]:
    """A loop of ``k`` over ``[0, total)``; split over the lanes with a trip count every lane
    shares (PoCL vectorises a work-group's lanes only through uniform loops)."""
    if not lanes:
        return [f"for (long {k} = 0; {k} < {total}; {k}++) {{",
                *("    " + line for line in body), "}"]
    return [f"for (long {k}b = 0; {k}b < {total}; {k}b += {LANES}) {{",
            f"    const long {k} = {k}b + lid;", f"    if ({k} < {total}) {{",
            *("        " + line for line in body), "    }", "}"]


def _kahan(kind: str, dtype: np.dtype[Any]) -> bool:
    """Whether a ``kind`` reduction of ``dtype`` sums with Kahan's compensation."""
    return kind in ("sum", "mean") and dtype.kind == "f"


def _combine(comb: str, acc: str, v: str) -> str:
    return re.sub(r"\b(acc|v)\b", lambda mt: acc if mt.group(1) == "acc" else v, comb)
