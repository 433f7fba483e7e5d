"""Graph-level fusion at import: convolution epilogues and elementwise chains.

**GELU chains.**  The elementwise spelling of GELU that exporters write (erf:
``x / sqrt(2) -> Erf -> + 1 -> * x -> * 0.5``; tanh: ``x * x * x * 0.044715 + x ->
* sqrt(2/pi) -> Tanh -> + 1 -> * x -> * 0.5``, or with ``Pow(x, 3)``, in either order of the
last two products) becomes one node that runs `ember.nn.functional.gelu` (one compiled pass on
the CPU instead of five to nine array passes, and an erf of its own instead of scipy's).  The
constants must equal GELU's to float32 precision and every intermediate value must have no
other reader; the chain's constants stay inputs of the node, so ``state_dict()`` is unchanged.

**Linear layers.**  ``MatMul(x, W) -> Add(b)`` with initializers ``W [K, N]`` and ``b [N]``
(what exporters write for ``nn.Linear`` on 3-D inputs) runs `ember.nn.functional.linear`
with ``W`` transposed (a view): the bias is added in place to the product.

**Convolution epilogues:** ``Conv -> [BatchNormalization] -> [Add] -> [Relu]``.

A chain whose intermediate values have no other reader (and are no graph output) becomes one
node, and so does a lone Conv with a bias (the bias is its epilogue).  It runs
`ember.ops.composite.fused_conv2d` where the device implements that op (the CPU
applies bias, batch norm, residual and ReLU in place on the GEMM's output, in one pass) and
the chain's own rules, node by node, everywhere else: on ``autodiff<...>`` stacks (so the
parameters, the batch-norm statistics and the gradients are those of the graph as written,
and fine-tuning is unchanged) and on backends without the kernel.  Nothing is folded into
the weights: batch norm's scale and shift are computed from its inputs at each call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember import Tensor
from ember.amp._state import AUTOCAST
from ember.nn import functional as F
from ember.ops import composite as cops

from ._nn import _spatial
from ._registry import OPS, Node, OpRule, Run

__all__ = ["FUSED", "GELU", "LINEAR", "RULE", "RULES", "fuse"]

FUSED = "ember.FusedConv"  # the op type of a fused node (no ONNX operator has this name)
GELU = "ember.Gelu"  # an elementwise GELU chain
LINEAR = "ember.Linear"  # MatMul with a constant weight, then Add of a bias


@dataclass
class _Chain:
    conv: Node
    norm: Node | None
    add: Node | None
    relu: Node | None

    def nodes(self) -> list[Node]:
        return [n for n in (self.conv, self.norm, self.add, self.relu) if n is not None]


def fuse(nodes: list[Node], outputs: list[str],
         static: dict[str, np.ndarray] | None = None) -> list[Node]:
    """``nodes`` with each fusable chain replaced by one node, placed where its last node was
    (every input it reads is computed by then); ``static`` holds the constants' values."""
    nodes = _fuse_gelu(nodes, outputs, static or {})
    nodes = _fuse_linear(nodes, outputs, static or {})
    return _fuse_conv(nodes, outputs)


def _fuse_linear(nodes: list[Node], outputs: list[str],
                 static: dict[str, np.ndarray]) -> list[Node]:
    """``MatMul(x, W[K, N]) -> Add(., b[N])`` (either order of the sum), ``W`` and ``b``
    initializers, as one node running `ember.nn.functional.linear`: the bias is added in
    place to the product (one pass fewer over the result), and ``x``'s leading axes are one
    GEMM."""
    readers: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for name in n.inputs:
            if name:
                readers.setdefault(name, []).append(i)
    kept = set(outputs)
    replace: dict[int, Node] = {}
    absorbed: set[int] = set()
    for i, n in enumerate(nodes):
        if n.op_type != "MatMul" or len(n.inputs) != 2 or len(n.outputs) != 1:
            continue
        w = static.get(n.inputs[1])
        out = n.outputs[0]
        users = readers.get(out, [])
        if w is None or w.ndim != 2 or w.dtype.kind != "f" or len(users) != 1 or out in kept:
            continue
        j = users[0]
        add = nodes[j]
        if add.op_type != "Add" or len(add.inputs) != 2 or add.inputs.count(out) != 1 or \
                j in absorbed:
            continue
        bias = add.inputs[1] if add.inputs[0] == out else add.inputs[0]
        b = static.get(bias)
        if b is None or b.shape != (w.shape[1],) or b.dtype != w.dtype:
            continue
        replace[j] = Node(LINEAR, f"{n.name}+{add.name}", [n.inputs[0], n.inputs[1], bias],
                          list(add.outputs), {}, add.opset)
        absorbed.update((i, j))
    return [replace.get(k, n) for k, n in enumerate(nodes)
            if k in replace or k not in absorbed]


