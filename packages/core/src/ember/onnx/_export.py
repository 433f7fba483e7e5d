"""`export`: write an ONNX file by tracing the ember ops a module runs.

The trace is the one `ember.compile` records (`ember._trace.Tracer`): every kernel the
primitive backend runs, with its parameters and the payloads it read and wrote.  Each kernel
is mapped back to its op through the backend's op table and written as ONNX nodes (`RULES`);
payloads become graph inputs (the example inputs), initializers named after the module's
parameters and buffers (``state_dict`` names), or constants.  Values computed from constants
alone are folded.  Shapes are those of the example inputs: the graph is static.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import ember
from ember import Tensor

from .. import _trace
from ._dtypes import onnx_type

__all__ = ["EXPORT_OPSET", "RULES", "export"]

#: the opset ember writes (axes of reductions as inputs; LayerNormalization)
EXPORT_OPSET = 18


class _Graph:
    """The ONNX graph being written: nodes, initializers, unique names."""

    def __init__(self, onnx: Any) -> None:
        self.onnx = onnx
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.count = 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, value: Any, dtype: Any = None, hint: str = "const") -> str:
        from onnx import numpy_helper

        # a Constant node, not an initializer: an importer keeps initializers as state
        arr = np.asarray(value, dtype=dtype)
        name = self.name(hint)
        self.nodes.append(self.onnx.helper.make_node(
            "Constant", [], [name], name=self.name("Constant"),
            value=numpy_helper.from_array(arr, name)))
        return name

    def ints(self, values: Sequence[int]) -> str:
        return self.const(np.asarray(list(values), dtype=np.int64), hint="shape")

    def node(self, op: str, inputs: Sequence[str], outputs: int | Sequence[str] = 1,
             **attrs: Any) -> str:
        outs = [self.name(op.lower()) for _ in range(outputs)] if isinstance(outputs, int) \
            else list(outputs)
        self.nodes.append(self.onnx.helper.make_node(op, list(inputs), outs,
                                                     name=self.name(op), **attrs))
        return outs[0]


class _Call:
    """One traced kernel, as the export rules see it."""

    def __init__(self, g: _Graph, op: str, ins: list[str], shapes: list[tuple[int, ...]],
                 dtypes: list[Any], params: dict[str, Any], out_shape: tuple[int, ...],
                 where: str) -> None:
        self.g, self.op, self.ins, self.shapes, self.dtypes = g, op, ins, shapes, dtypes
        self.params, self.out_shape, self.where = params, out_shape, where

    def scalar(self, value: float, like: int = 0) -> str:
        return self.g.const(np.asarray(value, dtype=self.dtypes[like]))


Rule = Callable[[_Call], str]
RULES: dict[str, Rule] = {}


def _same(onnx_op: str) -> Rule:
    return lambda c: c.g.node(onnx_op, c.ins)


for _ember, _onnx_op in {
        "add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow",
        "maximum": "Max", "minimum": "Min", "neg": "Neg", "abs": "Abs", "exp": "Exp",
        "log": "Log", "sqrt": "Sqrt", "sin": "Sin", "cos": "Cos", "tan": "Tan", "tanh": "Tanh",
        "asin": "Asin", "acos": "Acos", "atan": "Atan", "sinh": "Sinh", "cosh": "Cosh",
        "sigmoid": "Sigmoid", "erf": "Erf", "floor": "Floor", "ceil": "Ceil", "round": "Round",
        "sign": "Sign", "reciprocal": "Reciprocal", "eq": "Equal", "lt": "Less",
        "le": "LessOrEqual", "gt": "Greater", "ge": "GreaterOrEqual", "logical_and": "And",
        "logical_or": "Or", "logical_xor": "Xor", "logical_not": "Not", "where": "Where",
        "matmul": "MatMul", "isnan": "IsNaN", "isinf": "IsInf", "contiguous": "Identity",
}.items():
    RULES[_ember] = _same(_onnx_op)

RULES["ne"] = lambda c: c.g.node("Not", [c.g.node("Equal", c.ins)])
RULES["rsqrt"] = lambda c: c.g.node("Reciprocal", [c.g.node("Sqrt", c.ins)])
RULES["expm1"] = lambda c: c.g.node("Sub", [c.g.node("Exp", c.ins), c.scalar(1.0)])
RULES["log1p"] = lambda c: c.g.node("Log", [c.g.node("Add", [c.ins[0], c.scalar(1.0)])])


def _remainder(c: _Call) -> str:
    if c.dtypes[0].kind != "f":  # the sign of the divisor, as Python's %
        return c.g.node("Mod", c.ins, fmod=0)
    q = c.g.node("Floor", [c.g.node("Div", c.ins)])
    return c.g.node("Sub", [c.ins[0], c.g.node("Mul", [q, c.ins[1]])])


RULES["remainder"] = _remainder
RULES["cast"] = lambda c: c.g.node("Cast", c.ins, to=onnx_type(c.params["dtype"]))
RULES["reshape"] = lambda c: c.g.node("Reshape", [c.ins[0], c.g.ints(c.params["shape"])])
RULES["permute"] = lambda c: c.g.node("Transpose", c.ins, perm=list(c.params["dims"]))
RULES["expand"] = lambda c: c.g.node("Expand", [c.ins[0], c.g.ints(c.params["shape"])])
RULES["cat"] = lambda c: c.g.node("Concat", c.ins, axis=int(c.params["dim"]))
RULES["softmax"] = lambda c: c.g.node("Softmax", c.ins, axis=int(c.params["dim"]))
RULES["log_softmax"] = lambda c: c.g.node("LogSoftmax", c.ins, axis=int(c.params["dim"]))
RULES["index_select"] = lambda c: c.g.node("Gather", c.ins, axis=int(c.params["dim"]))
RULES["embedding"] = lambda c: c.g.node("Gather", c.ins, axis=0)
RULES["gather"] = lambda c: c.g.node("GatherElements", c.ins, axis=int(c.params["dim"]))
RULES["tril"] = lambda c: c.g.node("Trilu", [c.ins[0], c.g.const(np.int64(c.params["k"]))],
                                   upper=0)
RULES["triu"] = lambda c: c.g.node("Trilu", [c.ins[0], c.g.const(np.int64(c.params["k"]))],
                                   upper=1)
RULES["cumsum"] = lambda c: c.g.node("CumSum", [c.ins[0], c.g.const(np.int64(c.params["dim"]))])
RULES["masked_fill"] = lambda c: c.g.node("Where", [c.ins[1], c.scalar(c.params["value"]),
                                                    c.ins[0]])


def _slice(c: _Call) -> str:
    p = c.params
    axes = list(range(len(p["starts"])))
    return c.g.node("Slice", [c.ins[0], c.g.ints(p["starts"]), c.g.ints(p["stops"]),
                              c.g.ints(axes), c.g.ints(p["steps"])])


def _flip(c: _Call) -> str:
    dims = list(c.params["dims"])
    big = np.iinfo(np.int64).max
    return c.g.node("Slice", [c.ins[0], c.g.ints([-1] * len(dims)),
                              c.g.ints([-big] * len(dims)), c.g.ints(dims),
                              c.g.ints([-1] * len(dims))])


def _clamp(c: _Call) -> str:
    lo, hi = c.params.get("min"), c.params.get("max")
    if lo == 0 and hi is None and c.dtypes[0].kind == "f":
        return c.g.node("Relu", c.ins)
    return c.g.node("Clip", [c.ins[0], c.scalar(lo) if lo is not None else "",
                             c.scalar(hi) if hi is not None else ""])


def _pad(c: _Call) -> str:
    pairs = c.params["pad"]
    nd = len(c.shapes[0])
    pairs = [(0, 0)] * (nd - len(pairs)) + [tuple(p) for p in pairs]
    pads = [p[0] for p in pairs] + [p[1] for p in pairs]
    return c.g.node("Pad", [c.ins[0], c.g.ints(pads), c.scalar(c.params.get("value", 0.0))],
                    mode="constant")


RULES.update(slice=_slice, flip=_flip, clamp=_clamp, pad=_pad)


def _reduce(onnx_op: str) -> Rule:
    def rule(c: _Call) -> str:
        dims = c.params.get("dims")
        axes = list(dims) if dims is not None else list(range(len(c.shapes[0])))
        return c.g.node(onnx_op, [c.ins[0], c.g.ints(axes)],
                        keepdims=int(bool(c.params.get("keepdim", False))))
    return rule


for _ember, _onnx_op in {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax",
                         "min": "ReduceMin", "prod": "ReduceProd"}.items():
    RULES[_ember] = _reduce(_onnx_op)


def _var(c: _Call) -> str:
    dims = list(c.params["dims"]) if c.params.get("dims") is not None else \
        list(range(len(c.shapes[0])))
    n = math.prod(c.shapes[0][d] for d in dims)
    keep = int(bool(c.params.get("keepdim", False)))
    mu = c.g.node("ReduceMean", [c.ins[0], c.g.ints(dims)], keepdims=1)
    d = c.g.node("Sub", [c.ins[0], mu])
    ss = c.g.node("ReduceSum", [c.g.node("Mul", [d, d]), c.g.ints(dims)], keepdims=keep)
    return c.g.node("Div", [ss, c.scalar(max(n - int(c.params.get("correction", 1)), 0))])


def _arg(onnx_op: str) -> Rule:
    def rule(c: _Call) -> str:
        dim = c.params.get("dim")
        x = c.ins[0]
        if dim is None:
            x, dim = c.g.node("Reshape", [x, c.g.ints([-1])]), 0
        return c.g.node(onnx_op, [x], axis=int(dim), keepdims=int(bool(c.params.get(
            "keepdim", False))))
    return rule


RULES.update(var=_var, argmax=_arg("ArgMax"), argmin=_arg("ArgMin"))


def _linear(c: _Call) -> str:
    if len(c.shapes[0]) == 2:
        return c.g.node("Gemm", c.ins, transB=1)
    y = c.g.node("MatMul", [c.ins[0], c.g.node("Transpose", [c.ins[1]], perm=[1, 0])])
    return c.g.node("Add", [y, c.ins[2]]) if len(c.ins) > 2 else y


def _conv(c: _Call) -> str:
    p = c.params
    n = len(c.shapes[0]) - 2
    return c.g.node("Conv", c.ins, strides=list(p["stride"]), pads=list(p["padding"]) * 2,
                    dilations=list(p["dilation"]), group=int(p["groups"]),
                    kernel_shape=list(c.shapes[1][2:2 + n]))


def _conv_transpose(c: _Call) -> str:
    p = c.params
    n = len(c.shapes[0]) - 2
    return c.g.node("ConvTranspose", c.ins, strides=list(p["stride"]),
                    pads=list(p["padding"]) * 2, dilations=list(p["dilation"]),
                    group=int(p["groups"]), output_padding=list(p["output_padding"]),
                    kernel_shape=list(c.shapes[1][2:2 + n]))


def _max_pool(c: _Call) -> str:
    p = c.params
    return c.g.node("MaxPool", c.ins, kernel_shape=list(p["kernel_size"]),
                    strides=list(p["stride"]), pads=list(p["padding"]) * 2,
                    dilations=list(p["dilation"]), ceil_mode=int(bool(p["ceil_mode"])))


def _avg_pool(c: _Call) -> str:
    p = c.params
    return c.g.node("AveragePool", c.ins, kernel_shape=list(p["kernel_size"]),
                    strides=list(p["stride"]), pads=list(p["padding"]) * 2,
                    ceil_mode=int(bool(p["ceil_mode"])),
                    count_include_pad=int(bool(p.get("count_include_pad", True))))


def _adaptive_avg_pool(c: _Call) -> str:
    size = list(c.params["output_size"])
    spatial = list(c.shapes[0][2:])
    if all(s == 1 for s in size):
        return c.g.node("GlobalAveragePool", c.ins)
    if any(i % o for i, o in zip(spatial, size, strict=True)):
        raise NotImplementedError(f"{c.where}: adaptive_avg_pool2d from {spatial} to {size} "
                                  "(not a whole multiple) has no ONNX form")
    k = [i // o for i, o in zip(spatial, size, strict=True)]
    return c.g.node("AveragePool", c.ins, kernel_shape=k, strides=k)


def _layer_norm(c: _Call) -> str:
    p = c.params
    nd = int(p["ndim"])
    norm = list(c.shapes[0][-nd:])
    ins = list(c.ins)
    scale = ins[1] if p.get("weight") else c.g.const(np.ones(norm, c.dtypes[0]))
    bias = ins[1 + bool(p.get("weight"))] if p.get("bias") else c.g.const(np.zeros(
        norm, c.dtypes[0]))
    return c.g.node("LayerNormalization", [ins[0], scale, bias], axis=-nd,
                    epsilon=float(p["eps"]))


def _gelu(c: _Call) -> str:
    x = c.ins[0]
    if c.params.get("approximate", "none") == "tanh":
        inner = c.g.node("Mul", [c.g.node("Add", [x, c.g.node("Mul", [
            c.g.node("Mul", [c.g.node("Mul", [x, x]), x]), c.scalar(0.044715)])]),
            c.scalar(math.sqrt(2.0 / math.pi))])
        t = c.g.node("Tanh", [inner])
    else:
        t = c.g.node("Erf", [c.g.node("Mul", [x, c.scalar(1.0 / math.sqrt(2.0))])])
    return c.g.node("Mul", [c.g.node("Mul", [x, c.scalar(0.5)]),
                            c.g.node("Add", [t, c.scalar(1.0)])])


def _sdpa(c: _Call) -> str:
    p = c.params
    q, k, v = c.ins[:3]
    nd = len(c.shapes[1])
    perm = [*range(nd - 2), nd - 1, nd - 2]
    s = c.g.node("Mul", [c.g.node("MatMul", [q, c.g.node("Transpose", [k], perm=perm)]),
                         c.scalar(float(p["scale"]))])
    if p.get("mask"):
        m = c.ins[3]
        if c.dtypes[3].kind == "b":
            s = c.g.node("Where", [m, s, c.scalar(-math.inf)])
        else:
            s = c.g.node("Add", [s, m])
    if p.get("causal"):
        L, S = c.shapes[0][-2], c.shapes[1][-2]
        keep = np.tril(np.ones((L, S), dtype=bool))
        s = c.g.node("Where", [c.g.const(keep), s, c.scalar(-math.inf)])
    return c.g.node("MatMul", [c.g.node("Softmax", [s], axis=-1), v])


def _interpolate(c: _Call) -> str:
    p = c.params
    mode = p["mode"]
    sizes = list(c.shapes[0][:2]) + list(p["size"])
    empty = c.g.const(np.zeros(0, np.float32))
    if mode == "nearest":
        return c.g.node("Resize", [c.ins[0], "", empty, c.g.ints(sizes)], mode="nearest",
                        coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    if mode in ("linear", "bilinear"):
        coord = "align_corners" if p.get("align_corners") else "pytorch_half_pixel"
        return c.g.node("Resize", [c.ins[0], "", empty, c.g.ints(sizes)], mode="linear",
                        coordinate_transformation_mode=coord)
    raise NotImplementedError(f"{c.where}: interpolate mode {mode!r} has no ONNX form here")


def _fused_conv(c: _Call) -> str:
    """`fused_conv2d` back to the nodes the importer fused: Conv, BatchNormalization, Add, Relu."""
    p = c.params
    k = 2 + int(p["bias"])
    y = c.g.node("Conv", c.ins[:k], strides=list(p["stride"]), pads=list(p["padding"]) * 2,
                 dilations=list(p["dilation"]), group=int(p["groups"]),
                 kernel_shape=list(c.shapes[1][2:4]))
    if p["norm"]:
        y = c.g.node("BatchNormalization", [y, *c.ins[k:k + 4]], epsilon=float(p["eps"]))
    if p["residual"]:
        y = c.g.node("Add", [y, c.ins[-1]])
    return c.g.node("Relu", [y]) if p["relu"] else y


RULES["fused_conv2d"] = _fused_conv
RULES.update(linear=_linear, conv1d=_conv, conv2d=_conv, conv_transpose1d=_conv_transpose,
             conv_transpose2d=_conv_transpose, max_pool2d=_max_pool,
             max_pool2d_values=_max_pool, avg_pool2d=_avg_pool,
             adaptive_avg_pool2d=_adaptive_avg_pool, layer_norm=_layer_norm, gelu=_gelu,
             scaled_dot_product_attention=_sdpa, interpolate=_interpolate)


# -- recurrent steps (nn.LSTM / nn.GRU's fused kernels), unrolled over the steps ---------------

def _rnn_step(c: _Call, kind: str, gates_x: str, state: str, hidden: int) -> str:
    """One step of PyTorch's LSTM (state ``[h, c]``) or GRU (state ``h``) as ONNX nodes."""
    g = c.g
    hh = g.node("MatMul", [g.node("Slice", [state, g.ints([0]), g.ints([hidden]),
                                            g.ints([1])]) if kind == "lstm" else state,
                           g.node("Transpose", [c.ins[2]], perm=[1, 0])])
    if c.params.get("bias"):
        hh = g.node("Add", [hh, c.ins[3]])
    n = 4 if kind == "lstm" else 3
    xs = [g.name("gate") for _ in range(n)]
    g.node("Split", [gates_x], xs, axis=1, num_outputs=n)
    if kind == "lstm":
        hs = [g.name("gate") for _ in range(n)]
        g.node("Split", [hh], hs, axis=1, num_outputs=n)
        i, f, gg, o = (g.node("Add", [x, h]) for x, h in zip(xs, hs, strict=True))
        prev_c = g.node("Slice", [state, g.ints([hidden]), g.ints([2 * hidden]), g.ints([1])])
        cell = g.node("Add", [g.node("Mul", [g.node("Sigmoid", [f]), prev_c]),
                              g.node("Mul", [g.node("Sigmoid", [i]), g.node("Tanh", [gg])])])
        h = g.node("Mul", [g.node("Sigmoid", [o]), g.node("Tanh", [cell])])
        return g.node("Concat", [h, cell], axis=1)
    hs = [g.name("gate") for _ in range(n)]
    g.node("Split", [hh], hs, axis=1, num_outputs=n)
    r = g.node("Sigmoid", [g.node("Add", [xs[0], hs[0]])])
    z = g.node("Sigmoid", [g.node("Add", [xs[1], hs[1]])])
    cand = g.node("Tanh", [g.node("Add", [xs[2], g.node("Mul", [r, hs[2]])])])
    # h' = (1 - z) * n + z * h = n + z * (h - n)
    return g.node("Add", [cand, g.node("Mul", [z, g.node("Sub", [state, cand])])])


