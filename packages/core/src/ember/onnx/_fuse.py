"""Convolution epilogues fused at import: ``Conv -> [BatchNormalization] -> [Add] -> [Relu]``.

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

from dataclasses import dataclass
from typing import Any

from ember import Tensor
from ember.amp._state import AUTOCAST
from ember.ops import composite as cops

from ._nn import _spatial
from ._registry import OPS, Node, OpRule, Run

__all__ = ["FUSED", "RULE", "fuse"]

FUSED = "ember.FusedConv"  # the op type of a fused node (no ONNX operator has this name)


@dataclass
class _Chain:
    conv: Node
    norm: Node | None
    add: Node | None
    relu: Node | None

    def nodes(self) -> list[Node]:
        return [n for n in (self.conv, self.norm, self.add, self.relu) if n is not None]


def fuse(nodes: list[Node], outputs: list[str]) -> list[Node]:
    """``nodes`` with each fusable chain replaced by one node, placed where its last node was
    (every input it reads is computed by then)."""
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
            continue  # a lone Conv without a bias (one with a bias adds it in the epilogue)
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
