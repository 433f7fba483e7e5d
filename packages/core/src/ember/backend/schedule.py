"""The scheduling loop of a row kernel, shared by the C-like fusion renderers (OpenCL C, WGSL).

A fused group with reductions is rendered as one kernel in which each *outer* position (the
leading axes every target shares) gets an invocation or a work-group.  What is the same in
every language lives here, once: values are emitted once per loop scope and index, hoisted to
the outermost scope whose loop variables they use (`RowSchedule.value`); flat loop counters
are unravelled into per-axis indices with sizes passed as kernel parameters
(`RowSchedule.unravel`); a reduction's loop body sees the scopes up to its depth
(`RowSchedule.loop_value`); and the targets are grouped by inner shape and stored, each group
in one loop (`RowSchedule.store_targets`).

A language subclasses `RowSchedule` and fills in its spelling: `DECL` (how an index is
declared), ``sym`` (a size as a kernel parameter), ``for_loop`` (a loop over ``[0, total)``,
split over the lanes of a work-group kernel), ``load``, ``elementwise``, a reduction's
accumulator (``acc_init``, ``acc_update``, ``acc_tree``: the loop around them is `loop`) and
``store_line``, in the manner of tinygrad's per-language tables over one render loop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .strided import contiguous_strides

if TYPE_CHECKING:
    from .fused import FusedGroup

__all__ = ["RowSchedule", "Scope", "ancestors", "outer_space"]


def ancestors(g: FusedGroup, targets: Sequence[int]) -> set[int]:
    """The nodes ``targets`` need (themselves included), without the group's inputs."""
    seen: set[int] = set()
    stack = list(targets)
    while stack:
        j = stack.pop()
        if j not in seen:
            seen.add(j)
            stack.extend(a for a in g.nodes[j].args if a >= 0)
    return seen


def outer_space(g: FusedGroup, targets: Sequence[int]) -> tuple[tuple[int, ...], int]:
    """The outer space of the kernel computing ``targets`` and the elements of work of each
    position: outer axes are leading axes no needed reduction reduces and every needed node
    shares; the rest are loops."""
    need = ancestors(g, targets)
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


class Scope:
    """One loop scope of a kernel: its lines, and the names of the values emitted in it,
    keyed by ref and index."""

    __slots__ = ("lines", "memo")

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.memo: dict[tuple[int, tuple[str, ...]], str] = {}