def _run_linear(r: Run, node: Node, x: Any, w: Any, b: Any) -> Any:
    t, wt, bt = r.tensor(x), r.tensor(w), r.tensor(b)
    if t.ndim < 2 or t.shape[-1] != wt.shape[0] or t.dtype != wt.dtype:
        return OPS["Add"].device(r, node, OPS["MatMul"].device(r, node, t, wt), bt)
    return F.linear(t, wt.permute(1, 0), bt)


def _scalar(static: dict[str, np.ndarray], name: str) -> float | None:
    v = static.get(name)
    if v is None or v.size != 1 or v.dtype.kind != "f":
        return None
    return float(v.reshape(()))


def _fuse_gelu(nodes: list[Node], outputs: list[str],
               static: dict[str, np.ndarray]) -> list[Node]:
    readers: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for name in n.inputs:
            if name:
                readers.setdefault(name, []).append(i)
    kept = set(outputs)
    absorbed: set[int] = set()

    def sole(value: str) -> int | None:
        users = readers.get(value, [])
        ok = len(users) == 1 and value not in kept and users[0] not in absorbed
        return users[0] if ok else None

    def step(value: str, op_type: str, const: float | None = None, other: str | None = None,
             first: bool = False) -> tuple[int, str, list[str]] | None:
        """The sole reader of ``value``: an ``op_type`` node whose other input is the scalar
        ``const`` or the value ``other`` (``value`` first when ``first``); its index, its
        output and the constants it reads."""
        j = sole(value)
        if j is None:
            return None
        n = nodes[j]
        if n.op_type != op_type or len(n.outputs) != 1:
            return None
        if const is None and other is None:  # a unary node
            return (j, n.outputs[0], []) if n.inputs == [value] else None
        if len(n.inputs) != 2 or value not in n.inputs or (first and n.inputs[0] != value):
            return None
        rest = n.inputs[1] if n.inputs[0] == value else n.inputs[0]
        if other is not None:
            return (j, n.outputs[0], []) if rest == other else None
        c = _scalar(static, rest)
        if c is None or const is None or abs(c - const) > 1e-6 * abs(const):
            return None
        return j, n.outputs[0], [rest]

    def tail(x: str, value: str) -> tuple[list[int], str, list[str]] | None:
        """``0.5 * x * value`` in any of the exporters' orders."""
        j = sole(value)
        if j is None or nodes[j].op_type != "Mul" or len(nodes[j].inputs) != 2 or \
                value not in nodes[j].inputs:
            return None
        rest = nodes[j].inputs[1] if nodes[j].inputs[0] == value else nodes[j].inputs[0]
        if rest == x:  # (x * value) * 0.5
            k = step(nodes[j].outputs[0], "Mul", 0.5)
            return ([j, k[0]], k[1], k[2]) if k else None
        half = _scalar(static, rest)
        if half is not None and abs(half - 0.5) <= 1e-6:  # (value * 0.5) * x
            k = step(nodes[j].outputs[0], "Mul", other=x)
            return ([j, k[0]], k[1], [rest]) if k else None
        # (x * 0.5) * value
        h = next((k for k, n in enumerate(nodes) if n.outputs == [rest]), None)
        if h is None or h in absorbed or sole(rest) != j or nodes[h].op_type != "Mul" or \
                len(nodes[h].inputs) != 2 or x not in nodes[h].inputs:
            return None
        c = nodes[h].inputs[1] if nodes[h].inputs[0] == x else nodes[h].inputs[0]
        half = _scalar(static, c)
        if half is None or abs(half - 0.5) > 1e-6:
            return None
        return [h, j], nodes[j].outputs[0], [c]

    replace: dict[int, Node] = {}
    for i, n in enumerate(nodes):
        if i in absorbed or len(n.inputs) != 2 or not n.inputs[0]:
            continue
        x = n.inputs[0]
        chain: list[tuple[int, str, list[str]] | None] = []
        approximate = "none"
        if n.op_type in ("Div", "Mul") and _scalar(static, n.inputs[1]) is not None:
            c = _scalar(static, n.inputs[1]) or 0.0
            want = math.sqrt(2.0) if n.op_type == "Div" else 1 / math.sqrt(2.0)
            if abs(c - want) > 1e-6 * want:
                continue
            chain = [(i, n.outputs[0], [n.inputs[1]])]
            chain.append(step(n.outputs[0], "Erf"))
        elif n.op_type in ("Pow", "Mul"):
            approximate = "tanh"
            if n.op_type == "Pow":
                if _scalar(static, n.inputs[1]) != 3.0:
                    continue
                chain = [(i, n.outputs[0], [n.inputs[1]])]
            else:
                if n.inputs[0] != n.inputs[1]:
                    continue
                chain = [(i, n.outputs[0], []), step(n.outputs[0], "Mul", other=x)]
            if chain[-1] is not None:
                chain.append(step(chain[-1][1], "Mul", 0.044715))
            if chain[-1] is not None:
                chain.append(step(chain[-1][1], "Add", other=x))
            if chain[-1] is not None:
                chain.append(step(chain[-1][1], "Mul",
                                  math.sqrt(2.0 / math.pi)))
            if chain[-1] is not None:
                chain.append(step(chain[-1][1], "Tanh"))
        else:
            continue
        if chain[-1] is not None:
            chain.append(step(chain[-1][1], "Add", 1.0))
        if chain[-1] is None:
            continue
        end = tail(x, chain[-1][1])
        if end is None:
            continue
        steps = [c for c in chain if c is not None]
        idx = [c[0] for c in steps] + end[0]
        consts = [name for c in steps for name in c[2]] + end[2]
        last = max(idx)
        replace[last] = Node(GELU, "+".join(nodes[k].name for k in sorted(idx)),
                             [x, *consts], [end[1]], {"approximate": approximate},
                             nodes[last].opset)
        absorbed.update(idx)
    return [replace.get(k, n) for k, n in enumerate(nodes)
            if k in replace or k not in absorbed]


