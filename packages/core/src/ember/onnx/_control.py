"""Subgraphs, sequences and optionals: If, Loop, Scan, SequenceMap, the Sequence* operators,
SplitToSequence, ConcatFromSequence, Optional, OptionalHasElement, OptionalGetElement.

A subgraph (an attribute of type GRAPH) becomes a `Subgraph`: its nodes are checked when the
model loads, exactly as the main graph's are, and it runs as Python control flow over ember
ops (the same host/device rules as the main graph).  A subgraph reads values of the scopes
around it by name (`Subgraph.outer` lists them: the enclosing node counts them as its
inputs, so they stay alive, and a floating-point initializer read only there is a parameter).

A sequence value is a Python list of values (tensors or host arrays); an optional value is
its element, or `EMPTY` when it has none.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Sequence
from typing import Any

import numpy as np

import ember as E

from . import _load
from ._dtypes import ember_dtype
from ._registry import OPS, Node, Run, is_host, op

__all__ = ["EMPTY", "Subgraph"]


class _Empty:
    """The value of an optional that holds nothing."""

    def __repr__(self) -> str:
        return "EMPTY"


EMPTY = _Empty()


class Subgraph:
    """A GRAPH attribute: its nodes checked, decoded and ready to run in an outer scope."""

    def __init__(self, g: Any, opset: int, where: str) -> None:
        onnx = _load._onnx()
        from onnx import numpy_helper

        self.name = g.name
        self.inputs = [v.name for v in g.input]
        self.outputs = [v.name for v in g.output]
        #: each output's declared element type and dimensions (None where not all known)
        self.output_types: list[tuple[int, list[int]] | None] = []
        for v in g.output:
            declared = None
            if v.type.WhichOneof("value") == "tensor_type":
                tt = v.type.tensor_type
                dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
                if tt.elem_type and tt.HasField("shape") and -1 not in dims:
                    declared = (int(tt.elem_type), dims)
            self.output_types.append(declared)
        self.consts: dict[str, Any] = {t.name: numpy_helper.to_array(t)
                                       for t in g.initializer}
        for t in g.initializer:
            ember_dtype(t.data_type, f"{where}: subgraph {g.name!r} initializer "
                              f"{t.name!r}")
        nodes = [Node(n.op_type, n.name or f"{n.op_type}_{i}", list(n.input), list(n.output),
                      _load._attrs(onnx, n, opset, where), opset)
                 for i, n in enumerate(g.node)]
        if nodes:
            _load._check(nodes, list(g.node), f"{where} (subgraph {g.name!r})")
        self.nodes: list[Node] = []
        for n in nodes:
            if n.op_type == "Constant":
                self.consts[n.outputs[0]] = _load._constant(n)
            else:
                self.nodes.append(n)
        defined = set(self.inputs) | set(self.consts)
        outer: list[str] = []
        for n in self.nodes:
            for name in n.reads():
                if name and name not in defined and name not in outer:
                    outer.append(name)
            defined.update(n.outputs)
        outer += [o for o in self.outputs if o not in defined and o not in outer]
        #: the names this subgraph reads from the scopes around it
        self.outer = outer

    def __call__(self, r: Run, args: Sequence[Any]) -> list[Any]:
        if len(args) != len(self.inputs):
            raise ValueError(f"subgraph {self.name!r} takes {len(self.inputs)} input(s), "
                             f"got {len(args)}")
        local: dict[str, Any] = dict(self.consts)
        local.update(zip(self.inputs, args, strict=True))
        scope = ChainMap(local, r.scope)  # type: ignore[arg-type]  # only read through
        saved, r.scope = r.scope, scope
        try:
            for node in self.nodes:
                rule = OPS[node.op_type]
                xs = [scope[i] if i else None for i in node.inputs]
                try:
                    if rule.host is not None and all(x is None or is_host(x) for x in xs):
                        outs = _load._call_host(rule.host, node, xs)
                    else:
                        outs = _load._as_tuple(rule.device(r, node, *_load._trim(xs)))
                except Exception as exc:
                    exc.add_note(f"while running ONNX {node.where()} in subgraph "
                                 f"{self.name!r}, inputs "
                                 + ", ".join(_load._describe(x) for x in xs))
                    raise
                for name, v in zip(node.outputs, outs, strict=False):
                    if name:
                        local[name] = v
            return [scope[o] for o in self.outputs]
        finally:
            r.scope = saved


# -- If, Loop, Scan, SequenceMap ------------------------------------------------------------------

def _flag(r: Run, v: Any) -> bool:
    a = r.host(v)
    if a.size != 1:
        raise ValueError(f"a condition must have one element, got shape {list(a.shape)}")
    return bool(a.reshape(-1)[0])


def _stack(r: Run, parts: list[Any]) -> Any:
    if all(is_host(p) for p in parts):
        return np.stack(parts)
    return E.stack([r.tensor(p) for p in parts])


@op("If", note="then_branch / else_branch run as Python control flow (the condition is "
    "read on the host)")
def if_(r: Run, node: Node, cond: Any) -> tuple[Any, ...]:
    branch = node.attrs["then_branch" if _flag(r, cond) else "else_branch"]
    outs = branch(r, [])
    if len(outs) != len(node.outputs):
        raise ValueError(f"{node.where()}: the branch has {len(outs)} output(s), the node "
                         f"{len(node.outputs)}")
    return tuple(outs)


@op("Loop", note="a Python loop over the body (trip count and condition read on the host); "
    "scan outputs stacked")
def loop(r: Run, node: Node, m: Any = None, cond: Any = None, *carried: Any) -> tuple[Any, ...]:
    body: Subgraph = node.attrs["body"]
    n_carried = len(carried)
    n_scan = len(body.outputs) - 1 - n_carried
    if n_scan < 0:
        raise ValueError(f"{node.where()}: the body has {len(body.outputs)} output(s) for "
                         f"{n_carried} loop-carried value(s)")
    trips = None if m is None else int(r.host(m).reshape(-1)[0])
    go = True if cond is None else _flag(r, cond)
    state = list(carried)
    scans: list[list[Any]] = [[] for _ in range(n_scan)]
    i = 0
    while go and (trips is None or i < trips):
        outs = body(r, [np.array(i, np.int64), np.array(go), *state])
        go = _flag(r, outs[0])
        state = outs[1:1 + n_carried]
        for k, v in enumerate(outs[1 + n_carried:]):
            scans[k].append(v)
        i += 1
    stacked = []
    for k, parts in enumerate(scans):
        stacked.append(_stack(r, parts) if parts else
                       _empty(node, body, 1 + n_carried + k, "a loop that ran no iteration"))
    return (*state, *stacked)


def _empty(node: Node, body: Subgraph, k: int, why: str) -> np.ndarray:
    """A scan output of no element, shaped from the body output's declared type."""
    declared = body.output_types[k]
    if declared is None:
        raise NotImplementedError(f"{node.where()}: scan output {body.outputs[k]!r} of {why} "
                                  "has no declared type and shape to build it from")
    from onnx import helper

    return np.zeros((0, *declared[1]), helper.tensor_dtype_to_np_dtype(declared[0]))