def _rnn_cell(kind: str) -> Rule:
    def rule(c: _Call) -> str:
        hidden = c.shapes[2][1]
        return _rnn_step(c, kind, c.ins[0], c.ins[1], hidden)
    return rule


def _rnn_layer(kind: str) -> Rule:
    def rule(c: _Call) -> str:
        steps, hidden = c.shapes[0][0], c.shapes[2][1]
        state, outs = c.ins[1], [""] * steps
        order = range(steps - 1, -1, -1) if c.params.get("reverse") else range(steps)
        for t in order:
            x = c.g.node("Gather", [c.ins[0], c.g.const(np.asarray(t, np.int64))], axis=0)
            state = _rnn_step(c, kind, x, state, hidden)
            outs[t] = c.g.node("Unsqueeze", [state, c.g.ints([0])])
        return c.g.node("Concat", outs, axis=0)
    return rule


RULES["lstm_cell"], RULES["gru_cell"] = _rnn_cell("lstm"), _rnn_cell("gru")
RULES["lstm_layer"], RULES["gru_layer"] = _rnn_layer("lstm"), _rnn_layer("gru")


# -- tracing ------------------------------------------------------------------------------------

def export(module: Any, example_inputs: Tensor | Sequence[Tensor], path: str | os.PathLike[str],
           *, input_names: Sequence[str] | None = None,
           output_names: Sequence[str] | None = None, dynamic_batch: bool = False) -> None:
    """Write ``module`` (or any function of tensors) as an ONNX file of opset 18.

    The module is traced on ``example_inputs`` in eval mode without gradients, on a primitive
    device (``cpu``, or ``autodiff<cpu>``: a ``fusion<...>`` stack records fused groups, not
    ops).  Parameters and buffers become initializers under their ``state_dict`` names.  The
    shapes are those of the example inputs; with ``dynamic_batch=True`` the first axis of every
    input and output is a dimension named ``batch``: the module is traced a second time with
    one more row, the shape parameters that follow the batch size are written so they do
    (a ``-1`` in a reshape), anything else that depends on it is an error, and the file is run
    by `ember.onnx.load` at the second batch size and compared before it is written.  The file
    is checked with ``onnx.checker``.

    Examples
    --------
    >>> import ember, ember.onnx, tempfile, os
    >>> from ember import nn
    >>> path = os.path.join(tempfile.mkdtemp(), "mlp.onnx")
    >>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    >>> ember.onnx.export(model, ember.randn((3, 4)), path, dynamic_batch=True)
    >>> ember.onnx.load(path)(ember.ones((5, 4))).shape
    (5, 2)
    """
    from ._load import _onnx

    onnx = _onnx()
    inputs = [example_inputs] if isinstance(example_inputs, Tensor) else list(example_inputs)
    if not inputs or not all(isinstance(t, Tensor) for t in inputs):
        raise TypeError("ember.onnx.export: example_inputs must be a tensor or a sequence of "
                        "tensors")
    dev = inputs[0].device
    if "fusion" in str(dev):
        raise ValueError(f"ember.onnx.export: trace on a device without fusion (got {dev}): "
                         "fusion<...> records fused groups, not ops; move the module and "
                         "inputs to cpu")
    table = {id(k): op for op, k in dev.base.backend.kernels.items()}
    tr, outputs = _trace_call(module, inputs)
    overrides: dict[int, dict[str, Any]] | None = None
    if dynamic_batch:
        if any(t.ndim == 0 for t in inputs):
            raise ValueError("ember.onnx.export: dynamic_batch needs inputs with a first axis")
        with ember.no_grad():
            bigger = [ember.cat([t.detach(), t.detach()[:1]], 0) for t in inputs]
        tr2, outputs2 = _trace_call(module, bigger)
        overrides = _batch_overrides(tr, tr2, table, _input_slots(tr, inputs),
                                     _input_slots(tr2, bigger))
        batch_out = [a.shape[:1] != b.shape[:1] for a, b in zip(outputs, outputs2, strict=True)]
    model = _build(onnx, tr, table, module, inputs, outputs, input_names, output_names,
                   overrides, batch_out if dynamic_batch else None)
    onnx.checker.check_model(model, full_check=True)
    if dynamic_batch:
        _check_batch(model, bigger, outputs2)
    onnx.save(model, os.fspath(path))


