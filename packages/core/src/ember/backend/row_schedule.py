"""The one scheduling loop of row programs (`ember.backend.rows`); a language spells it.

A row program's reductions are put in *stages*: a reduction whose prologue reads the result
of another runs in a later stage (softmax: the maximum, then the sum of ``exp(x - max)``;
layer_norm: the mean, then the sum of squares about it).  Each stage is one pass over the row
in which all its reductions accumulate; a last pass computes and stores the elem outputs; the
row outputs are stored after it.  Row-level values (what is the same along the row) are
emitted once per row, before the first pass that reads them; elem values once per pass.  When
the whole row is one block (``one``: Triton's rows that fit in registers) the passes share one
scope, so every input is loaded once.

`RowRenderer.body` is that loop.  A language subclasses `RowRenderer` and gives only its
spelling, in the manner of tinygrad's ``code_for_op``: ``CODE`` (a format string per
primitive), constants, casts, loads and stores of each layout, a pass's loop, and each
reduction's accumulator (`acc_init`, `acc_update`, `acc_final`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np

from . import ir
from .ir import Value, schedule
from .rows import RowProgram

__all__ = ["RowRenderer", "stages"]


def stages(p: RowProgram) -> list[list[Value]]:
    """The program's reductions by stage: each reads only reductions of earlier stages."""
    depth: dict[int, int] = {}
    for v in p.nodes():  # sources first
        d = max((depth.get(id(s), 0) for s in v.src), default=0)
        depth[id(v)] = d + 1 if v.op == "reduce" else d
    out: list[list[Value]] = []
    for v in p.reductions():
        k = depth[id(v)] - 1
        while len(out) <= k:
            out.append([])
        out[k].append(v)
    return out


def _update_key(kind: str) -> str:
    if kind in ("sum", "prod"):
        return kind
    return "extreme" if kind in ("max", "min") else "arg"


