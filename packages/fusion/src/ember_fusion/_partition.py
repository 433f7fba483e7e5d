"""Cutting a flushed stream into steps: fused groups (one kernel each) and single view ops.

Rules, applied greedily in record order to the nodes still needed (held by a Python object,
or feeding one that is):

- a group is ``rows`` mode when every node's axis 0 is one extent N (elementwise and broadcast
  chains, reductions over inner axes with their prologue and epilogue, a 2-D matmul as its
  head); reductions over axis 0 join as ``cross`` nodes, whose value only the kernel's end
  knows, so nothing in the same group may use them;
- a group is ``whole`` mode for what has no such axis (0-d values, full reductions of small
  tensors); it also takes any small node but a matmul (which heads a group of its own, so its
  epilogue fuses), so scalar bookkeeping does not split groups;
- view ops (reshape, permute, expand, slice) are steps of their own, run by the inner backend;
- what a ``rows`` group's next node needs but does not compute from the group is *hoisted*
  before the group instead of ending it: small nodes (scalar bookkeeping such as a gradient's
  ``1/N`` or a power rule's ``exponent - 1``) join one ``whole`` group run just before it, and
  views of values computed before it run just before it too (the broadcast of a loss's
  gradient). Nodes of a stream are pure, so computing them earlier changes no value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ember import ops

from ._compiler import FusedGroup, FusedKernel, GroupNode
from ._graph import VIEW_RULES, Node, Shape, numel, params_key

if TYPE_CHECKING:
    from ember import DType
    from ember.backend import Device
    from ember.ops import Op

__all__ = ["Plan", "analyse"]

RD = ops.reduction
#: nodes at most this big join any group (they cost nothing to compute unblocked)
SMALL = 4096
_CROSSABLE = frozenset({RD.sum, RD.mean, RD.prod, RD.max, RD.min, RD.any, RD.all})
_LOW = frozenset({"float16", "bfloat16"})


@dataclass
class KernelStep:
    """Run one compiled group: read ``ins`` (stream slots, or ``-1 - k`` for external k)."""

    kernel: FusedKernel
    ins: tuple[int, ...]
    outs: tuple[int, ...]
    group: FusedGroup

    def run(self, vals: list[Any], ext: list[Any]) -> None:
        res = self.kernel([vals[r] if r >= 0 else ext[-1 - r] for r in self.ins])
        for i, v in zip(self.outs, res, strict=True):
            vals[i] = v


@dataclass
class ViewStep:
    """A movement op run on its own through the inner device (a numpy view on cpu)."""

    device: Device
    op: Op
    params: dict[str, Any]
    dtype: DType
    src: int
    out: int

    def run(self, vals: list[Any], ext: list[Any]) -> None:
        r = self.src
        dev = self.device
        t = dev.tensor_type.from_payload(vals[r] if r >= 0 else ext[-1 - r], dev, self.dtype)
        vals[self.out] = dev.dispatch(self.op, (t,), self.params).payload


@dataclass
class Plan:
    """What one recurring stream does: its steps, and which values leave it."""

    steps: list[KernelStep | ViewStep]
    keep: tuple[int, ...]
    groups: tuple[str, ...]
    kernels: int
    views: int
    written: int  # values the steps write to memory (held ones, and those between steps)


class _Group:
    __slots__ = ("cross", "members", "mode", "pos", "pre", "pre_views", "rows", "set")

    def __init__(self, mode: str, rows: int, pos: float) -> None:
        self.mode = mode
        self.rows = rows
        #: where the group runs among the steps (hoisted steps run at ``pos - 0.5`` and
        #: ``pos - 0.25``: before it, after every earlier step)
        self.pos = pos
        self.members: list[int] = []
        self.set: set[int] = set()
        self.cross: set[int] = set()
        #: the small nodes hoisted before this group (a ``whole`` group), and the views
        self.pre: _Group | None = None
        self.pre_views: list[ViewStep] = []

    def add(self, i: int, cross: bool) -> None:
        self.members.append(i)
        self.set.add(i)
        if cross:
            self.cross.add(i)


def _reduces_axis0(node: Node) -> bool:
    if node.op in (RD.argmax, RD.argmin):
        return node.params["dim"] in (None, 0)
    return 0 in node.params["dims"]


class _Partitioner:
    def __init__(self, nodes: Sequence[Node], refs: Sequence[tuple[int, ...]],
                 ext: Sequence[tuple[Shape, Any]], held: Sequence[bool]) -> None:
        self.nodes = nodes
        self.refs = refs
        self.ext = ext
        self.held = held
        self.pos: dict[int, float] = {}  # node -> position of the step computing it

    def shape(self, r: int) -> Shape:
        return self.nodes[r].shape if r >= 0 else self.ext[-1 - r][0]

    def start(self, i: int, pos: float) -> tuple[_Group, bool]:
        """The group node ``i`` opens, and whether it is a cross node of it."""
        node = self.nodes[i]
        op = node.op
        if op is ops.linalg.matmul:
            a, b = (self.shape(r) for r in self.refs[i])
            if len(a) == 2 and len(b) == 2 and node.dtype.name in ("float32", "float64"):
                return _Group("rows", node.shape[0], pos), False
            return _Group("whole", 0, pos), False
        if op is not None and op.group == "reduction":
            sx = self.shape(self.refs[i][0])
            if sx and not _reduces_axis0(node):
                return _Group("rows", sx[0], pos), False
            if sx and op in _CROSSABLE and node.dtype.name not in _LOW:
                return _Group("rows", sx[0], pos), True
            return _Group("whole", 0, pos), False
        if node.shape:
            return _Group("rows", node.shape[0], pos), False
        return _Group("whole", 0, pos), False

    def joins(self, g: _Group, i: int) -> bool | None:
        """None when ``i`` cannot join ``g``; else whether it joins as a cross node."""
        node = self.nodes[i]
        refs = self.refs[i]
        for r in refs:
            if r >= 0 and (r in g.cross or (r not in g.set and self.pos[r] > g.pos)):
                return None
        op = node.op
        if op is ops.linalg.matmul:  # a matmul heads a group of its own (its epilogue's)
            return None
        if g.mode == "whole":
            return False if numel(node.shape) <= SMALL else None
        n = g.rows
        if op is not None and op.group == "reduction":
            sx = self.shape(refs[0])
            if not sx or sx[0] != n:
                return None
            if not _reduces_axis0(node):
                return False
            if op in _CROSSABLE and node.dtype.name not in _LOW:
                return True
            return None
        s = node.shape
        if not s or s[0] != n:
            return None
        for r in refs:
            if r in g.set and len(self.nodes[r].shape) != len(s):
                return None
        return False

    def before(self, g: _Group, i: int) -> bool:
        """Whether every value node ``i`` reads is computed before ``g``'s hoisted small
        nodes run (external, by an earlier step, or by those hoisted nodes themselves)."""
        pre = g.pre
        for r in self.refs[i]:
            if r >= 0 and not (self.pos[r] < g.pos - 0.5 or (pre is not None and r in pre.set)):
                return False
        return True

    def hoist(self, g: _Group, i: int) -> bool:
        """Run node ``i``, which cannot join the ``rows`` group ``g``, before ``g`` (see the
        module docstring) where it and its arguments are small and it reads nothing ``g``
        computes."""
        node = self.nodes[i]
        if (node.op is ops.linalg.matmul or numel(node.shape) > SMALL
                or any(numel(self.shape(r)) > SMALL for r in self.refs[i])
                or not self.before(g, i)):
            return False
        if g.pre is None:
            g.pre = _Group("whole", 0, g.pos - 0.5)
        g.pre.add(i, False)
        self.pos[i] = g.pre.pos
        return True

    def hoist_view(self, g: _Group, step: ViewStep) -> bool:
        """Run a view before ``g`` when its source is computed before ``g``."""
        r = step.src
        if r >= 0 and not self.pos[r] < g.pos:
            return False
        g.pre_views.append(step)
        self.pos[step.out] = g.pos - 0.25
        return True


def analyse(nodes: Sequence[Node], refs: Sequence[tuple[int, ...]],
            ext: Sequence[tuple[Shape, Any]], held: Sequence[bool], compiler: Any,
            inner: Device, cache: dict[Any, FusedKernel],
            counters: dict[str, int]) -> Plan:
    """Partition a flushed stream and compile its groups (through the kernel cache)."""
    count = len(nodes)
    needed = list(held)
    users: list[list[int]] = [[] for _ in range(count)]
    for i in range(count - 1, -1, -1):
        if needed[i]:
            for r in refs[i]:
                if r >= 0:
                    needed[r] = True
                    users[r].append(i)
    p = _Partitioner(nodes, refs, ext, held)
    steps: list[_Group | ViewStep] = []
    cur: _Group | None = None
    for i in range(count):
        if not needed[i]:
            continue
        node = nodes[i]
        if node.op in VIEW_RULES:
            assert node.op is not None  # recorded nodes have ops
            view = ViewStep(inner, node.op, node.params, node.dtype, refs[i][0], i)
            if cur is None or cur.mode != "rows" or not p.hoist_view(cur, view):
                p.pos[i] = len(steps)
                steps.append(view)
            continue
        how = p.joins(cur, i) if cur is not None else None
        if cur is None or how is None:
            if cur is not None and cur.mode == "rows" and p.hoist(cur, i):
                continue
            cur, how = p.start(i, len(steps))
            steps.append(cur)
        cur.add(i, how)
        p.pos[i] = cur.pos
    ordered: list[_Group | ViewStep] = []
    for st in steps:
        if isinstance(st, _Group):
            if st.pre is not None:
                ordered.append(st.pre)
            ordered += st.pre_views
        ordered.append(st)
    plan_steps: list[KernelStep | ViewStep] = []
    names: list[str] = []
    for st in ordered:
        if isinstance(st, ViewStep):
            plan_steps.append(st)
            continue
        ks = _group_step(st, p, needed, users, compiler, cache, counters)
        plan_steps.append(ks)
        names.append(ks.group.describe())
    keep = tuple(i for i in range(count) if held[i])
    written = sum(len(st.outs) if isinstance(st, KernelStep) else 1 for st in plan_steps)
    return Plan(plan_steps, keep, tuple(names), len(names), len(plan_steps) - len(names),
                written)


def _group_step(g: _Group, p: _Partitioner, needed: list[bool], users: list[list[int]],
                compiler: Any, cache: dict[Any, FusedKernel],
                counters: dict[str, int]) -> KernelStep:
    local = {i: j for j, i in enumerate(g.members)}
    ins: list[int] = []
    in_ix: dict[int, int] = {}
    gnodes: list[GroupNode] = []
    for i in g.members:
        node = p.nodes[i]
        args: list[int] = []
        for r in p.refs[i]:
            if r in local:
                args.append(local[r])
                continue
            k = in_ix.get(r)
            if k is None:
                k = in_ix[r] = len(ins)
                ins.append(r)
            args.append(-1 - k)
        assert node.op is not None  # recorded nodes have ops; values never enter groups
        gnodes.append(GroupNode(node.op, node.params, _params_key(node.params), node.dtype,
                                node.shape, tuple(args)))
    outs = tuple(i for i in g.members
                 if p.held[i] or any(u not in g.set for u in users[i]))
    group = FusedGroup(
        nodes=tuple(gnodes),
        inputs=tuple((p.shape(r), p.nodes[r].dtype if r >= 0 else p.ext[-1 - r][1])
                     for r in ins),
        outputs=tuple(local[i] for i in outs),
        mode=g.mode, rows=g.rows, cross=frozenset(local[i] for i in g.cross))
    key = group.key
    kernel = cache.get(key)
    if kernel is None:
        kernel = cache[key] = compiler.compile(group)
        counters["kernels_compiled"] += 1
    else:
        counters["kernel_cache_hits"] += 1
    return KernelStep(kernel, tuple(ins), outs, group)


def _params_key(params: dict[str, Any]) -> Any:
    try:
        key = params_key(params)
        hash(key)
    except TypeError:
        return repr(sorted(params.items()))
    return key