def _trace_call(module: Any, inputs: list[Tensor]) -> tuple[_trace.Tracer, list[Tensor]]:
    training = getattr(module, "training", None)
    if training is not None:
        module.eval()
    tr = _trace.Tracer()
    _trace.TRACE.append(tr)
    try:
        with ember.no_grad():
            result = module(*inputs)
    finally:
        _trace.TRACE.remove(tr)
        if training:
            module.train()
    outputs = [result] if isinstance(result, Tensor) else list(result)
    if not all(isinstance(t, Tensor) for t in outputs):
        raise TypeError("ember.onnx.export: the module must return a tensor or a tuple of "
                        "tensors")
    return tr, outputs


def _input_slots(tr: _trace.Tracer, inputs: list[Tensor]) -> set[int]:
    slots = (tr.slot.get(id(_trace.peek_payload(t))) for t in inputs)
    return {s for s in slots if s is not None}


def _batch_overrides(tr: _trace.Tracer, tr2: _trace.Tracer, table: dict[int, Any],
                     ins1: set[int], ins2: set[int]) -> dict[int, dict[str, Any]]:
    """Per traced call, the parameters rewritten to follow the batch size (traced at B and
    B+1); an error where a difference cannot be expressed."""
    def name(call: Any) -> str:
        op = table.get(id(call.fn))
        return op.name if op is not None else getattr(call.fn, "__name__", "?")

    if len(tr.calls) != len(tr2.calls) or any(a.fn is not b.fn for a, b in
                                               zip(tr.calls, tr2.calls, strict=True)):
        raise NotImplementedError("ember.onnx.export: the module runs different ops at two "
                                  "batch sizes; export it with dynamic_batch=False")
    out: dict[int, dict[str, Any]] = {}
    big = np.iinfo(np.int64).max
    for k, (a, b) in enumerate(zip(tr.calls, tr2.calls, strict=True)):
        op = name(a)
        for i1, i2 in zip(a.ins, b.ins, strict=True):
            s1, s2 = np.shape(tr.values[i1]), np.shape(tr2.values[i2])
            if i1 in tr.external and i1 not in ins1 and i2 not in ins2 and s1 != s2:
                raise NotImplementedError(
                    f"ember.onnx.export: {op} at {a.where} reads a tensor made outside the "
                    f"traced ops whose shape follows the batch ({s1} vs {s2}); export with "
                    "dynamic_batch=False")
        changed = {key for key in a.params if a.params[key] != b.params.get(key)}
        if not changed:
            continue
        p = dict(a.params)
        in_shape = np.shape(tr.values[a.ins[0]]) if a.ins else ()
        if op == "reshape" and changed == {"shape"}:
            diff = [j for j, (x, y) in enumerate(zip(a.params["shape"], b.params["shape"],
                                                     strict=True)) if x != y]
            if len(diff) == 1 and -1 not in a.params["shape"]:
                p["shape"] = tuple(-1 if j == diff[0] else d
                                   for j, d in enumerate(a.params["shape"]))
                out[k] = p
                continue
        elif op == "expand" and changed == {"shape"}:
            shape = list(a.params["shape"])
            lead = len(shape) - len(in_shape)
            diff = [j for j, (x, y) in enumerate(zip(shape, b.params["shape"], strict=True))
                    if x != y]
            if all(j >= lead and in_shape[j - lead] == shape[j] for j in diff):
                for j in diff:  # the input carries the batch there: Expand keeps it
                    shape[j] = 1
                p["shape"] = tuple(shape)
                out[k] = p
                continue
        elif op == "slice" and changed == {"stops"}:
            stops = list(a.params["stops"])
            ok = True
            for j, (x, y) in enumerate(zip(stops, b.params["stops"], strict=True)):
                if x != y:
                    ok = ok and x == in_shape[j]  # to the end of the axis
                    stops[j] = big
            if ok:
                p["stops"] = tuple(stops)
                out[k] = p
                continue
        raise NotImplementedError(
            f"ember.onnx.export: {op} at {a.where} has parameters that follow the batch size "
            f"({', '.join(f'{key}={a.params[key]} vs {b.params[key]}' for key in sorted(changed))})"
            "; export with dynamic_batch=False")
    return out