def _run_gelu(r: Run, node: Node, x: Any, *consts: Any) -> Any:
    t = r.tensor(x)
    if not t.dtype.is_floating_point:
        raise TypeError(f"{node.where()}: GELU of a {t.dtype.name} tensor")
    return F.gelu(t, approximate=node.attrs["approximate"])


def _fuse_conv(nodes: list[Node], outputs: list[str]) -> list[Node]:
    readers: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for name in n.reads():
            if name:
                readers.setdefault(name, []).append(i)
    kept = set(outputs)

    def sole_reader(value: str) -> int | None:
        users = readers.get(value, [])
        ok = len(users) == 1 and value not in kept and users[0] not in absorbed
        return users[0] if ok else None

    replace: dict[int, Node] = {}
    absorbed: set[int] = set()
    for i, conv in enumerate(nodes):
        if conv.op_type != "Conv" or i in absorbed or len(conv.outputs) != 1:
            continue
        chain, last, cur = _Chain(conv, None, None, None), i, conv.outputs[0]
        j = sole_reader(cur)
        if j is not None and nodes[j].op_type == "BatchNormalization" and \
                nodes[j].inputs[0] == cur and len(nodes[j].inputs) == 5 and \
                not nodes[j].attrs.get("training_mode", 0) and \
                [o for o in nodes[j].outputs if o] == nodes[j].outputs[:1]:
            chain.norm, last, cur = nodes[j], j, nodes[j].outputs[0]
            j = sole_reader(cur)
        if j is not None and nodes[j].op_type == "Add" and len(nodes[j].inputs) == 2 and \
                nodes[j].inputs.count(cur) == 1:
            chain.add, last, cur = nodes[j], j, nodes[j].outputs[0]
            j = sole_reader(cur)
        if j is not None and nodes[j].op_type == "Relu":
            chain.relu, last, cur = nodes[j], j, nodes[j].outputs[0]
        if last == i and not (len(conv.inputs) > 2 and conv.inputs[2]):
            # a lone Conv without a bias (one with a bias adds it in the epilogue): plain
            # conv2d was faster for DenseNet's 3x3 128 -> 32 layers (56x56: 2.0 against
            # 3.2 ms on fused_conv2d's Winograd, one thread, 2-core VM)
            continue
        conv_in = (conv.inputs + [""] * 3)[:3]
        norm_in = chain.norm.inputs[1:5] if chain.norm is not None else []
        add_in: list[str] = []
        if chain.add is not None:
            prev = (chain.norm or conv).outputs[0]
            add_in = [x for x in chain.add.inputs if x != prev]
        replace[last] = Node(FUSED, "+".join([conv.name] + [n.op_type for n in
                                                           chain.nodes()[1:]]),
                             conv_in + norm_in + add_in, [cur], {"chain": chain},
                             conv.opset)
        absorbed.update(k for k, n in enumerate(nodes) if any(n is c for c in chain.nodes()))
    return [replace.get(k, n) for k, n in enumerate(nodes)
            if k in replace or k not in absorbed]


