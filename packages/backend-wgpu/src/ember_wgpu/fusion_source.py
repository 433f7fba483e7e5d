"""The WGSL renderer of fused groups with reductions (`fusion_reduce.py` plans and runs them):
one kernel from a group's nodes.

`RowSource` gives each outer position an invocation (or a work-group of lanes) and
writes every node it needs as WGSL: an elementwise node is its kernel-IR definition rendered
in registers, a reduction a loop recomputing its prologue (a workgroup-memory tree across the
lanes at the outer level), and only the targets are stored.  Values are emitted once per loop
scope and index, hoisted to the outermost scope whose loop variables they use.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember.backend import FusedGroup, ir
from ember.backend.schedule import RowSchedule, Scope
from ember.backend.strided import contiguous_strides

from .reduction import _combine_fn, _identity
from .render import const, render
from .runtime import GROUP
from .strided import (
    load,
    scalar_words,
    shared_get,
    shared_put,
    shared_type,
    store,
    wgsl_compute,
    wgsl_storage,
)

__all__ = ["ARG", "NodeBody", "Refused", "RowSource", "dense"]

#: a node's IR over its arguments (`fusion._node_body`), None for an op with no IR
NodeBody = Callable[["FusedGroup", int], "ir.Value | None"]
ARG = ("argmax", "argmin")


class Refused(Exception):
    """A node the generator does not cover (the group then runs op by op)."""


class RowSource(RowSchedule):
    """Writes one kernel computing ``targets`` over the outer space ``outer`` in WGSL;
    `RowSchedule` schedules it (see the module docstring).  Parameter words: the number of
    positions, then each input's offset and the strides of its axes longer than 1
    (`in_words`), then the sizes the source needs (``sym``)."""

    def __init__(self, g: FusedGroup, targets: Sequence[int], outer: tuple[int, ...],
                 lanes: bool, node_body: NodeBody, chunk: int = 0, parts: int = 1,
                 subgroups: bool = False, width: int = GROUP) -> None:
        super().__init__(g, targets, outer)
        #: the lanes of a position's work-group (with ``lanes``; `reduction.lanes_for`)
        self.width = width if lanes else GROUP
        #: whether the trees may start with subgroup shuffles (the device offers them)
        self.subgroups = subgroups
        self.uses_subgroups = False
        self.lanes = lanes
        self.node_body = node_body
        #: with a chunk, each position is (outer position, part): the reductions at the outer
        #: level combine elements ``[part * chunk, (part + 1) * chunk)`` only, and the one
        #: target (the reduction) is stored unscaled at the position (a first pass)
        self.chunk = chunk
        self.parts = parts
        self.in_at: dict[int, int] = {}
        at = 1
        for k in sorted(g.used_inputs):
            self.in_at[k] = at
            at += 1 + sum(1 for n in g.inputs[k][0] if n != 1)
        self.sym_at = at
        self.syms: list[int] = []
        self.loaded: set[int] = set()

    # -- spelling ------------------------------------------------------------------------------

    DECL = "let {var} = {value};"
    LANE_ZERO = "lid == 0u"

    def sym(self, value: Any, dtype: str = "int32") -> str:
        """A parameter word carrying ``value`` (so sizes never enter the source)."""
        at = self.sym_at + len(self.syms)
        self.syms += scalar_words(dtype, value) if dtype == "float32" else [int(value)]
        return f"bitcast<f32>(P[{at}])" if dtype == "float32" else f"P[{at}]"

    def work_group(self) -> bool:
        return self.lanes

    def for_loop(self, k: str, total: str, body: list[str]) -> list[str]:
        return _for(k, total, self.width if self.lanes else 0, body)

    def store_guard(self) -> list[str]:
        return ["live"] if self.lanes else []

    # -- values --------------------------------------------------------------------------------

    def input_address(self, k: int, axes: list[int]) -> tuple[str, list[str]]:
        self.loaded.add(k)
        at = self.in_at[k]
        return f"P[{at}]", [f"P[{at + 1 + i}]" for i in range(len(axes))]

    def load_line(self, name: str, k: int, addr: str) -> str:
        return f"let {name} = {load(self.g.numpy_dtype(-1 - k), f'in{k}[{addr}]')};"

    def elementwise(self, j: int, idx: tuple[str, ...], scope: Scope) -> str:
        g = self.g
        node = g.nodes[j]
        body = self.node_body(g, j)
        if body is None:
            raise Refused(node.op.name)
        vals = self.args(j, idx)
        name = self.fresh("v")
        r = render(body, vals, prefix=f"{name}_")
        scope.lines += r.lines
        scope.lines.append(f"let {name} = {_rounded(node.dtype.name, r.expr)};")
        return name

    # -- reductions: the accumulator's spelling ------------------------------------------------

    def declare(self, name: str, dtype: np.dtype[Any], expr: str) -> str:
        return f"let {name} = {expr};"

    def converted(self, dtype: np.dtype[Any], expr: str) -> str:
        return _rounded(dtype.name, expr)

    def float_sym(self, value: float, dtype: np.dtype[Any]) -> str:
        return self.sym(value, "float32")

    def partial(self, depth: int) -> bool:
        return bool(self.chunk) and depth == 0

    def _ct(self, kind: str, dtype: np.dtype[Any]) -> str:
        return "bool" if kind in ("any", "all") else wgsl_compute(dtype)

    def _comb(self, kind: str, dtype: np.dtype[Any]) -> str:
        """The name of ``kind``'s combining function on ``dtype`` (its helper added)."""
        comb = f"comb_{kind}_{dtype.name}"
        self.helpers[_combine_fn(kind, dtype).replace("fn comb(", f"fn {comb}(")] = None
        return comb

    def acc_init(self, kind: str, dtype: np.dtype[Any], c: str) -> list[str]:
        ct = self._ct(kind, dtype)
        if kind in ARG:
            zero = "false" if ct == "bool" else const(0, ir.compute_dtype(dtype.name))
            return [f"var r{c}: {ct} = {zero}; var i{c}: i64 = -1li;"]
        return [f"var r{c}: {ct} = {_identity(kind, dtype)};"]

    def acc_update(self, kind: str, dtype: np.dtype[Any], c: str, v: str, k: str
                   ) -> list[str]:
        acc = f"r{c}"
        if kind in ("any", "all") and dtype != np.dtype(np.bool_):
            v = f"(!({v} == {const(0, ir.compute_dtype(dtype.name))}))"  # nan counts as true
        if kind in ARG:
            self.helpers[_first_fn(kind, dtype, self._ct(kind, dtype))] = None
            return [f"if (!first_{kind}({acc}, i{c}, {v}, i64({k}))) "
                    f"{{ {acc} = {v}; i{c} = i64({k}); }}"]
        return [f"{acc} = {self._comb(kind, dtype)}({acc}, {v});"]

    def reduce_loop(self, k: str, total: str, tree: bool, depth: int, body: list[str]
                    ) -> list[str]:
        lanes = self.width if tree else 0
        if self.chunk and depth == 0:
            size = self.sym(self.chunk)
            return _for(k, total, lanes, body, (f"part * {size}", size))
        return _for(k, total, lanes, body)

    def acc_tree(self, kind: str, dtype: np.dtype[Any], c: str) -> list[str]:
        ct = self._ct(kind, dtype)
        arg = kind in ARG
        acc, sh = f"r{c}", f"sh{c}"
        comb = "" if arg else self._comb(kind, dtype)
        self.decls.append(f"var<workgroup> {sh}: array<{shared_type(ct)}, {self.width}>;")
        get = [shared_get(ct, f"{sh}[{i}]") for i in ("lid", "lid + s", "0")]
        if arg:
            self.decls.append(f"var<workgroup> shi{c}: array<i64, {self.width}>;")
            merge = (f"if (!first_{kind}({get[0]}, shi{c}[lid], {get[1]}, "
                     f"shi{c}[lid + s])) {{ {sh}[lid] = {sh}[lid + s]; "
                     f"shi{c}[lid] = shi{c}[lid + s]; }}")
        else:
            merge = f"{sh}[lid] = {shared_put(ct, f'{comb}({get[0]}, {get[1]})')};"
        tree_lines = self.tree_steps(
            "workgroupBarrier();", f"for (var s = {self.width // 2}u; s > 0u; s = s >> 1u) {{",
            merge, f"{acc} = {get[2]};" + (f" i{c} = shi{c}[0];" if arg else ""))
        if self.subgroups and not arg and ct in ("f32", "i32", "u32"):
            # each subgroup combines its lanes by shuffles, one barrier, then every lane
            # combines the subgroups' results: one barrier instead of seven (for
            # subgroups no larger than the work-group; else the tree)
            self.uses_subgroups = True
            return [f"if (sgn <= {self.width}u) {{",
                    f"    for (var s = sgn / 2u; s > 0u; s = s >> 1u) {{ "
                    f"{acc} = {comb}({acc}, subgroupShuffleXor({acc}, s)); }}",
                    f"    if (sgl == 0u) {{ {sh}[lid / sgn] = {acc}; }}",
                    "    workgroupBarrier();",
                    f"    {acc} = {sh}[0];",
                    f"    for (var s = 1u; s < {self.width}u / sgn; s = s + 1u) {{ "
                    f"{acc} = {comb}({acc}, {sh}[s]); }}",
                    "} else {",
                    f"    {sh}[lid] = {acc};",
                    *("    " + line for line in tree_lines), "}"]
        lines = [f"{sh}[lid] = {shared_put(ct, acc)};"]
        if arg:
            lines.append(f"shi{c}[lid] = i{c};")
        return lines + tree_lines

    # -- the kernel ----------------------------------------------------------------------------

    def build(self) -> str:
        g = self.g
        if self.lanes:
            head = ["let gi = i32(wg.x + wg.y * nwg.x);", "let live = gi < P[0];",
                    "let gid = select(0, gi, live);"]
        else:
            head = [f"let gid = i32(gv.x + gv.y * nwg.x * {GROUP}u);",
                    "if (gid >= P[0]) { return; }"]
        rest = "gid"
        if self.chunk:
            parts = self.sym(self.parts)
            head += [f"let part = gid % {parts};", f"let row = gid / {parts};"]
            rest = "row"
        self.store_targets(head, rest)
        n_in = len(self.loaded)
        binds: list[str] = []
        storage: list[str] = []
        for b, k in enumerate(sorted(self.loaded)):
            st = wgsl_storage(g.numpy_dtype(-1 - k))
            storage.append(st)
            binds.append(f"@group(0) @binding({b}) var<storage, read> in{k}: array<{st}>;")
        for i, j in enumerate(self.targets):
            st = wgsl_storage(g.numpy_dtype(j))
            storage.append(st)
            binds.append(f"@group(0) @binding({n_in + i}) var<storage, read_write> "
                         f"out{i}: array<{st}>;")
        binds.append(f"@group(0) @binding({len(storage)}) var<storage, read> P: array<i32>;")
        enable = ["enable f16;"] if "f16" in storage or any(
            n.dtype.name == "float16" for n in g.nodes) else []
        if self.lanes:
            sub = ("@builtin(subgroup_size) sgn: u32, @builtin(subgroup_invocation_id) sgl: u32, "
                   if self.uses_subgroups else "")
            entry = ["fn main(@builtin(workgroup_id) wg: vec3<u32>, "
                     f"@builtin(local_invocation_index) lid: u32, {sub}"
                     "@builtin(num_workgroups) nwg: vec3<u32>) {"]
        else:
            entry = ["fn main(@builtin(global_invocation_id) gv: vec3<u32>, "
                     "@builtin(num_workgroups) nwg: vec3<u32>) {"]
        body = "\n".join("    " + line for line in [*head, *self.top.lines])
        return "\n".join([*enable, *binds, *self.decls, *self.helpers,
                          f"@compute @workgroup_size({self.width})", *entry, body, "}"]) + "\n"

    def store_address(self, t: int, idx: tuple[str, ...]) -> str:
        return "gid" if self.chunk else super().store_address(t, idx)  # a partial: (row, part)

    def store_line(self, out: int, addr: str, t: int, value: str) -> str:
        return f"out{out}[{addr}] = {store(self.g.numpy_dtype(t), value)};"