def _check_batch(model: Any, inputs: list[Tensor], want: list[Tensor]) -> None:
    """Run the written graph at the second batch size with ember's importer."""
    from ._load import OnnxModel

    m = OnnxModel(model, "<export>", inputs[0].device)
    with ember.no_grad():
        got = m(*inputs)
    got = got if isinstance(got, tuple) else (got,)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        gn, wn = g.numpy(), w.numpy()
        tol = 1e-4 * (1 + float(np.max(np.abs(wn)))) if wn.size else 0.0
        if gn.shape != wn.shape or (wn.size and float(np.max(np.abs(gn - wn))) > tol):
            raise NotImplementedError(
                f"ember.onnx.export: with a dynamic batch, output {i} of the written graph "
                f"differs from the module at batch {inputs[0].shape[0]}; the module depends on "
                "the batch size in a way the export cannot express: use dynamic_batch=False")


def _build(onnx: Any, tr: _trace.Tracer, table: dict[int, Any], module: Any,
           inputs: list[Tensor], outputs: list[Tensor], input_names: Sequence[str] | None,
           output_names: Sequence[str] | None,
           overrides: dict[int, dict[str, Any]] | None = None,
           batch_out: list[bool] | None = None) -> Any:
    from onnx import helper, numpy_helper

    g = _Graph(onnx)
    in_names = list(input_names or [f"input_{i}" if len(inputs) > 1 else "input"
                                    for i in range(len(inputs))])
    out_names = list(output_names or [f"output_{i}" if len(outputs) > 1 else "output"
                                      for i in range(len(outputs))])
    slot_of = tr.slot
    names: dict[int, str] = {}       # slot -> ONNX value name
    dynamic: set[int] = set()        # slots computed from the inputs or the parameters
    for name, t in zip(in_names, inputs, strict=True):
        s = slot_of.get(id(_trace.peek_payload(t)))
        if s is not None:
            names[s] = name
            dynamic.add(s)
    named = {}
    if hasattr(module, "named_parameters"):
        named = {**dict(module.named_buffers()), **dict(module.named_parameters())}
    for pname, t in named.items():
        s = slot_of.get(id(_trace.peek_payload(t)))
        if s is not None and s not in names:
            names[s] = pname
            g.inits.append(numpy_helper.from_array(np.asarray(tr.values[s]), pname))
            dynamic.add(s)
    unusable: dict[int, str] = {}
    for k, call in enumerate(tr.calls):
        op = table.get(id(call.fn))
        opname = op.name if op is not None else getattr(call.fn, "__name__", "?")
        if op is None or not any(i in dynamic for i in call.ins):
            if op is None and any(i in dynamic for i in call.ins):
                raise NotImplementedError(f"ember.onnx.export: a kernel ({opname}) at "
                                          f"{call.where} is not an op of {inputs[0].device}")
            continue  # computed from constants only: folded (its traced value is used)
        for i in call.ins:
            if i in unusable:
                raise NotImplementedError(f"ember.onnx.export: {opname} at {call.where} "
                                          f"reads the {unusable[i]}, which has no ONNX form")
            if i not in names:  # a constant: a folded value or a tensor the module holds
                names[i] = g.const(np.asarray(tr.values[i]))
        rule = RULES.get(opname)
        if rule is None:
            raise NotImplementedError(
                f"ember.onnx.export: op {opname!r} at {call.where} has no ONNX form "
                f"(exportable ops: {', '.join(sorted(RULES))})")
        vals = [np.asarray(tr.values[i]) for i in call.ins]
        c = _Call(g, opname, [names[i] for i in call.ins], [v.shape for v in vals],
                  [v.dtype for v in vals], dict((overrides or {}).get(k, call.params)),
                  tuple(np.asarray(tr.values[call.outs[0]]).shape), call.where)
        names[call.outs[0]] = rule(c)
        dynamic.add(call.outs[0])
        for extra in call.outs[1:]:
            unusable[extra] = f"extra output of {opname}"
            dynamic.add(extra)
    graph_outputs = []
    for j, (name, t) in enumerate(zip(out_names, outputs, strict=True)):
        s = slot_of.get(id(_trace.peek_payload(t)))
        if s is None or s not in names:
            src = g.const(t.numpy())  # the module returned a constant
        else:
            src = names[s]
        g.node("Identity", [src], [name])
        arr = t.numpy()
        graph_outputs.append(helper.make_tensor_value_info(name, onnx_type(arr.dtype),
                                                           _dims(arr.shape, batch_out is not None
                                                                 and batch_out[j])))
    graph_inputs = [helper.make_tensor_value_info(n, onnx_type(t.numpy().dtype),
                                                  _dims(t.shape, overrides is not None))
                    for n, t in zip(in_names, inputs, strict=True)]
    graph = helper.make_graph(g.nodes, type(module).__name__, graph_inputs, graph_outputs,
                              g.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", EXPORT_OPSET)],
                             producer_name="ember", ir_version=8)


def _dims(shape: Sequence[int], batch: bool) -> list[Any]:
    """A value's declared dims: the first is ``batch`` where it follows the batch size."""
    dims: list[Any] = list(shape)
    if batch and dims:
        dims[0] = "batch"
    return dims