def _move(r: Run, v: Any, src: int, dst: int) -> Any:
    if src == dst:
        return v
    if is_host(v):
        return np.moveaxis(v, src, dst)
    return E.movedim(r.tensor(v), src, dst)


def _scan(r: Run, node: Node, states: list[Any], xs: list[Any]) -> tuple[Any, ...]:
    body: Subgraph = node.attrs["body"]
    n_in = len(xs)
    in_axes = list(node.attrs.get("scan_input_axes", [0] * n_in))
    in_dirs = list(node.attrs.get("scan_input_directions", [0] * n_in))
    n_out = len(body.outputs) - len(states)
    out_axes = list(node.attrs.get("scan_output_axes", [0] * n_out))
    out_dirs = list(node.attrs.get("scan_output_directions", [0] * n_out))
    xs = [_move(r, x, a % max(x.ndim, 1), 0) for x, a in zip(xs, in_axes, strict=True)]
    steps = {int(x.shape[0]) for x in xs}
    if len(steps) != 1:
        raise ValueError(f"{node.where()}: the scan inputs have different lengths {steps}")
    n = steps.pop()
    scans: list[list[Any]] = [[] for _ in range(n_out)]
    for t in range(n):
        args = [x[n - 1 - t if d else t] for x, d in zip(xs, in_dirs, strict=True)]
        outs = body(r, [*states, *args])
        states = outs[:len(states)]
        for k, v in enumerate(outs[len(states):]):
            scans[k].append(v)
    results = []
    for k, parts in enumerate(scans):
        if not parts:
            e = _empty(node, body, len(states) + k, "a scan over no element")
            results.append(np.moveaxis(e, 0, out_axes[k] % e.ndim))
            continue
        if out_dirs[k]:
            parts = parts[::-1]
        s = _stack(r, parts)
        results.append(_move(r, s, 0, out_axes[k] % s.ndim))
    return (*states, *results)