def dense(shape: Sequence[int]) -> list[int]:
    """The row-major strides of ``shape``, as a list."""
    return list(contiguous_strides(shape))


def _rounded(dtype: str, value: str) -> str:
    """``value`` rounded as a kernel storing it in ``dtype`` would (16-bit floats)."""
    if dtype == "float16":
        return f"f32(f16({value}))"
    if dtype == "bfloat16":
        return f"bf16_({value})"
    return value


def _first_fn(kind: str, dt: np.dtype[Any], ct: str) -> str:
    """``first_<kind>(a, ia, b, ib)``: whether ``(a, ia)`` wins over ``(b, ib)`` (nan first,
    then the larger / smaller value, then the smaller index; index -1 is "none yet")."""
    better = ">" if kind == "argmax" else "<"
    nan = ("    let an = isnan_(a); let bn = isnan_(b);\n"
           "    if (an || bn) { return select(an, ia <= ib, an && bn); }\n"
           if ct == "f32" else "")
    return (f"fn first_{kind}(a: {ct}, ia: i64, b: {ct}, ib: i64) -> bool {{\n"
            "    if (ib < 0li) { return true; }\n"
            "    if (ia < 0li) { return false; }\n"
            f"{nan}    if (a {better} b) {{ return true; }}\n"
            "    if (a == b) { return ia <= ib; }\n"
            "    return false;\n}\n")


def _for(k: str, total: str, lanes: int, body: list[str],
         part: tuple[str, str] | None = None) -> list[str]:
    """A loop of ``k`` over ``[0, total)`` (with ``part = (start, length)``, over that part
    of it), split over the ``lanes`` of a work-group kernel (0: an invocation's alone)."""
    start, step = ("i32(lid)", lanes) if lanes else ("0", 1)
    end = total
    if part is not None:
        start = f"{part[0]} + {start}"
        end = f"min({total}, {part[0]} + {part[1]})"
    return [f"for (var {k} = {start}; {k} < {end}; {k} = {k} + {step}) {{",
            *("    " + line for line in body), "}"]