def _unfused(r: Run, chain: _Chain, xs: list[Any]) -> Any:
    """The chain's own rules, one node after another (exactly the graph as written)."""
    conv, norm, add, relu = chain.conv, chain.norm, chain.add, chain.relu
    y = OPS["Conv"].device(r, conv, *[v for v in xs[:3] if v is not None])
    if norm is not None:
        y = OPS["BatchNormalization"].device(r, norm, y, *xs[3:7])
    if add is not None:
        other = xs[-1]
        prev = (norm or conv).outputs[0]
        y = OPS["Add"].device(r, add, *((y, other) if add.inputs[0] == prev else (other, y)))
    if relu is not None:
        y = OPS["Relu"].device(r, relu, y)
    return y


def _run(r: Run, node: Node, *xs: Any) -> Any:
    chain: _Chain = node.attrs["chain"]
    vals = list(xs) + [None] * (len(node.inputs) - len(xs))
    x, w, b = vals[0], vals[1], vals[2]
    dev = r.device
    if AUTOCAST or not isinstance(x, Tensor) or x.ndim != 4 or not dev.implements(
            cops.fused_conv2d):
        return _unfused(r, chain, vals)
    t, wt = r.tensor(x), r.tensor(w)
    kernel = list(chain.conv.attrs.get("kernel_shape", wt.shape[2:]))
    strides, dil, begin, end = _spatial(chain.conv, t, kernel)
    norm_in = [r.tensor(v) for v in vals[3:7]] if chain.norm is not None else []
    res = r.tensor(vals[-1]) if chain.add is not None else None
    args = [t, wt] + ([r.tensor(b)] if b is not None else []) + norm_in + \
        ([res] if res is not None else [])
    o = wt.shape[0]
    out_hw = [(t.shape[2 + i] + begin[i] + end[i] - dil[i] * (kernel[i] - 1) - 1) // strides[i]
              + 1 for i in range(2)]
    if begin != end or wt.ndim != 4 or any(a.dtype != t.dtype for a in args) or \
            any(a.shape != (o,) for a in args[2:2 + (b is not None) + len(norm_in)]) or \
            (res is not None and tuple(res.shape) != (t.shape[0], o, *out_hw)):
        return _unfused(r, chain, vals)  # asymmetric pads, broadcasting, mixed dtypes
    eps = float(chain.norm.attrs.get("epsilon", 1e-5)) if chain.norm is not None else 1e-5
    return dev.dispatch(cops.fused_conv2d, args, dict(
        stride=tuple(strides), padding=tuple(begin), dilation=tuple(dil),
        groups=int(chain.conv.attrs.get("group", 1)), bias=b is not None,
        norm=chain.norm is not None, residual=res is not None, relu=chain.relu is not None,
        eps=eps))


RULE = OpRule(FUSED, _run)
#: the device rules of the fused nodes' op types
RULES = {FUSED: RULE, GELU: OpRule(GELU, _run_gelu), LINEAR: OpRule(LINEAR, _run_linear)}