@op("Scan", note="a Python loop over the body; scan axes and directions (opset 8: a batch "
    "axis, sequence_lens)")
def scan(r: Run, node: Node, *xs: Any) -> tuple[Any, ...]:
    n_in = int(node.attrs["num_scan_inputs"])
    if node.opset >= 9:
        return _scan(r, node, list(xs[:len(xs) - n_in]), list(xs[len(xs) - n_in:]))
    # Scan-8: input 0 is sequence_lens (optional); every value has a batch axis first
    lens, rest = xs[0], list(xs[1:])
    states, seqs = rest[:len(rest) - n_in], rest[len(rest) - n_in:]
    if "scan_input_axes" in node.attrs or "scan_output_axes" in node.attrs:
        raise NotImplementedError(f"{node.where()}: scan axes are not defined at opset 8")
    batch = int(seqs[0].shape[0])
    if lens is not None and any(int(v) != int(seqs[0].shape[1]) for v in r.ints(lens)):
        raise NotImplementedError(f"{node.where()}: sequence_lens shorter than the scan "
                                  "inputs are not supported")
    dirs = node.attrs.get("directions")
    sub = Node(node.op_type, node.name, node.inputs, node.outputs,
               {**node.attrs, "scan_input_directions": dirs or [0] * n_in}, 9)
    per: list[tuple[Any, ...]] = [
        _scan(r, sub, [s[b] for s in states], [x[b] for x in seqs]) for b in range(batch)]
    return tuple(_stack(r, [p[k] for p in per]) for k in range(len(per[0])))


@op("SequenceMap", note="the body runs once per element")
def sequence_map(r: Run, node: Node, seq: Any, *extra: Any) -> tuple[Any, ...]:
    body: Subgraph = node.attrs["body"]
    outs: list[list[Any]] = [[] for _ in body.outputs]
    for i in range(len(seq)):
        args = [seq[i], *(e[i] if isinstance(e, list) else e for e in extra)]
        for k, v in enumerate(body(r, args)):
            outs[k].append(v)
    return tuple(outs)


# -- sequences --------------------------------------------------------------------------------

def _seq(node: Node, v: Any) -> list[Any]:
    if not isinstance(v, list):
        raise TypeError(f"{node.where()}: expected a sequence, got {_load._describe(v)}")
    return v


def _position(r: Run, node: Node, seq: list[Any], pos: Any, insert: bool = False) -> int:
    p = int(r.host(pos).reshape(-1)[0])
    n = len(seq)
    hi = n if insert else n - 1
    if not -n <= p <= hi:
        raise IndexError(f"{node.where()}: position {p} is out of range for a sequence of "
                         f"{n} element(s)")
    return p + n if p < 0 else p


@op("SequenceEmpty")
def sequence_empty(r: Run, node: Node) -> list[Any]:
    return []


def _dtype_name(v: Any) -> str:
    return str(v.dtype) if is_host(v) else v.dtype.name


