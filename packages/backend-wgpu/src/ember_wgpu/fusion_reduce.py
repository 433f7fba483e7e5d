"""Fused groups with reductions: one WGSL kernel per group (its reductions over axis 0 aside).

The generated kernel gives each *outer position* (the leading axes that every needed node
shares and no needed reduction reduces: a row of a softmax) an invocation, or a work-group of
lanes when the position has much work (`reduction.lanes_for` its length).  Everything else is
a loop inside it:

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
work-group per row would leave a GPU idle; with more reductions it runs op by op.  This
module plans and runs the kernels; `fusion_source.RowSource` writes their WGSL.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.backend import FusedGroup, GroupNode, dtype_of_numpy
from ember.backend.schedule import ancestors, outer_space

from .fusion_source import ARG, NodeBody, Refused, RowSource, dense
from .reduction import COMBINE, FLAT_OUTPUTS, FLAT_ROW, SPLIT_MIN, SPLIT_OUTPUTS, lanes_for
from .runtime import GROUP, Runtime, WGArray
from .strided import is_float

__all__ = ["RowKernel", "compile_rows", "max_buffers"]

#: positions with fewer elements of work than this get one invocation, not a work-group
TREE_MIN = 64
#: whether work-group trees start with subgroup shuffles where the device offers them
SUBGROUPS = True


# -- planning and running ----------------------------------------------------------------------

class _Launch:
    """One generated kernel: the nodes it stores, the inputs it binds, its fixed words."""

    def __init__(self, g: FusedGroup, targets: Sequence[int], outer: tuple[int, ...],
                 lanes: bool, node_body: NodeBody, chunk: int = 0, parts: int = 1,
                 subgroups: bool = False, width: int = GROUP) -> None:
        src = RowSource(g, targets, outer, lanes, node_body, chunk, parts, subgroups, width)
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
        #: storage buffers bound: inputs, outputs and the parameter words
        self.buffers = len(self.inputs) + len(self.outs) + 1

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
        self.buffers = max(first.buffers, second.buffers)

    def run(self, rt: Runtime, xs: Sequence[WGArray], vals: dict[int, WGArray]) -> None:
        got: dict[int, WGArray] = {}
        self.first.run(rt, xs, got)
        (partial,) = got.values()
        shape = (*self.shape, self.parts)
        rows: dict[int, WGArray] = {}
        self.second.run(rt, [*xs, partial.view(shape, tuple(dense(shape)), 0)], rows)
        vals.update((self.names[j], v) for j, v in rows.items())


def _node(n: GroupNode, args: tuple[int, ...], **change: Any) -> GroupNode:
    params = change.pop("params", n.params)
    key = tuple(sorted(params.items())) if params is not n.params else n.params_key
    return GroupNode(change.get("op", n.op), params, key, change.get("dtype", n.dtype),
                     change.get("shape", n.shape), args)


def _split(g: FusedGroup, targets: Sequence[int], node_body: NodeBody,
           subgroups: bool, software: bool) -> _SplitLaunch | None:
    """The two passes of a launch whose one reduction has few long rows, or None where the
    launch is no elementwise prologue, one reduction and an epilogue over its result."""
    need = ancestors(g, targets)
    reds = [j for j in need if g.nodes[j].kind == "reduction"]
    if len(reds) != 1 or g.nodes[reds[0]].op.name not in COMBINE:
        return None
    jr = reds[0]
    node = g.nodes[jr]
    pro = sorted(ancestors(g, [jr]) - {jr})
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
        first = _Launch(g1, [len(n1) - 1], node.shape, True, node_body, chunk, parts,
                        subgroups, lanes_for(chunk, software))
        second = _Launch(g2, list(g2.outputs), node.shape, parts >= TREE_MIN, node_body,
                         subgroups=subgroups, width=lanes_for(parts, software))
    except Refused:
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
    software = rt.software
    sub = SUBGROUPS and rt.subgroups
    main = [j for j in g.outputs if j not in g.cross]
    plans: list[tuple[list[int], tuple[int, ...], int]] = []
    if main:
        outer, work = outer_space(g, main)
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
            split = _split(g, targets, node_body, sub, software)
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
            launches.append(_Launch(g, targets, outer, lanes, node_body, subgroups=sub,
                                    width=lanes_for(work, software)))
        except Refused:
            return None
    # a whole group of many small values (an optimizer's bookkeeping) may bind more buffers
    # than a shader stage can: it runs op by op
    if any(launch.buffers > max_buffers(rt) for launch in launches):
        return None
    return RowKernel(g, rt, launches)


def max_buffers(rt: Runtime) -> int:
    """The storage buffers one kernel of ``rt``'s device may bind: each is one binding of the
    kernel's one bind group, so the fewer of the storage buffers a shader stage may use and
    the bindings a group may hold (NVIDIA's Vulkan driver allows ~10^6 storage buffers a
    stage, but a bind group holds 1000 bindings in wgpu's default limits)."""
    lim = rt.device.limits
    return min(int(lim["max-storage-buffers-per-shader-stage"]),
               int(lim["max-bindings-per-bind-group"]))