class RowRenderer:
    """Renders the body of one row (or block of rows) of program ``p`` (see the module
    docstring); ``one``: the row is a single block, no pass loops."""

    #: a format string per primitive over its sources' spellings (``"({0} + {1})"``)
    CODE: ClassVar[dict[str, str]]
    #: an accumulator's declaration, over ``{acc}``, ``{type}`` and ``{init}``
    ACC_DECL: ClassVar[str]
    #: an arg-reduction's index ``{acc}i``, declared from 0
    INDEX_DECL: ClassVar[str]
    #: a reduction's update lines over ``{acc}``, ``{v}`` (the value) and ``{cmp}`` (``>``
    #: for max and argmax, ``<`` for min and argmin), keyed ``sum``, ``prod``, ``extreme``
    #: (max, min) and ``arg`` (argmax, argmin); a kind whose key is missing is refused
    ACC_UPDATE: ClassVar[dict[str, tuple[str, ...]]]
    #: the indentation of one block level
    INDENT: ClassVar[str] = "    "

    def __init__(self, p: RowProgram, one: bool = False) -> None:
        self.p = p
        self.one = one
        self.lines: list[str] = []
        self.depth = 0
        self.row_names: dict[int, str] = {}
        #: row values computed from constants only (plain scalars, never broadcast)
        self.scalars: set[str] = set()
        self.elem_names: dict[int, str] = {}
        self.count = 0

    # -- the language's spelling ---------------------------------------------------------------

    def const(self, v: Value) -> str:
        raise NotImplementedError

    def cast(self, v: Value, src: str) -> str:
        raise NotImplementedError

    def load(self, index: int, layout: str, dtype: str) -> str:
        """An input's value: in a pass for elem and col inputs, per row for row inputs."""
        raise NotImplementedError

    def column(self) -> str:
        raise NotImplementedError

    def rowlen(self) -> str:
        raise NotImplementedError

    def broadcast(self, name: str) -> str:
        """A row value read inside a pass."""
        return name

    def open_pass(self) -> list[str]:
        """A pass over the row: its header, then the first lines of its body (one level
        deeper)."""
        raise NotImplementedError

    def close_pass(self) -> list[str]:
        """What ends a pass (after its body; a closing brace in C-like languages)."""
        return []

    def type_name(self, dtype: str) -> str:
        """The language's name of ``dtype`` (an accumulator's type)."""
        raise NotImplementedError

    def literal(self, value: int, dtype: str) -> str:
        """The integer ``value`` as a constant of ``dtype``."""
        return str(value)

    def infinity(self, dtype: str, negative: bool) -> str:
        """Infinity (or minus infinity) as a constant of the float ``dtype``."""
        raise NotImplementedError

    def extreme(self, dtype: str, top: bool) -> str:
        """Where a max (``top``) or min of ``dtype`` values starts: the lowest (highest)
        value of the type."""
        if ir.is_float(dtype):
            return self.infinity(dtype, top)
        if dtype == "bool":
            return self.literal(0 if top else 1, dtype)
        info = np.iinfo(dtype)
        return self.literal(int(info.min if top else info.max), dtype)

    def acc_init(self, r: Value, acc: str) -> list[str]:
        """Declare the accumulator ``acc`` of reduction ``r`` (and ``{acc}i``, an
        arg-reduction's index), from `ACC_DECL` and `INDEX_DECL`."""
        kind, dt = r.arg, r.src[0].dtype
        if _update_key(kind) not in self.ACC_UPDATE:
            raise NotImplementedError(f"{self.p.name}: {kind} in a {type(self).__name__} kernel")
        if kind in ("sum", "prod"):
            init = self.literal(0 if kind == "sum" else 1, dt)
        else:
            init = self.extreme(dt, kind in ("max", "argmax"))
        lines = [self.ACC_DECL.format(acc=acc, type=self.type_name(dt), init=init)]
        if kind.startswith("arg"):
            lines.append(self.INDEX_DECL.format(acc=acc))
        return lines

    def acc_update(self, r: Value, acc: str, value: str) -> list[str]:
        """Fold ``value`` into ``acc`` (`ACC_UPDATE`): max and min keep the first nan, the
        arg-reductions the first extreme (a nan beats any number)."""
        cmp = ">" if r.arg in ("max", "argmax") else "<"
        return [line.format(acc=acc, v=value, cmp=cmp)
                for line in self.ACC_UPDATE[_update_key(r.arg)]]

    def acc_final(self, r: Value, acc: str, out: str) -> list[str]:
        raise NotImplementedError

    def store(self, k: int, layout: str, value: Value, spelled: str) -> list[str]:
        raise NotImplementedError

    def assign(self, name: str, expr: str, v: Value) -> str:
        """A statement naming ``expr``, the spelling of ``v``."""
        return f"{name} = {expr}"

    def spell(self, v: Value, args: list[str]) -> str:
        """Primitive ``v`` over its sources' spellings ``args``."""
        if v.op == "cast":
            return self.cast(v, args[0])
        return self.CODE[v.op].format(*args)

    # -- the loop ----------------------------------------------------------------------------

    def emit(self, *lines: str) -> None:
        self.lines.extend(self.INDENT * self.depth + s for s in lines)

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def _row_value(self, v: Value) -> str:
        """Emit row-level ``v`` (and its row-level sources) in the row scope."""
        got = self.row_names.get(id(v))
        if got is not None:
            return got
        for u in schedule(v, lambda u: id(u) in self.row_names):
            if id(u) in self.row_names:
                continue
            if u.op == "reduce":
                raise RuntimeError(f"{self.p.name}: reduction read before its stage")
            if u.op == "const":
                self.row_names[id(u)] = self.const(u)
                continue
            name = self._statement(u, self.row_names, "r", "row", "rowlen", self.rowlen)
            if u.src and all(s.op == "const" or self.row_names[id(s)] in self.scalars
                             for s in u.src):
                self.scalars.add(name)
        return self.row_names[id(v)]

    def _prepare_rows(self, roots: list[Value]) -> None:
        """Emit the row-level values the pass computing ``roots`` reads, before the pass."""
        seen: set[int] = set()
        stack = list(roots)
        while stack:
            v = stack.pop()
            if id(v) in seen or id(v) in self.row_names:
                continue
            seen.add(id(v))
            if self.p.level(v) == "row":
                self._row_value(v)
            else:
                stack.extend(v.src)

    def _elem_value(self, v: Value) -> str:
        """Emit elem-level ``v`` in the current pass."""
        got = self.elem_names.get(id(v))
        if got is not None:
            return got
        level = self.p.level
        for u in schedule(v, lambda u: id(u) in self.elem_names or level(u) == "row"):
            if id(u) in self.elem_names:
                continue
            if self.p.level(u) == "row":
                name = self.row_names[id(u)]
                plain = u.op == "const" or name in self.scalars
                self.elem_names[id(u)] = name if plain else self.broadcast(name)
                continue
            self._statement(u, self.elem_names, "e", None, "col", self.column)
        return self.elem_names[id(v)]

    def _statement(self, u: Value, names: dict[int, str], stem: str, layout: str | None,
                   leaf: str, leaf_expr: Callable[[], str]) -> str:
        """Emit ``u`` as a statement naming it (in ``names``): an input loaded in ``layout``
        (None: its own),
        the level's ``leaf`` primitive (``rowlen``, ``col``) as ``leaf_expr()``, any other
        primitive spelled over its sources' names."""
        if u.op == "input":
            expr = self.load(u.arg, layout or self.p.layouts[u.arg], self.p.dtypes[u.arg])
        elif u.op == leaf:
            expr = leaf_expr()
        else:
            expr = self.spell(u, [names[id(s)] for s in u.src])
        name = self.fresh(stem)
        self.emit(self.assign(name, expr, u))
        names[id(u)] = name
        return name

    def _open(self) -> None:
        if not self.one:
            head, *start = self.open_pass()
            self.emit(head)
            self.depth += 1
            self.emit(*start)
            self.elem_names = {}

    def _close(self) -> None:
        if not self.one:
            self.depth -= 1
            self.emit(*self.close_pass())

    def body(self) -> list[str]:
        """The lines computing and storing every output of one row (block)."""
        for stage in stages(self.p):
            self._prepare_rows([r.src[0] for r in stage])
            accs = [self.fresh("acc") for _ in stage]
            for r, acc in zip(stage, accs, strict=True):
                self.emit(*self.acc_init(r, acc))
            self._open()
            for r, acc in zip(stage, accs, strict=True):
                self.emit(*self.acc_update(r, acc, self._elem_value(r.src[0])))
            self._close()
            for r, acc in zip(stage, accs, strict=True):
                out = self.fresh("r")
                self.emit(*self.acc_final(r, acc, out))
                self.row_names[id(r)] = out
        outs = list(enumerate(self.p.outputs))
        elems = [(k, v) for k, (v, _) in outs if self.p.level(v) == "elem"]
        rows = [(k, v) for k, (v, _) in outs if self.p.level(v) == "row"]
        if elems:
            self._prepare_rows([v for _, v in elems])
            self._open()
            for k, v in elems:
                self.emit(*self.store(k, "elem", v, self._elem_value(v)))
            self._close()
        for k, v in rows:
            self.emit(*self.store(k, "row", v, self._row_value(v)))
        return self.lines
