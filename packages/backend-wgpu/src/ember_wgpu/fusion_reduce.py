"""Fused groups with reductions: one WGSL kernel per group (its reductions over axis 0 aside).

The generated kernel gives each *outer position* (the leading axes that every needed node
shares and no needed reduction reduces: a row of a softmax) an invocation, or a work-group of
`GROUP` lanes when the position has much work.  Everything else is a loop inside it:

- an elementwise node is its kernel-IR definition rendered to WGSL (`render`, as the eager
  kernels render it), over the values of its arguments in registers;
- a reduction is a loop over its reduced elements that recomputes its elementwise prologue; at
  the outer level of a work-group kernel the lanes split that loop and combine in a
  workgroup-memory tree with the reduction's IR combine op (`reduction.COMBINE`), the
  eager reduction's scheme;
- values are emitted once per loop scope and index, hoisted to the outermost scope whose loop
  variables they use (a row softmax: the max, then the sum of ``exp(x - max)`` at the outer
  level, then one loop storing ``exp(x - max) / sum``), and only the group's outputs are
  stored.

Many short rows get an invocation each on CPU adapters (lavapipe), as the eager reductions
do, and a work-group each on GPUs.  Reductions over axis 0 (the group's ``cross`` nodes) get
a kernel of their own whose outer positions are their results.  Sizes, strides and offsets
are parameter words, so one pipeline serves every layout of a group.  A group of few, very
long rows around one reduction takes two passes (`_split`), as the eager reduction does: one
work-group per row would leave a GPU idle; with more reductions it runs op by op.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember.backend import FusedGroup, GroupNode, dtype_of_numpy, ir

from .reduction import (
    COMBINE,
    FLAT_OUTPUTS,
    FLAT_ROW,
    SPLIT_MIN,
    SPLIT_OUTPUTS,
    _combine_fn,
    _identity,
)
from .render import const, render
from .runtime import GROUP, Runtime, WGArray
from .strided import is_float, load, scalar_words, store, wgsl_compute, wgsl_storage

__all__ = ["RowKernel", "compile_rows"]

#: a node's IR over its arguments (`fusion._node_body`), None for an op with no IR
NodeBody = Callable[["FusedGroup", int], "ir.Value | None"]
#: positions with fewer elements of work than this get one invocation, not a work-group
TREE_MIN = 64
ARG = ("argmax", "argmin")


class _Scope:
    __slots__ = ("lines", "memo")

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.memo: dict[tuple[int, tuple[str, ...]], str] = {}


class _Refused(Exception):
    """A node the generator does not cover (the group then runs op by op)."""


class RowSource:
    """Writes one kernel computing ``targets`` over the outer space ``outer`` (see the module
    docstring).  Parameter words: the number of positions, then each input's offset and the
    strides of its axes longer than 1 (`in_words`), then the sizes the source needs
    (``sym``)."""

    def __init__(self, g: FusedGroup, targets: Sequence[int], outer: tuple[int, ...],
                 lanes: bool, node_body: NodeBody, chunk: int = 0, parts: int = 1) -> None:
        self.g = g
        self.targets = list(targets)
        self.outer = outer
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
        self.helpers: dict[str, None] = {}
        self.decls: list[str] = []
        self.depth: dict[str, int] = {}
        self.top = _Scope()
        self.chain = [self.top]
        self.count = 0

    # -- names ---------------------------------------------------------------------------------

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def sym(self, value: Any, dtype: str = "int32") -> str:
        """A parameter word carrying ``value`` (so sizes never enter the source)."""
        at = self.sym_at + len(self.syms)
        self.syms += scalar_words(dtype, value) if dtype == "float32" else [int(value)]
        return f"bitcast<f32>(P[{at}])" if dtype == "float32" else f"P[{at}]"

    # -- values --------------------------------------------------------------------------------

    def value(self, r: int, idx: Sequence[str]) -> str:
        """A WGSL name holding ref ``r`` at index ``idx`` (emitted once per scope and index)."""
        shape = self.g.shape(r)
        key_idx = tuple("0" if n == 1 else v for n, v in zip(shape, idx, strict=True))
        depth = max((self.depth[v] for v in key_idx if v != "0"), default=0)
        scope = self.chain[depth]
        name = scope.memo.get((r, key_idx))
        if name is not None:
            return name
        if r < 0:
            name = self.load(-1 - r, key_idx, scope)
        elif self.g.nodes[r].kind == "reduction":
            name = self.reduce(r, key_idx, depth)
        else:
            name = self.elementwise(r, key_idx, scope)
        scope.memo[(r, key_idx)] = name
        return name

    def load(self, k: int, idx: tuple[str, ...], scope: _Scope) -> str:
        shape = self.g.inputs[k][0]
        self.loaded.add(k)
        at = self.in_at[k]
        words = [d for d, n in enumerate(shape) if n != 1]
        addr = " + ".join([f"P[{at}]"] + [f"{v} * P[{at + 1 + words.index(d)}]"
                                          for d, v in enumerate(idx) if v != "0"])
        name = self.fresh("x")
        scope.lines.append(f"let {name} = {load(self.g.numpy_dtype(-1 - k), f'in{k}[{addr}]')};")
        return name

    def elementwise(self, j: int, idx: tuple[str, ...], scope: _Scope) -> str:
        g = self.g
        node = g.nodes[j]
        body = self.node_body(g, j)
        if body is None:
            raise _Refused(node.op.name)
        vals = [self.value(r, idx[len(idx) - len(g.shape(r)):]) for r in node.args]
        name = self.fresh("v")
        r = render(body, vals, prefix=f"{name}_")
        scope.lines += r.lines
        scope.lines.append(f"let {name} = {_rounded(node.dtype.name, r.expr)};")
        return name

    # -- reductions ----------------------------------------------------------------------------

    def reduce(self, j: int, idx: tuple[str, ...], depth: int) -> str:
        g = self.g
        node = g.nodes[j]
        kind = node.op.name
        a = node.args[0]
        ashape = g.shape(a)
        dims = g.reduced_dims(j)
        kept = [d for d in range(len(ashape)) if d not in dims]
        if node.params.get("keepdim"):
            aidx: dict[int, str] = {d: idx[d] for d in kept}
        else:
            aidx = dict(zip(kept, idx, strict=True))
        # ``count``: a second pass's mean divides by the elements of the first's rows
        n = node.params.get("count", math.prod(ashape[d] for d in dims))
        out = node.dtype.name
        if kind == "var":
            mean = self.loop(kind="mean", a=a, aidx=aidx, dims=dims, depth=depth,
                             scale=1.0 / n if n else math.nan, out=g.numpy_dtype(a).name)
            div = n - node.params.get("correction", 1)
            return self.loop(kind="sum", a=a, aidx=aidx, dims=dims, depth=depth,
                             scale=1.0 / div if div > 0 else math.inf, out=out, center=mean)
        return self.loop(kind=kind, a=a, aidx=aidx, dims=dims, depth=depth,
                         scale=1.0 / n if n else math.nan, out=out)

    def loop(self, *, kind: str, a: int, aidx: dict[int, str], dims: tuple[int, ...],
             depth: int, scale: float, out: str, center: str | None = None) -> str:
        """Emit a loop reducing ref ``a`` over ``dims`` at the kept index ``aidx``; with
        ``center``, of ``(a - center)^2`` scaled by ``scale`` (var's second pass)."""
        g = self.g
        ashape = g.shape(a)
        adt = g.numpy_dtype(a)
        arg = kind in ARG
        ct = "bool" if kind in ("any", "all") else wgsl_compute(adt)
        tree = self.lanes and depth == 0
        scope = self.chain[depth]
        c = self.fresh("")
        acc, k = f"r{c}", f"k{c}"
        if arg:
            self.helpers[_first_fn(kind, adt, ct)] = None
            comb = ""
        else:
            comb = f"comb_{kind}_{adt.name}"
            self.helpers[_combine_fn(kind, adt).replace("fn comb(", f"fn {comb}(")] = None
        # the loop body sees the scopes up to `depth` and its own
        saved = self.chain
        self.chain = [*saved[:depth + 1], _Scope()]
        body = self.chain[-1]
        self.depth[k] = depth + 1
        full = dict(aidx)
        red = [d for d in dims if ashape[d] != 1]
        rest = k
        for pos, d in enumerate(reversed(red)):
            var = f"j{c}_{d}"
            self.depth[var] = depth + 1
            if pos == len(red) - 1:
                body.lines.append(f"let {var} = {rest};")
            else:
                ext = self.sym(ashape[d])
                body.lines.append(f"let {var} = {rest} % {ext};")
                rest = f"({rest} / {ext})"
            full[d] = var
        for d in dims:
            full.setdefault(d, "0")
        v = self.value(a, tuple(full[d] for d in range(len(ashape))))
        if center is not None:
            body.lines.append(f"let w{c} = ({v} - {center}) * ({v} - {center});")
            v = f"w{c}"
        if kind in ("any", "all") and adt != np.dtype(np.bool_):
            v = f"(!({v} == {const(0, ir.compute_dtype(adt.name))}))"  # nan counts as true
        if arg:
            body.lines.append(f"if (!first_{kind}({acc}, i{c}, {v}, i64({k}))) "
                              f"{{ {acc} = {v}; i{c} = i64({k}); }}")
        else:
            body.lines.append(f"{acc} = {comb}({acc}, {v});")
        self.chain = saved
        total = self.sym(math.prod(ashape[d] for d in dims))
        lines = scope.lines
        if arg:
            zero = "false" if ct == "bool" else const(0, ir.compute_dtype(adt.name))
            lines.append(f"var {acc}: {ct} = {zero}; var i{c}: i64 = -1li;")
        else:
            lines.append(f"var {acc}: {ct} = {_identity(kind, adt)};")
        if self.chunk and depth == 0:
            size = self.sym(self.chunk)
            lines.extend(_for(k, total, tree, body.lines, (f"part * {size}", size)))
        else:
            lines.extend(_for(k, total, tree, body.lines))
        if tree:
            sh = f"sh{c}"
            self.decls.append(f"var<workgroup> {sh}: array<{ct}, {GROUP}>;")
            lines.append(f"{sh}[lid] = {acc};")
            if arg:
                self.decls.append(f"var<workgroup> shi{c}: array<i64, {GROUP}>;")
                lines.append(f"shi{c}[lid] = i{c};")
                merge = (f"if (!first_{kind}({sh}[lid], shi{c}[lid], {sh}[lid + s], "
                         f"shi{c}[lid + s])) {{ {sh}[lid] = {sh}[lid + s]; "
                         f"shi{c}[lid] = shi{c}[lid + s]; }}")
            else:
                merge = f"{sh}[lid] = {comb}({sh}[lid], {sh}[lid + s]);"
            lines += ["workgroupBarrier();",
                      f"for (var s = {GROUP // 2}u; s > 0u; s = s >> 1u) {{",
                      f"    if (lid < s) {{ {merge} }}",
                      "    workgroupBarrier();", "}",
                      f"{acc} = {sh}[0];" + (f" i{c} = shi{c}[0];" if arg else "")]
        res = f"res{c}"
        if arg:
            lines.append(f"let {res} = i{c};")
        elif self.chunk and depth == 0:
            lines.append(f"let {res} = {acc};")  # a partial: scaled and rounded by pass two
        elif kind == "mean" or center is not None:
            scaled = f"({acc} * {self.sym(scale, 'float32')})"
            lines.append(f"let {res} = {_rounded(out, scaled)};")
        else:
            lines.append(f"let {res} = {_rounded(out, acc)};")
        return res

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
        live = [d for d, n in enumerate(self.outer) if n != 1]
        for i, d in enumerate(reversed(live)):
            self.depth[f"o{d}"] = 0
            if i == len(live) - 1:
                head.append(f"let o{d} = {rest};")
            else:
                ext = self.sym(self.outer[d])
                head.append(f"let o{d} = {rest} % {ext};")
                rest = f"({rest} / {ext})"
        m = len(self.outer)
        by_inner: dict[tuple[tuple[int, ...], tuple[int, ...]], list[int]] = {}
        for t in self.targets:
            s = g.shape(t)
            guard = tuple(d for d in range(m) if s[d] == 1 and self.outer[d] != 1)
            by_inner.setdefault((s[m:], guard), []).append(t)
        outs = {t: i for i, t in enumerate(self.targets)}
        for (inner, guard), ts in by_inner.items():
            self.store(ts, inner, guard, outs)
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
            entry = ["fn main(@builtin(workgroup_id) wg: vec3<u32>, "
                     "@builtin(local_invocation_index) lid: u32, "
                     "@builtin(num_workgroups) nwg: vec3<u32>) {"]
        else:
            entry = ["fn main(@builtin(global_invocation_id) gv: vec3<u32>, "
                     "@builtin(num_workgroups) nwg: vec3<u32>) {"]
        body = "\n".join("    " + line for line in [*head, *self.top.lines])
        return "\n".join([*enable, *binds, *self.decls, *self.helpers,
                          f"@compute @workgroup_size({GROUP})", *entry, body, "}"]) + "\n"

    def store(self, targets: list[int], inner: tuple[int, ...], guard: tuple[int, ...],
              outs: dict[int, int]) -> None:
        cond = [f"o{d} == 0" for d in guard] + (["live"] if self.lanes else [])
        live = [d for d, n in enumerate(inner) if n != 1]
        if not live:
            if self.lanes:
                cond.append("lid == 0u")
            for t in targets:
                self.store_one(t, ("0",) * len(inner), outs, self.top, cond)
            return
        loop = _Scope()
        self.chain = [self.top, loop]
        k = self.fresh("t")
        self.depth[k] = 1
        inner_idx = ["0"] * len(inner)
        rest = k
        for i, d in enumerate(reversed(live)):
            var = f"{k}_{d}"
            self.depth[var] = 1
            if i == len(live) - 1:
                loop.lines.append(f"let {var} = {rest};")
            else:
                ext = self.sym(inner[d])
                loop.lines.append(f"let {var} = {rest} % {ext};")
                rest = f"({rest} / {ext})"
            inner_idx[d] = var
        for t in targets:
            self.store_one(t, tuple(inner_idx), outs, loop, [])
        self.chain = [self.top]
        total = self.sym(math.prod(inner))
        lines = _for(k, total, self.lanes, loop.lines)
        if cond:
            lines = [f"if ({' && '.join(cond)}) {{", *("    " + line for line in lines), "}"]
        self.top.lines.extend(lines)

    def store_one(self, t: int, inner_idx: tuple[str, ...], outs: dict[int, int],
                  scope: _Scope, cond: list[str]) -> None:
        s = self.g.shape(t)
        m = len(self.outer)
        idx = tuple("0" if s[d] == 1 else f"o{d}" for d in range(m)) + inner_idx
        v = self.value(t, idx)
        if self.chunk:  # the partial of (row, part), at the position
            line = f"out{outs[t]}[gid] = {store(self.g.numpy_dtype(t), v)};"
            scope.lines.append(f"if ({' && '.join(cond)}) {{ {line} }}" if cond else line)
            return
        strides = _dense(s)
        addr = " + ".join(["0"] + [f"{x} * {self.sym(strides[d])}" for d, x in enumerate(idx)
                                   if x != "0"])
        line = f"out{outs[t]}[{addr}] = {store(self.g.numpy_dtype(t), v)};"
        scope.lines.append(f"if ({' && '.join(cond)}) {{ {line} }}" if cond else line)


def _dense(shape: Sequence[int]) -> list[int]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= max(n, 1)
    return out[::-1]


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


def _for(k: str, total: str, lanes: bool, body: list[str],
         part: tuple[str, str] | None = None) -> list[str]:
    """A loop of ``k`` over ``[0, total)`` (with ``part = (start, length)``, over that part
    of it), split over the lanes of a work-group kernel."""
    start, step = ("i32(lid)", GROUP) if lanes else ("0", 1)
    end = total
    if part is not None:
        start = f"{part[0]} + {start}"
        end = f"min({total}, {part[0]} + {part[1]})"
    return [f"for (var {k} = {start}; {k} < {end}; {k} = {k} + {step}) {{",
            *("    " + line for line in body), "}"]


# -- planning and running ----------------------------------------------------------------------

def _ancestors(g: FusedGroup, targets: Sequence[int]) -> set[int]:
    seen: set[int] = set()
    stack = list(targets)
    while stack:
        j = stack.pop()
        if j not in seen:
            seen.add(j)
            stack.extend(a for a in g.nodes[j].args if a >= 0)
    return seen


def _plan(g: FusedGroup, targets: Sequence[int]) -> tuple[tuple[int, ...], int]:
    """The outer space of the kernel computing ``targets`` and the elements of work of each
    position: outer axes are leading axes no needed reduction reduces and every needed node
    shares."""
    need = _ancestors(g, targets)
    shapes = [g.nodes[j].shape for j in need]
    m = min(len(s) for s in shapes)
    work = 0
    for j in need:
        if g.nodes[j].kind == "reduction":
            dims = g.reduced_dims(j)
            if dims:
                m = min(m, min(dims))
            work = max(work, g.reduced_count(j))
    outer: list[int] = []
    for d in range(m):
        ext = {s[d] for s in shapes} - {1}
        if len(ext) > 1:
            break
        outer.append(ext.pop() if ext else 1)
    work = max(work, max(math.prod(g.shape(t)[len(outer):]) for t in targets))
    return tuple(outer), work


class _Launch:
    """One generated kernel: the nodes it stores, the inputs it binds, its fixed words."""

    def __init__(self, g: FusedGroup, targets: Sequence[int], outer: tuple[int, ...],
                 lanes: bool, node_body: NodeBody, chunk: int = 0, parts: int = 1) -> None:
        src = RowSource(g, targets, outer, lanes, node_body, chunk, parts)
        self.source = src.build()
        self.targets = list(targets)
        self.outs = [(g.shape(t), g.numpy_dtype(t)) for t in targets]
        if chunk:  # one partial per (position, part)
            self.outs = [((math.prod(outer) * parts,), g.numpy_dtype(t)) for t in targets]
        self.inputs = sorted(src.loaded)
        self.in_axes = [(k, src.in_at[k], [d for d, n in enumerate(g.inputs[k][0]) if n != 1])
                        for k in sorted(g.used_inputs)]
        self.words_at = src.sym_at
        self.syms = src.syms
        self.npos = math.prod(outer) * parts
        self.lanes = lanes

    def run(self, rt: Runtime, xs: Sequence[WGArray], vals: dict[int, WGArray]) -> None:
        outs = [rt.empty(s, d) for s, d in self.outs]
        vals.update(zip(self.targets, outs, strict=True))
        if self.npos == 0 or any(math.prod(s) == 0 for s, _ in self.outs):
            return
        words = [self.npos]
        for k, _, axes in self.in_axes:
            x = xs[k]
            words += [x.offset, *(x.strides[d] for d in axes)]
        words += self.syms
        reads = [xs[k] for k in self.inputs]
        if self.lanes:
            gx, gy = self.npos, 1
            if gx > rt.max_groups:
                gy = -(-gx // rt.max_groups)
                gx = -(-gx // gy)
            rt.record(self.source, reads, outs, words, (gx, gy, 1))
        else:
            rt.dispatch(self.source, reads, outs, words, self.npos)


class _SplitLaunch:
    """A group around one reduction of few, long rows, in two passes: each (row, chunk) a
    work-group reducing its chunk with the prologue in registers to a partial, then each row
    a work-group combining its partials and computing the epilogue (`_split`)."""

    def __init__(self, first: _Launch, second: _Launch, shape: tuple[int, ...], parts: int,
                 names: dict[int, int]) -> None:
        self.first, self.second = first, second
        self.shape, self.parts, self.names = shape, parts, names
        self.source = first.source + "\n" + second.source

    def run(self, rt: Runtime, xs: Sequence[WGArray], vals: dict[int, WGArray]) -> None:
        got: dict[int, WGArray] = {}
        self.first.run(rt, xs, got)
        (partial,) = got.values()
        shape = (*self.shape, self.parts)
        rows: dict[int, WGArray] = {}
        self.second.run(rt, [*xs, partial.view(shape, tuple(_dense(shape)), 0)], rows)
        vals.update((self.names[j], v) for j, v in rows.items())


def _node(n: GroupNode, args: tuple[int, ...], **change: Any) -> GroupNode:
    params = change.pop("params", n.params)
    key = tuple(sorted(params.items())) if params is not n.params else n.params_key
    return GroupNode(change.get("op", n.op), params, key, change.get("dtype", n.dtype),
                     change.get("shape", n.shape), args)


def _split(g: FusedGroup, targets: Sequence[int], node_body: NodeBody) -> _SplitLaunch | None:
    """The two passes of a launch whose one reduction has few long rows, or None where the
    launch is no elementwise prologue, one reduction and an epilogue over its result."""
    need = _ancestors(g, targets)
    reds = [j for j in need if g.nodes[j].kind == "reduction"]
    if len(reds) != 1 or g.nodes[reds[0]].op.name not in COMBINE:
        return None
    jr = reds[0]
    node = g.nodes[jr]
    pro = sorted(_ancestors(g, [jr]) - {jr})
    epi = sorted(need - set(pro) - {jr})
    if any(t in pro for t in targets) or any(
            g.nodes[j].shape != node.shape or any(a in pro for a in g.nodes[j].args)
            for j in epi):
        return None
    count = g.reduced_count(jr)
    chunk = max(GROUP * 16, -(-count // 256))
    parts = -(-count // chunk)
    adt = g.numpy_dtype(node.args[0])
    pdt = np.dtype(np.bool_) if node.op.name in ("any", "all") else (
        np.dtype(np.float32) if adt.name in ("float16", "bfloat16") else adt)
    # pass one: the prologue and the reduction, stored as partials in its compute dtype
    order = {j: i for i, j in enumerate([*pro, jr])}
    n1 = [_node(g.nodes[j], tuple(order.get(a, a) for a in g.nodes[j].args)) for j in pro]
    n1.append(_node(node, tuple(order.get(a, a) for a in node.args),
                    dtype=dtype_of_numpy(pdt)))
    g1 = FusedGroup(tuple(n1), g.inputs, (len(n1) - 1,), "whole", 0, frozenset())
    # pass two: the partials (a last input) reduced over their last axis, then the epilogue
    k = len(g.inputs)
    params: dict[str, Any] = {"dims": (len(node.shape),), "keepdim": False}
    if node.op.name == "mean":
        params["count"] = count
    order = {j: i for i, j in enumerate([jr, *epi])}
    n2 = [_node(node, (-1 - k,), params=params)]
    n2 += [_node(g.nodes[j], tuple(order.get(a, a) for a in g.nodes[j].args)) for j in epi]
    g2 = FusedGroup(tuple(n2), (*g.inputs, ((*node.shape, parts), dtype_of_numpy(pdt))),
                    tuple(order[t] for t in targets), "whole", 0, frozenset())
    try:
        first = _Launch(g1, [len(n1) - 1], node.shape, True, node_body, chunk, parts)
        second = _Launch(g2, list(g2.outputs), node.shape, parts >= TREE_MIN, node_body)
    except _Refused:
        return None
    return _SplitLaunch(first, second, node.shape, parts, {i: j for j, i in order.items()})


class RowKernel:
    """A compiled group with reductions: the main kernel, one kernel per output reduction over
    axis 0.  ``source`` is the generated WGSL."""

    def __init__(self, g: FusedGroup, rt: Runtime,
                 launches: list[_Launch | _SplitLaunch]) -> None:
        self.rt = rt
        self.outputs = g.outputs
        self.launches = launches
        self.source = "\n".join(launch.source for launch in launches)

    def __call__(self, xs: Sequence[Any]) -> list[Any]:
        vals: dict[int, WGArray] = {}
        for launch in self.launches:
            launch.run(self.rt, xs, vals)
        return [vals[i] for i in self.outputs]


def _covered(g: FusedGroup) -> bool:
    """Whether every reduction of ``g`` is one this generator writes, on the dtypes its eager
    kernel takes (a result in the argument's dtype; bools for any/all; int64 indices)."""
    for j, node in enumerate(g.nodes):
        if node.kind == "matmul":
            return False
        if node.kind != "reduction":
            continue
        kind = node.op.name
        adt = g.numpy_dtype(node.args[0])
        if kind not in COMBINE and kind not in ARG and kind != "var":
            return False
        if kind in ("mean", "var") and not is_float(adt):
            return False
        want = {"any": "bool", "all": "bool", "argmax": "int64", "argmin": "int64"}.get(
            kind, adt.name)
        if node.dtype.name != want or (kind in ARG and len(g.reduced_dims(j)) == 0):
            return False
    return True


def compile_rows(g: FusedGroup, rt: Runtime, node_body: NodeBody) -> RowKernel | None:
    """The kernel of a group with reductions (no matmul), or None where it runs op by op."""
    if not _covered(g):
        return None
    launches: list[_Launch | _SplitLaunch] = []
    software = rt.adapter.info["adapter_type"] == "CPU"
    main = [j for j in g.outputs if j not in g.cross]
    plans: list[tuple[list[int], tuple[int, ...], int]] = []
    if main:
        outer, work = _plan(g, main)
        plans.append((main, outer, work))
    for c in sorted(g.cross):
        if c in g.outputs:
            shape = g.nodes[c].shape
            plans.append(([c], shape, g.reduced_count(c)))
    for targets, outer, work in plans:
        npos = math.prod(outer)
        if npos == 0 and any(math.prod(g.shape(t)) for t in targets):
            return None  # no position to compute them from (an empty axis broadcast away)
        if npos < SPLIT_OUTPUTS and work >= SPLIT_MIN:
            # few long rows: each row split over work-groups, as the eager kernels do
            split = _split(g, targets, node_body)
            if split is None:
                return None
            launches.append(split)
            continue
        # many short rows: one invocation each on a CPU adapter (lavapipe: a barrier costs
        # more than the loads it saves, as for the eager reductions); a GPU keeps the lanes,
        # whose loads of a row are adjacent
        flat = software and npos >= FLAT_OUTPUTS and work <= FLAT_ROW
        lanes = work >= TREE_MIN and not flat
        try:
            launches.append(_Launch(g, targets, outer, lanes, node_body))
        except _Refused:
            return None
    return RowKernel(g, rt, launches)