class RowSchedule:
    """Writes one kernel computing ``targets`` of the group ``g`` over the outer space
    ``outer`` (see the module docstring); a language's subclass spells it."""

    #: an index's declaration, with ``{var}`` and ``{value}`` (``let {var} = {value};``)
    DECL: ClassVar[str]
    #: the condition that holds for one lane of a work-group only (stores done once)
    LANE_ZERO: ClassVar[str]
    #: emit a value's elementwise ancestors from an explicit stack before it (no deep
    #: recursion on long chains; a load is then emitted where its first user is), rather than
    #: by recursion (each load just before the first value that needs it)
    ANCESTORS_FIRST: ClassVar[bool] = True

    def __init__(self, g: FusedGroup, targets: Sequence[int], outer: tuple[int, ...]) -> None:
        self.g = g
        self.targets = list(targets)
        self.outer = outer
        self.helpers: dict[str, None] = {}
        self.decls: list[str] = []
        self.depth: dict[str, int] = {}
        self.top = Scope()
        self.chain = [self.top]
        self.count = 0

    # -- the language's spelling ---------------------------------------------------------------

    def sym(self, value: Any) -> str:
        """A kernel parameter carrying the size ``value`` (so sizes never enter the source)."""
        raise NotImplementedError

    def work_group(self) -> bool:
        """Whether a position is a work-group of lanes (loops split over them)."""
        raise NotImplementedError

    def for_loop(self, k: str, total: str, body: list[str]) -> list[str]:
        """A loop of ``k`` over ``[0, total)`` running ``body`` (split over the lanes)."""
        raise NotImplementedError

    def store_guard(self) -> list[str]:
        """Conditions every store of the kernel is under (none by default)."""
        return []

    def input_address(self, k: int, axes: list[int]) -> tuple[str, list[str]]:
        """Input ``k``'s offset and the strides of its ``axes`` (those longer than 1), as
        kernel parameters."""
        raise NotImplementedError

    def load_line(self, name: str, k: int, addr: str) -> str:
        """The statement naming ``name`` input ``k``'s element at ``addr``."""
        raise NotImplementedError

    def load(self, k: int, idx: tuple[str, ...], scope: Scope) -> str:
        """Emit the load of input ``k`` at ``idx`` into ``scope``; its name."""
        axes = [d for d, n in enumerate(self.g.inputs[k][0]) if n != 1]
        offset, strides = self.input_address(k, axes)
        addr = " + ".join([offset] + [f"{v} * {strides[axes.index(d)]}"
                                      for d, v in enumerate(idx) if v != "0"])
        name = self.fresh("x")
        scope.lines.append(self.load_line(name, k, addr))
        return name

    def elementwise(self, j: int, idx: tuple[str, ...], scope: Scope) -> str:
        """Emit elementwise node ``j`` at ``idx`` into ``scope`` (its arguments emitted)."""
        raise NotImplementedError

    def declare(self, name: str, dtype: np.dtype[Any], expr: str) -> str:
        """A statement naming ``expr``, a value of ``dtype``."""
        raise NotImplementedError

    def converted(self, dtype: np.dtype[Any], expr: str) -> str:
        """``expr`` (an accumulator's compute type) as a value of ``dtype``."""
        raise NotImplementedError

    def float_sym(self, value: float, dtype: np.dtype[Any]) -> str:
        """A kernel parameter carrying the float ``value`` for arithmetic on ``dtype``."""
        raise NotImplementedError

    def acc_init(self, kind: str, dtype: np.dtype[Any], c: str) -> list[str]:
        """Declare accumulator ``r{c}`` of a ``kind`` reduction of ``dtype`` values (and
        ``i{c}``, an arg-reduction's index, -1 for none yet)."""
        raise NotImplementedError

    def acc_update(self, kind: str, dtype: np.dtype[Any], c: str, v: str, k: str
                   ) -> list[str]:
        """Fold the value ``v`` at counter ``k`` into accumulator ``r{c}``."""
        raise NotImplementedError

    def reduce_loop(self, k: str, total: str, tree: bool, depth: int, body: list[str]
                    ) -> list[str]:
        """A reduction's loop of ``k`` over ``[0, total)`` (split over the lanes with
        ``tree``)."""
        return self.for_loop(k, total, body)

    def acc_tree(self, kind: str, dtype: np.dtype[Any], c: str) -> list[str]:
        """Combine the lanes' accumulators ``r{c}`` (and ``i{c}``) into every lane's."""
        raise NotImplementedError

    def partial(self, depth: int) -> bool:
        """Whether a reduction at ``depth`` stores its accumulator unscaled (a first pass)."""
        return False

    def store_line(self, out: int, addr: str, t: int, value: str) -> str:
        """The store of ``value`` (target ``t``) into output ``out`` at ``addr``."""
        raise NotImplementedError

    def store_address(self, t: int, idx: tuple[str, ...]) -> str:
        """Where target ``t``'s element at ``idx`` is stored."""
        return self.out_address(self.g.shape(t), idx)

    # -- names ---------------------------------------------------------------------------------

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def define(self, var: str, depth: int) -> None:
        """Record that the index ``var`` is a loop variable of scope ``depth``."""
        self.depth[var] = depth

    def unravel(self, rest: str, dims: Sequence[int], sizes: Sequence[int], name: str,
                depth: int, lines: list[str]) -> dict[int, str]:
        """Declare the indices of axes ``dims`` (of extents ``sizes``) that the flat counter
        ``rest`` walks row-major, named ``name.format(d=axis)``, into ``lines``: the
        innermost by ``%``, the outermost by what is left (no division for it)."""
        out: dict[int, str] = {}
        for i, d in enumerate(reversed(dims)):
            var = name.format(d=d)
            self.define(var, depth)
            if i == len(dims) - 1:
                lines.append(self.DECL.format(var=var, value=rest))
            else:
                ext = self.sym(sizes[d])
                lines.append(self.DECL.format(var=var, value=f"{rest} % {ext}"))
                rest = f"({rest} / {ext})"
            out[d] = var
        return out

    # -- values --------------------------------------------------------------------------------

    def place(self, r: int, idx: Sequence[str]) -> tuple[tuple[str, ...], int, Scope]:
        """Ref ``r``'s index with its broadcast axes at 0, and the loop depth and scope a
        value at it belongs to."""
        shape = self.g.shape(r)
        key_idx = tuple("0" if n == 1 else v for n, v in zip(shape, idx, strict=True))
        depth = max((self.depth[v] for v in key_idx if v != "0"), default=0)
        return key_idx, depth, self.chain[depth]

    def value(self, r: int, idx: Sequence[str]) -> str:
        """A name holding ref ``r`` at index ``idx`` (emitted once per scope and index)."""
        key_idx, depth, scope = self.place(r, idx)
        name = scope.memo.get((r, key_idx))
        if name is not None:
            return name
        if self.ANCESTORS_FIRST and r >= 0 and self.g.nodes[r].kind != "reduction":
            self._ancestors_first(r, key_idx)
        return self._emit(r, key_idx, depth, scope)

    def args(self, j: int, idx: tuple[str, ...]) -> list[str]:
        """The names of node ``j``'s arguments at ``idx`` (broadcast from the right)."""
        g = self.g
        return [self.value(r, idx[len(idx) - len(g.shape(r)):]) for r in g.nodes[j].args]

    def _ancestors_first(self, r: int, idx: tuple[str, ...]) -> None:
        """Emit the elementwise nodes ``r`` depends on before it, deepest first, from an
        explicit stack: each then finds its arguments emitted, so a chain of thousands of
        ops does not recurse thousands of calls deep (loads and reductions are left to
        `value`, whose recursion through them is shallow)."""
        g = self.g
        stack = [(r, idx, False)]
        while stack:
            j, jidx, ready = stack.pop()
            key_idx, depth, scope = self.place(j, jidx)
            if (j, key_idx) in scope.memo:
                continue
            if ready:
                self._emit(j, key_idx, depth, scope)
            elif j >= 0 and g.nodes[j].kind != "reduction":
                stack.append((j, key_idx, True))
                stack += [(a, key_idx[len(key_idx) - len(g.shape(a)):], False)
                          for a in reversed(g.nodes[j].args)]

    def _emit(self, r: int, key_idx: tuple[str, ...], depth: int, scope: Scope) -> str:
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

    # -- reductions ----------------------------------------------------------------------------

    def reduction_index(self, j: int, idx: tuple[str, ...]
                        ) -> tuple[int, tuple[int, ...], dict[int, str]]:
        """Reduction ``j``'s argument, its reduced axes, and the index of its kept axes for
        the output index ``idx``."""
        g = self.g
        node = g.nodes[j]
        a = node.args[0]
        dims = g.reduced_dims(j)
        kept = [d for d in range(len(g.shape(a))) if d not in dims]
        if node.params.get("keepdim"):
            aidx: dict[int, str] = {d: idx[d] for d in kept}
        else:
            aidx = dict(zip(kept, idx, strict=True))
        return a, dims, aidx

    def reduce(self, j: int, idx: tuple[str, ...], depth: int) -> str:
        """Emit reduction node ``j`` at the kept index ``idx`` as a loop at ``depth`` (var:
        a mean, then the mean square about it, each one loop)."""
        g = self.g
        node = g.nodes[j]
        kind = node.op.name
        a, dims, aidx = self.reduction_index(j, idx)
        ashape = g.shape(a)
        # ``count``: a second pass's mean divides by the elements of the first's rows
        n = node.params.get("count", math.prod(ashape[d] for d in dims))
        out = g.numpy_dtype(j)
        scale = 1.0 / n if n else math.nan
        if kind == "var":
            mean = self.loop(kind="mean", a=a, aidx=aidx, dims=dims, depth=depth,
                             scale=scale, out=g.numpy_dtype(a))
            div = n - node.params.get("correction", 1)
            return self.loop(kind="mean", a=a, aidx=aidx, dims=dims, depth=depth,
                             scale=1.0 / div if div > 0 else math.inf, out=out, center=mean)
        return self.loop(kind=kind, a=a, aidx=aidx, dims=dims, depth=depth, scale=scale,
                         out=out)

    def loop(self, *, kind: str, a: int, aidx: dict[int, str], dims: tuple[int, ...],
             depth: int, scale: float, out: np.dtype[Any], center: str | None = None) -> str:
        """Emit a loop reducing ref ``a`` over ``dims`` at the kept index ``aidx`` (with
        ``center``, ``(a - center)^2``); a mean's result is scaled by ``scale``.  Its name."""
        g = self.g
        ashape = g.shape(a)
        adt = g.numpy_dtype(a)
        tree = self.work_group() and depth == 0
        scope = self.chain[depth]
        c = self.fresh("")
        k = f"k{c}"
        v, body, saved = self.loop_value(a, aidx, dims, depth, c, k)
        if center is not None:
            body.lines.append(self.declare(f"w{c}", adt, f"({v} - {center}) * ({v} - {center})"))
            v = f"w{c}"
        body.lines += self.acc_update(kind, adt, c, v, k)
        self.chain = saved
        total = self.sym(math.prod(ashape[d] for d in dims))
        lines = scope.lines
        lines += self.acc_init(kind, adt, c)
        lines += self.reduce_loop(k, total, tree, depth, body.lines)
        if tree:
            lines += self.acc_tree(kind, adt, c)
        res, acc = f"res{c}", f"r{c}"
        if kind in ("argmax", "argmin"):
            lines.append(self.declare(res, np.dtype(np.int64), f"i{c}"))
        elif self.partial(depth):
            lines.append(self.declare(res, adt, acc))
        elif kind == "mean":
            scaled = f"({acc} * {self.float_sym(scale, adt)})"
            lines.append(self.declare(res, out, self.converted(out, scaled)))
        else:
            lines.append(self.declare(res, out, self.converted(out, acc)))
        return res

    def tree_steps(self, barrier: str, halving: str, merge: str, last: str) -> list[str]:
        """A work-group's tree: ``halving`` (a loop of ``s`` from half the lanes down to 1)
        in which lanes ``lid < s`` ``merge`` lane ``lid + s`` into theirs, each step ending
        on ``barrier``; then ``last`` (reading lane 0's)."""
        return [barrier, halving, f"    if (lid < s) {{ {merge} }}", f"    {barrier}", "}",
                last]

    def loop_value(self, a: int, aidx: dict[int, str], dims: tuple[int, ...], depth: int,
                   c: str, k: str) -> tuple[str, Scope, list[Scope]]:
        """Open the body of a loop of ``k`` reducing ref ``a`` over ``dims`` at ``depth``:
        the body sees the scopes up to ``depth`` and its own.  Returns the name of ``a``'s
        element in the body, the body, and the chain to restore when the body is done."""
        ashape = self.g.shape(a)
        saved = self.chain
        self.chain = [*saved[:depth + 1], Scope()]
        body = self.chain[-1]
        self.define(k, depth + 1)
        red = [d for d in dims if ashape[d] != 1]
        full = dict(aidx)
        full.update(self.unravel(k, red, ashape, f"j{c}_{{d}}", depth + 1, body.lines))
        for d in dims:
            full.setdefault(d, "0")
        return self.value(a, tuple(full[d] for d in range(len(ashape)))), body, saved

    # -- stores --------------------------------------------------------------------------------

    def store_targets(self, head: list[str], rest: str) -> None:
        """Unravel the outer position ``rest`` into ``o0, o1, ...`` (into ``head``), then
        store the targets, those of one inner shape (and broadcast outer axes) together."""
        live = [d for d, n in enumerate(self.outer) if n != 1]
        self.unravel(rest, live, self.outer, "o{d}", 0, head)
        m = len(self.outer)
        by_inner: dict[tuple[tuple[int, ...], tuple[int, ...]], list[int]] = {}
        for t in self.targets:
            s = self.g.shape(t)
            guard = tuple(d for d in range(m) if s[d] == 1 and self.outer[d] != 1)
            by_inner.setdefault((s[m:], guard), []).append(t)
        outs = {t: i for i, t in enumerate(self.targets)}
        for (inner, guard), ts in by_inner.items():
            self._store(ts, inner, guard, outs)

    def _store(self, targets: list[int], inner: tuple[int, ...], guard: tuple[int, ...],
               outs: dict[int, int]) -> None:
        cond = [f"o{d} == 0" for d in guard] + self.store_guard()
        live = [d for d, n in enumerate(inner) if n != 1]
        if not live:
            if self.work_group():
                cond.append(self.LANE_ZERO)
            for t in targets:
                self.store_one(t, ("0",) * len(inner), outs, self.top, cond)
            return
        loop = Scope()
        self.chain = [self.top, loop]
        k = self.fresh("t")
        self.define(k, 1)
        inner_idx = ["0"] * len(inner)
        for d, var in self.unravel(k, live, inner, f"{k}_{{d}}", 1, loop.lines).items():
            inner_idx[d] = var
        for t in targets:
            self.store_one(t, tuple(inner_idx), outs, loop, [])
        self.chain = [self.top]
        total = self.sym(math.prod(inner))
        lines = self.for_loop(k, total, loop.lines)
        if cond:
            lines = [f"if ({' && '.join(cond)}) {{", *("    " + line for line in lines), "}"]
        self.top.lines.extend(lines)

    def out_address(self, s: tuple[int, ...], idx: tuple[str, ...]) -> str:
        """The offset of ``idx`` in a dense output of shape ``s`` (strides as parameters)."""
        strides = contiguous_strides(s)
        return " + ".join(["0"] + [f"{x} * {self.sym(strides[d])}" for d, x in enumerate(idx)
                                   if x != "0"])

    def store_one(self, t: int, inner_idx: tuple[str, ...], outs: dict[int, int],
                  scope: Scope, cond: list[str]) -> None:
        """Emit the store of target ``t`` at the inner index ``inner_idx`` under ``cond``."""
        idx = self.out_index(t, inner_idx)
        v = self.value(t, idx)
        line = self.store_line(outs[t], self.store_address(t, idx), t, v)
        scope.lines.append(f"if ({' && '.join(cond)}) {{ {line} }}" if cond else line)

    def out_index(self, t: int, inner_idx: tuple[str, ...]) -> tuple[str, ...]:
        """Target ``t``'s full index: the outer indices (0 on its broadcast axes), then
        ``inner_idx``."""
        s = self.g.shape(t)
        return tuple("0" if s[d] == 1 else f"o{d}" for d in range(len(self.outer))) + inner_idx
