"""The ``block`` and ``loop`` kernel shapes of the Triton fusion compiler (see ``_fusion_source``).

A `BlockGen` writes one kernel for a group whose values fit a block of rows (``block``), or
whose rows are long and rank 2 (``loop``).  Values are N-D blocks whose axis 0 is the row
axis; a value of lower rank than its consumer gets new axes right after axis 0 (ember's
right-aligned broadcasting).  In ``whole`` mode every shape gets a leading row axis of size 1.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from ember import ops
from ember.backend import numpy_dtype

from ._fusion_source import (
    Functions,
    acc_dtype,
    axis_index,
    conv_load,
    conv_store,
    expand,
    identity,
    pad,
    reduce_code,
    tl_name,
)

__all__ = ["BlockGen", "node_expression"]

EW = ops.elementwise


def node_expression(node: Any, arg_dtypes: list[np.dtype[Any]]) -> Any:
    """The `Expression` the unfused backend runs for an elementwise node."""
    from . import elementwise as ew

    op, name = node.op, node.op.name
    if op is ops.creation.cast:
        return ew.cast_expression(numpy_dtype(node.params["dtype"]))
    if op is EW.where:
        return ew.where_expression(arg_dtypes[1])
    if op is EW.clamp:
        lo, hi = node.params.get("min"), node.params.get("max")
        if lo is None and hi is None:
            return ew.Expression("r = x0", arg_dtypes[0])
        return ew.clamp_expression(arg_dtypes[0], lo, hi)
    return ew.op_expression(name, tuple(arg_dtypes))  # the op's definition in the kernel IR


class BlockGen:
    """Writes the source of one group's kernel; ``loop`` selects the long-row shape.

    Parameters
    ----------
    group : the `FusedGroup`.
    limit : most elements of one value's block in a program.
    interpret : whether kernels run under the interpreter (bigger blocks).
    """

    def __init__(self, group: Any, limit: int, interpret: bool, loop: bool = False) -> None:
        self.g = group
        self.whole = group.mode == "whole"
        self.n_rows = 1 if self.whole else group.rows
        self.loop = loop
        self.interpret = interpret
        self.fns = Functions()
        self.lines: list[str] = []
        self.indent = "    "
        self.tag = ""
        self.loaded: dict[tuple[Any, ...], str] = {}
        self.scalars: list[tuple[Any, np.dtype[Any]]] = []
        self.pads: dict[int, int] = {}
        self.head = group.head
        self.outputs = group.slots
        self.cross = sorted(group.cross)
        inner = max([self._inner(self.cshape(j)) for j in range(len(group.nodes))
                     if j not in group.cross] + [1])
        self.used = group.used_inputs
        for k, (s, _) in enumerate(group.inputs):
            if k in self.used:
                inner = max(inner, self._inner(self.in_shape(k, len(s) + self.whole)))
        if self.head:
            nn = group.nodes[0].shape[1]
            self.pads[nn] = max(16, pad(nn))
            inner = max(inner, self.pads[nn])
        self.inner = inner
        self.fits = inner <= limit
        if loop:
            bm = 1 if interpret else max(1, min(pad(self.n_rows), 4))
            self.bk = min(pad(self.row_len()), limit // bm)
        else:
            bm = max(1, min(pad(self.n_rows), limit // max(inner, 1)))
            if self.head:
                bm = max(16, min(bm, 64 if interpret else 32))
        self.bm = bm
        self.programs = -(-self.n_rows // bm)

    # -- shapes --------------------------------------------------------------------------------

    def pad(self, e: int) -> int:
        return self.pads.get(e) or pad(e)

    def _inner(self, cs: tuple[int, ...]) -> int:
        return math.prod(self.pad(e) if e > 1 else 1 for e in cs[1:])

    def cshape(self, j: int) -> tuple[int, ...]:
        s = self.g.nodes[j].shape
        return (1, *s) if self.whole else s

    def in_shape(self, k: int, rank: int) -> tuple[int, ...]:
        """Input ``k`` as seen by a consumer of rank ``rank`` (row axis first)."""
        s: tuple[int, ...] = self.g.inputs[k][0]
        if self.whole or len(s) != rank or not s:
            s = (1, *s)
        return s[:1] + (1,) * (rank - len(s)) + s[1:]

    def shape_of(self, a: int, rank: int) -> tuple[int, ...]:
        if a >= 0:
            cs = self.cshape(a)
            return cs[:1] + (1,) * (rank - len(cs)) + cs[1:]
        return self.in_shape(-1 - a, rank)

    def row_len(self) -> int:
        return max(cs[1] for cs in [self.cshape(j) for j in range(len(self.g.nodes))]
                   + [self.in_shape(k, 2) for k in sorted(self.used)] if len(cs) > 1)

    def dims(self, cs: tuple[int, ...]) -> list[str]:
        """Block dims of a value of shape ``cs``."""
        out = [("BM" if cs[0] > 1 else "1")]
        for e in cs[1:]:
            if e <= 1:
                out.append("1")
            elif self.loop:
                out.append("BK")
            else:
                out.append(str(self.pad(e)))
        return out

    def index(self, e: int) -> tuple[str, str | None]:
        """The index variable of an inner axis of extent ``e`` and its bound check."""
        if self.loop:
            # the loop runs to the longest row: a shorter one is masked even where BK divides it
            whole = e == self.row_len() and e % self.bk == 0
            return "kk", (None if whole else f"kk < {e}")
        p = self.pad(e)
        return f"ar{p}", (None if p == e else f"ar{p} < {e}")

    def mask(self, cs: tuple[int, ...]) -> str | None:
        rank = len(cs)
        terms = []
        if cs[0] > 1 and self.n_rows % self.bm:
            terms.append(axis_index(f"(rows < {self.n_rows})", 0, rank))
        for a, e in enumerate(cs[1:], 1):
            if e > 1:
                _, check = self.index(e)
                if check is not None:
                    terms.append(axis_index(f"({check})", a, rank))
        return " & ".join(terms) if terms else None

    def offsets(self, cs: tuple[int, ...], strides: list[str]) -> str:
        rank = len(cs)
        terms = []
        if cs[0] > 1:
            terms.append(f"{axis_index('rows', 0, rank)} * {strides[0]}")
        for a, e in enumerate(cs[1:], 1):
            if e > 1:
                var, _ = self.index(e)
                terms.append(f"{axis_index(var, a, rank)} * {strides[a]}")
        if not terms:
            return f"tl.zeros([{', '.join(['1'] * rank)}], tl.int64)"
        return " + ".join(terms)

    # -- values --------------------------------------------------------------------------------

    def emit(self, line: str) -> None:
        self.lines.append(self.indent + line)

    def raw(self, a: int, rank: int) -> str:
        """The stored value of ``a`` (node or input) as a block of rank ``rank``."""
        if a >= 0:
            cs = self.cshape(a)
            return expand(f"v{a}{self.var_tag(a)}", len(cs), rank)
        k = -1 - a
        key = (k, rank, self.tag if self.column_dependent(self.in_shape(k, rank)) else "")
        var = self.loaded.get(key)
        if var is None:
            var = self.loaded[key] = f"x{k}_{rank}{key[2]}"
            cs = self.in_shape(k, rank)
            s = self.g.inputs[k][0]
            src = [f"st{k}_{d - (rank - len(s))}" if d >= rank - len(s) else "0"
                   for d in range(rank)]
            if self.whole or len(s) != rank or not s:  # the row axis is not the input's
                src = ["0", *src[1:]]
            m = self.mask(cs)
            mk = f", mask={m}" if m else ""
            line = f"{var} = tl.load(in{k} + {self.offsets(cs, src)}{mk})"
            if self.loop and self.column_dependent(cs):
                self.emit(line)
            else:
                self.pre.append("    " + line)
        return var

    def column_dependent(self, cs: tuple[int, ...]) -> bool:
        return self.loop and any(e > 1 for e in cs[1:])

    def var_tag(self, j: int) -> str:
        return self.tag if self.column_dependent(self.cshape(j)) else ""

    def elementwise(self, j: int) -> None:
        n = self.g.nodes[j]
        rank = len(self.cshape(j))
        dts = self.g.arg_dtypes(j)
        e = node_expression(n, dts)
        args = [conv_load(self.raw(a, rank), d, e.widen) for a, d in zip(n.args, dts, strict=True)]
        for value, dt in e.scalars:
            i = len(self.scalars)
            self.scalars.append((value, dt))
            self.pre.append(f"    c{i} = {conv_load(f'tl.load(sc{i})', dt, e.widen)}")
            args.append(f"c{i}")
        fn = self.fns.get(e.body, len(n.args), len(e.scalars))
        self.emit(f"v{j}{self.var_tag(j)} = {conv_store(fn + '(' + ', '.join(args) + ')', e.out)}")

    def matmul_head(self) -> None:
        n = self.g.nodes[0]
        ka, kb = (-1 - a for a in n.args)
        (_, k), (_, nn) = self.g.inputs[ka][0], self.g.inputs[kb][0]
        dt = numpy_dtype(n.dtype)
        dot = dt.name == "float32"
        bk = 16 if not dot and not self.interpret else min(64, max(16, pad(k)))
        pn = self.pad(nn)
        accd = "tl.float32" if dot else "tl.float64"
        self.emit(f"acc0 = tl.zeros([BM, {pn}], {accd})")
        self.emit(f"for k0 in range(0, {k}, {bk}):")
        self.emit(f"    kk = k0 + tl.arange(0, {bk})")
        rmask = f"(rows < {self.n_rows})[:, None] & (kk < {k})[None, :]"
        self.emit(f"    av = tl.load(in{ka} + rows[:, None] * st{ka}_0 + kk[None, :] * st{ka}_1, "
                  f"mask={rmask}, other=0)")
        self.emit(f"    bv = tl.load(in{kb} + kk[:, None] * st{kb}_0 + ar{pn}[None, :] * st{kb}_1, "
                  f"mask=(kk < {k})[:, None] & (ar{pn} < {nn})[None, :], other=0)")
        if dot:
            self.emit("    acc0 = tl.dot(av, bv, acc0, input_precision=PRECISION)")
        else:
            self.emit("    acc0 += tl.sum(av[:, :, None] * bv[None, :, :], axis=1)")
        self.emit(f"v0 = {conv_store('acc0', dt)}")

    def reduce_block(self, j: int) -> None:
        """A reduction over axes of a block (the row axis too for a cross node)."""
        n = self.g.nodes[j]
        a = n.args[0]
        op = n.op.name
        if a >= 0:
            cs = self.cshape(a)
        else:
            cs = self.in_shape(-1 - a, len(self.g.inputs[-1 - a][0]) + self.whole)
        rank = len(cs)
        axes = [d + self.whole for d in n.params["dims"]]
        dt = self.g.numpy_dtype(a)
        acc = acc_dtype(op, dt)
        ta = tl_name(acc)
        raw = self.raw(a, rank)
        m = self.mask(cs)
        x = f"r{j}x"
        self.emit(f"{x} = " + (f"({raw} != 0).to(tl.int32)" if op in ("any", "all")
                               else f"{raw}.to({ta})"))
        count = math.prod(cs[d] for d in axes)
        ones = f"[{', '.join(['1'] * rank)}]"
        if op == "var":
            xm = f"tl.where({m}, {x}, 0.0)" if m else x
            self.emit(f"r{j}m = {reduce_code('sum', xm, axes, ta)} / {count}")
            d = f"tl.where({m}, {x} - r{j}m, 0.0)" if m else f"({x} - r{j}m)"
            self.emit(f"r{j}d = {d}")
            denom = float(max(count - n.params.get("correction", 1), 0))
            self.emit(f"r{j} = {reduce_code('sum', f'r{j}d * r{j}d', axes, ta)} / {denom!r}")
        else:
            xm = f"tl.where({m}, {x}, tl.full({ones}, {identity(op, acc)}, {ta}))" if m else x
            self.emit(f"r{j} = {reduce_code(op, xm, axes, ta)}")
            if op == "mean" and j not in self.g.cross:
                self.emit(f"r{j} = r{j} / {count}")
            if op in ("max", "min") and acc.kind == "f":
                isn = f"(({x} != {x}) & {m})" if m else f"({x} != {x})"
                self.emit(f"r{j}n = {reduce_code('max', f'{isn}.to(tl.int32)', axes, 'tl.int32')}")
                self.emit(f"r{j} = tl.where(r{j}n != 0, float('nan'), r{j})")
            if op in ("any", "all") and j not in self.g.cross:
                self.emit(f"r{j} = r{j} != 0")
        if j in self.g.cross:
            return self.store_cross(j, cs, axes, op)
        res = f"r{j}"
        if not n.params.get("keepdim"):
            keep = [dim for i, dim in enumerate(self.dims(cs)) if i not in axes]
            res = f"tl.reshape({res}, [{', '.join(keep)}])"
        self.emit(f"v{j}{self.var_tag(j)} = {conv_store(res, numpy_dtype(n.dtype))}")

    def store_cross(self, j: int, cs: tuple[int, ...], axes: list[int], op: str) -> None:
        kept = [a for a in range(len(cs)) if a not in axes]
        q = math.prod(cs[a] for a in kept)
        strides = ["0"] * len(cs)
        acc = 1
        for a in reversed(kept):
            strides[a] = str(acc)
            acc *= cs[a]
        kcs = tuple(1 if a in axes else e for a, e in enumerate(cs))
        off = self.offsets(kcs, strides)
        m = self.mask(kcs)
        mk = f", mask={m}" if m else ""
        n = self.g.nodes[j]
        if self.programs == 1:
            count = math.prod(cs[d] for d in axes)
            val = f"r{j} / {count}" if op == "mean" else f"r{j}"
            if op in ("any", "all"):
                val = f"r{j} != 0"
            self.emit(f"tl.store(out{self.outputs[j]} + {off}, "
                      f"{conv_store(val, numpy_dtype(n.dtype))}{mk})")
        else:
            self.emit(f"tl.store(part{j} + tl.program_id(0).to(tl.int64) * {q} + {off}, "
                      f"r{j}{mk})")

    def store(self, j: int) -> None:
        cs = self.cshape(j)
        shape = self.g.nodes[j].shape
        strides = []
        acc = 1
        for e in reversed(shape):
            strides.append(str(acc))
            acc *= e
        strides = strides[::-1]
        if self.whole:
            strides = ["0", *strides]
        m = self.mask(cs)
        mk = f", mask={m}" if m else ""
        self.emit(f"tl.store(out{self.outputs[j]} + {self.offsets(cs, strides)}, "
                  f"v{j}{self.var_tag(j)}{mk})")

    # -- the kernel ------------------------------------------------------------------------------

    def source(self) -> str:
        g = self.g
        self.pre: list[str] = []
        if self.loop:
            body = self._loop_body()
        else:
            for j, n in enumerate(g.nodes):
                if j == 0 and self.head:
                    self.matmul_head()
                elif n.kind == "reduction":
                    self.reduce_block(j)
                else:
                    self.elementwise(j)
                if j in self.outputs and j not in g.cross:
                    self.store(j)
            body = self.lines
        params = [f"out{m}" for m in range(len(g.outputs))]
        if self.programs > 1:
            params += [f"part{j}" for j in self.cross]
        params += [f"in{k}" for k in range(len(g.inputs))]
        params += [f"sc{i}" for i in range(len(self.scalars))]
        params += [f"st{k}_{d}" for k, (s, _) in enumerate(g.inputs) for d in range(len(s))]
        params += ["BM: tl.constexpr", "PRECISION: tl.constexpr"]
        if self.loop:
            params.append("BK: tl.constexpr")
        head = ["@triton.jit", f"def fused({', '.join(params)}):",
                "    rows = tl.program_id(0).to(tl.int64) * BM + tl.arange(0, BM)"]
        pads = sorted({self.pad(e) for j in range(len(g.nodes)) if j not in g.cross
                       for e in self.cshape(j)[1:] if e > 1}
                      | {self.pad(e) for k, (s, _) in enumerate(g.inputs) if k in self.used
                         for e in self.in_shape(k, len(s) + self.whole)[1:] if e > 1})
        if not self.loop:
            head += [f"    ar{p} = tl.arange(0, {p}).to(tl.int64)" for p in pads]
        return self.fns.source() + "\n".join(head + self.pre + body) + "\n"

    # -- long rows -------------------------------------------------------------------------------

    def _loop_body(self) -> list[str]:
        """Rank-2 groups: a loop over the row per level of reductions."""
        g = self.g
        nodes = g.nodes
        level: list[int] = []
        full = [self.column_dependent(self.cshape(j)) for j in range(len(nodes))]
        for n in nodes:
            lv = max([level[a] for a in n.args if a >= 0] + [0])
            level.append(lv + 1 if n.kind == "reduction" else lv)
        loops = max([level[j] + 1 for j in range(len(nodes)) if full[j] and j in self.outputs]
                    + [level[j] for j in range(len(nodes)) if nodes[j].kind == "reduction"] + [0])
        done: set[int] = set()
        out: list[str] = []
        for lp in range(loops + 1):
            # values per row available before loop ``lp``
            for j, n in enumerate(nodes):
                if j not in done and not full[j] and n.kind != "reduction" and level[j] <= lp:
                    self.indent = "    "
                    self.elementwise(j)
                    done.add(j)
                    if j in self.outputs:
                        self.store(j)
            out += self.lines
            self.lines = []
            if lp == loops:
                break
            reds = [j for j, n in enumerate(nodes) if n.kind == "reduction" and level[j] == lp + 1]
            want = set(reds) | {j for j in range(len(nodes))
                                if full[j] and j in self.outputs and level[j] == lp}
            need: set[int] = set()
            stack = list(want)
            while stack:
                j = stack.pop()
                for a in nodes[j].args:
                    if a >= 0 and full[a] and a not in need:
                        need.add(a)
                        stack.append(a)
            for j in reds:
                op = nodes[j].op.name
                accd = acc_dtype(op, self.g.numpy_dtype(nodes[j].args[0]))
                out.append(f"    a{j} = tl.full([BM, 1], {identity(op, accd)}, {tl_name(accd)})")
                if op in ("max", "min"):
                    out.append(f"    a{j}n = tl.zeros([BM, 1], tl.int32)")
            self.tag = f"_{lp}"
            self.indent = "        "
            out.append(f"    for k0 in range(0, {self.row_len()}, BK):")
            out.append("        kk = k0 + tl.arange(0, BK).to(tl.int64)")
            for j in sorted(need | want):
                if nodes[j].kind == "reduction":
                    self._accumulate(j)
                else:
                    self.elementwise(j)
                    if j in self.outputs and level[j] == lp:
                        self.store(j)
            out += self.lines
            self.lines = []
            self.indent = "    "
            for j in reds:
                self._finish(j)
                done.add(j)
                if j in self.outputs:
                    self.store(j)
            out += self.lines
            self.lines = []
        return out

    def _accumulate(self, j: int) -> None:
        n = self.g.nodes[j]
        a = n.args[0]
        op = n.op.name
        dt = self.g.numpy_dtype(a)
        accd = acc_dtype(op, dt)
        ta = tl_name(accd)
        cs = self.shape_of(a, 2)
        raw = self.raw(a, 2)
        m = self.mask(cs)
        x = f"({raw} != 0).to(tl.int32)" if op in ("any", "all") else f"{raw}.to({ta})"
        self.emit(f"r{j}x = {x}")
        self.emit(f"r{j}x = tl.where({m}, r{j}x, tl.full([1, 1], {identity(op, accd)}, {ta}))"
                  if m else f"r{j}x = r{j}x + tl.zeros([BM, BK], {ta})")
        c = reduce_code(op, f"r{j}x", [1], ta)
        if op in ("sum", "mean"):
            self.emit(f"a{j} = (a{j} + {c}).to({ta})")
        elif op == "prod":
            self.emit(f"a{j} = (a{j} * {c}).to({ta})")
        elif op in ("max", "any"):
            self.emit(f"r{j}c = {c}")
            self.emit(f"a{j} = tl.where(r{j}c > a{j}, r{j}c, a{j})")
        else:
            self.emit(f"r{j}c = {c}")
            self.emit(f"a{j} = tl.where(r{j}c < a{j}, r{j}c, a{j})")
        if op in ("max", "min") and accd.kind == "f":
            isn = f"((r{j}x != r{j}x) & {m})" if m else f"(r{j}x != r{j}x)"
            flag = reduce_code("max", f"{isn}.to(tl.int32)", [1], "tl.int32")
            self.emit(f"a{j}n = a{j}n | {flag}")

    def _finish(self, j: int) -> None:
        n = self.g.nodes[j]
        op = n.op.name
        cs = self.shape_of(n.args[0], 2)
        res = f"a{j}"
        if op == "mean":
            res = f"a{j} / {cs[1]}"
        if op in ("max", "min") and acc_dtype(op, self.g.numpy_dtype(n.args[0])).kind == "f":
            res = f"tl.where(a{j}n != 0, float('nan'), a{j})"
        if op in ("any", "all"):
            res = f"a{j} != 0"
        if not n.params.get("keepdim"):
            res = f"tl.reshape({res}, [BM])"
        self.emit(f"v{j} = {conv_store(res, numpy_dtype(n.dtype))}")