def _same_dtype(node: Node, items: Sequence[Any]) -> None:
    """A sequence holds tensors of one element type."""
    names = {_dtype_name(v) for v in items}
    if len(names) > 1:
        raise TypeError(f"{node.where()}: a sequence holds one element type, got "
                        f"{', '.join(sorted(names))}")


@op("SequenceConstruct")
def sequence_construct(r: Run, node: Node, *xs: Any) -> list[Any]:
    _same_dtype(node, xs)
    return list(xs)


@op("SequenceAt")
def sequence_at(r: Run, node: Node, seq: Any, pos: Any) -> Any:
    s = _seq(node, seq)
    return s[_position(r, node, s, pos)]


@op("SequenceErase")
def sequence_erase(r: Run, node: Node, seq: Any, pos: Any = None) -> list[Any]:
    s = list(_seq(node, seq))
    if not s:
        raise IndexError(f"{node.where()}: erase from an empty sequence")
    del s[-1 if pos is None else _position(r, node, s, pos)]
    return s


@op("SequenceInsert")
def sequence_insert(r: Run, node: Node, seq: Any, x: Any, pos: Any = None) -> list[Any]:
    s = list(_seq(node, seq))
    _same_dtype(node, [*s[:1], x])
    s.insert(len(s) if pos is None else _position(r, node, s, pos, insert=True), x)
    return s


@op("SequenceLength")
def sequence_length(r: Run, node: Node, seq: Any) -> np.ndarray:
    return np.array(len(_seq(node, seq)), np.int64)


@op("SplitToSequence", note="split as sizes or one chunk size; keepdims")
def split_to_sequence(r: Run, node: Node, x: Any, split: Any = None) -> list[Any]:
    axis = int(node.attrs.get("axis", 0))
    nd = x.ndim
    if not -nd <= axis < nd:
        raise ValueError(f"{node.where()}: axis {axis} is out of range for rank {nd}")
    axis %= nd
    n = int(x.shape[axis])
    if split is None:
        sizes = [1] * n
    else:
        s = r.host(split)
        if s.ndim == 0:
            k = int(s)
            if k <= 0:
                raise ValueError(f"{node.where()}: split size {k} must be positive")
            sizes = [k] * (n // k) + ([n % k] if n % k else [])
        else:
            sizes = [int(v) for v in s]
            if any(v < 0 for v in sizes) or sum(sizes) != n:
                raise ValueError(f"{node.where()}: split {sizes} does not add up to the "
                                 f"axis length {n}")
    parts: list[Any] = []
    start = 0
    for k in sizes:
        index = tuple([slice(None)] * axis + [slice(start, start + k)])
        parts.append(x[index] if is_host(x) else r.tensor(x)[index])
        start += k
    if split is None and not node.attrs.get("keepdims", 1):
        parts = [p.squeeze(axis) for p in parts]
    return parts


@op("ConcatFromSequence", note="axis, new_axis")
def concat_from_sequence(r: Run, node: Node, seq: Any) -> Any:
    s = _seq(node, seq)
    if not s:
        raise ValueError(f"{node.where()}: concatenating an empty sequence")
    axis = int(node.attrs["axis"])
    new = int(node.attrs.get("new_axis", 0))
    nd = s[0].ndim + new
    if not -nd <= axis < nd:
        raise ValueError(f"{node.where()}: axis {axis} is out of range for rank {nd}")
    axis %= nd
    if all(is_host(v) for v in s):
        return np.stack(s, axis) if new else np.concatenate(s, axis)
    ts = [r.tensor(v) for v in s]
    return E.stack(ts, dim=axis) if new else E.cat(ts, dim=axis)


# -- optionals --------------------------------------------------------------------------------

@op("Optional")
def optional(r: Run, node: Node, x: Any = None) -> Any:
    return EMPTY if x is None else x


@op("OptionalHasElement")
def optional_has_element(r: Run, node: Node, x: Any = None) -> np.ndarray:
    return np.array(x is not None and x is not EMPTY)


@op("OptionalGetElement")
def optional_get_element(r: Run, node: Node, x: Any = None) -> Any:
    if x is None or x is EMPTY:
        raise ValueError(f"{node.where()}: the optional input holds no element")
    return x
