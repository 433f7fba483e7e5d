"""`load`: an ONNX file as an `ember.nn.Module` that runs its graph with ember ops.

Loading checks every node before anything is built (an unsupported op is one error listing
them all), decodes attributes once, folds the nodes that depend only on constants, and places
floating-point initializers as parameters under the graph's own dotted names
(``layer1.0.conv1.weight``), so ``state_dict()`` reads like the exporter's.  Running walks the
nodes in order: a node whose inputs are all host values (constants, and shapes read from
tensors) computes on the host with numpy; every other node runs ember ops on the model's
device stack, so the imported model trains under ``autodiff<...>`` and fuses under
``fusion<...>``.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ember import Device, Tensor, device as _device, tensor as _tensor
from ember.nn import Module, Parameter

# register the op rules (_ndconv and _carried import the modules whose rules they wrap)
from . import (  # noqa: F401
    _carried,
    _control,
    _elementwise,
    _fuse,
    _linattn,
    _misc,
    _mldomains,
    _ndconv,
    _nn,
    _preview,
    _quant,
    _random,
    _reduce,
    _resize,
    _rnn,
    _sample,
    _shape,
    _signal,
    _strings,
)
from ._dtypes import FROM_ONNX, ember_dtype
from ._registry import MODULE, MODULES, OPS, OPSET_MAX, OPSET_MIN, Node, Run, is_host

__all__ = ["OnnxModel", "UnsupportedOperatorError", "load"]


class UnsupportedOperatorError(NotImplementedError):
    """The graph uses operators ember cannot import (the message lists each node)."""


def _onnx() -> Any:
    try:
        import onnx
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError("ember.onnx needs the onnx package: pip install 'ember[onnx]'") \
            from None
    return onnx


# -- reading the file ---------------------------------------------------------------------------

def _read(path: Any) -> tuple[Any, str]:
    onnx = _onnx()
    if isinstance(path, onnx.ModelProto):
        return path, "<ModelProto>"
    where = os.fspath(path)
    if not os.path.isfile(where):
        raise FileNotFoundError(f"ember.onnx.load: no such file: {where!r}")
    try:
        model = onnx.load(where)
    except Exception as exc:
        raise ValueError(f"ember.onnx.load: {where!r} is not a readable ONNX model: "
                         f"{type(exc).__name__}: {exc}") from exc
    return model, where


def _opset(model: Any, where: str) -> tuple[Any, int]:
    """The model (converted from opset 6 to 7 where needed) and its default-domain opset."""
    versions = {o.domain: o.version for o in model.opset_import}
    v = versions.get("", versions.get("ai.onnx"))
    if v is None and versions and set(versions) <= set(_mldomains.DOMAIN_OPS):
        v = OPSET_MAX  # only extra domains ember reads: no default-domain node can appear
    if v is None:
        others = ", ".join(f"{d!r} (version {n})" for d, n in versions.items()) or "none"
        raise UnsupportedOperatorError(
            f"ember.onnx.load: {where} imports no default-domain opset, only the domain(s) "
            f"{others}; ember imports operators of the default domain ('' / 'ai.onnx'), and "
            f"{', '.join(sorted(_mldomains.DOMAIN_OPS))} (some operators)")
    if v == 6:
        # Note: opset 7 changed only broadcasting (Add, Mul, Gemm, ... lose `broadcast`/`axis`),
        # BatchNormalization/Dropout's `is_test` and AveragePool's `count_include_pad`;
        # onnx's converter rewrites those nodes exactly (the version-6 semantics spelled in
        # opset 7), so version-6 files are read through it.
        from onnx import version_converter

        try:
            model = version_converter.convert_version(model, 7)
        except Exception as exc:
            raise ValueError(f"ember.onnx.load: {where} uses opset 6, which ember reads "
                             "through onnx.version_converter (to opset 7); it failed: "
                             f"{type(exc).__name__}: {exc}") from exc
        v = 7
    if not OPSET_MIN <= v <= OPSET_MAX:
        raise ValueError(f"ember.onnx.load: {where} uses opset {v}; ember reads opsets "
                         f"6-{OPSET_MAX} (6 through onnx.version_converter; "
                         "onnx.version_converter.convert_version can move a model between "
                         "opsets)")
    return model, int(v)


def _attrs(onnx: Any, node: Any, opset: int, where: str) -> dict[str, Any]:
    from onnx import numpy_helper

    out: dict[str, Any] = {}
    for a in node.attribute:
        if a.type == onnx.AttributeProto.TENSOR:
            out[a.name] = numpy_helper.to_array(a.t)
            if a.t.data_type in _carried.CARRIER:
                out[a.name] = _carried.to_carrier(out[a.name], a.t.data_type)
        elif a.type == onnx.AttributeProto.GRAPH and node.op_type in OPS and \
                (node.domain or "") in ("", "ai.onnx", *_mldomains.DOMAIN_OPS):
            out[a.name] = _control.Subgraph(a.g, opset, where)  # its nodes checked there
        elif a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            out[a.name] = a  # a subgraph of an operator ember does not import: refused
        else:
            v = onnx.helper.get_attribute_value(a)
            if isinstance(v, bytes):
                v = v.decode()
            elif isinstance(v, list):
                v = [x.decode() if isinstance(x, bytes) else x for x in v]
            out[a.name] = v
    return out


def _constant(node: Node) -> np.ndarray:
    at = node.attrs
    if "value" in at:
        return np.asarray(at["value"])
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in at:
            return np.asarray(at[key], dtype=dtype)
    raise NotImplementedError(f"{node.where()}: a Constant with attributes {sorted(at)} is "
                              "not supported (value, value_float(s), value_int(s))")


def _check(nodes: list[Node], raw_nodes: list[Any], where: str) -> None:
    """Every node must be supported; one error lists each one that is not: an operator of
    another domain, an operator ember does not import, one the opset does not define, an
    attribute the operator's schema at that opset does not define, or a subgraph."""
    from onnx import TypeProto, defs

    bad = []
    for n, raw in zip(nodes, raw_nodes, strict=True):
        domain = raw.domain or ""
        preview = n.op_type in _mldomains.DOMAIN_OPS.get(domain, ())
        if domain not in ("", "ai.onnx") and not preview:
            bad.append(f"{n.op_type} (domain {domain!r}) at node {n.name!r}")
            continue
        if n.op_type not in OPS and n.op_type != "Constant":
            bad.append(f"{n.op_type} at node {n.name!r}")
            continue
        try:
            # a preview operator: its domain's newest schema
            schema = defs.get_schema(n.op_type, 1000, domain) if preview else \
                defs.get_schema(n.op_type, n.opset, "")
        except Exception:
            bad.append(f"{n.op_type} at node {n.name!r} (not defined at opset {n.opset})")
            continue
        unknown = sorted(set(n.attrs) - set(schema.attributes))
        if unknown:
            bad.append(f"{n.op_type} at node {n.name!r} (attribute(s) {', '.join(unknown)} "
                       f"not defined for {n.op_type}-{schema.since_version})")
        elif any(not isinstance(v, str | int | float | list | np.ndarray | _control.Subgraph
                                | TypeProto) for v in n.attrs.values()):
            bad.append(f"{n.op_type} at node {n.name!r} (a subgraph attribute)")
    if bad:
        supported = ", ".join(sorted([*OPS, "Constant"]))
        raise UnsupportedOperatorError(
            f"ember.onnx.load: {where} (opset {nodes[0].opset}) uses operators ember cannot "
            f"import: {'; '.join(bad)}. Supported ops: {supported}")


def _tensor_of(t: Any) -> Any:
    """The tensor type inside a tensor, sequence-of-tensor or optional type (None: another
    kind, a map or a sparse tensor)."""
    which = t.WhichOneof("value")
    if which == "tensor_type":
        return t.tensor_type
    if which == "sequence_type":
        return _tensor_of(t.sequence_type.elem_type)
    if which == "optional_type":
        return _tensor_of(t.optional_type.elem_type)
    return None


def _check_values(g: Any, where: str) -> None:
    """Graph inputs and outputs must be tensors of an ember dtype, or sequences or optionals
    of them; maps and sparse tensors are refused naming the value."""
    for kind, values in (("input", g.input), ("output", g.output)):
        for v in values:
            t = v.type
            which = t.WhichOneof("value")
            if which is None:  # no type declared: what the node computes
                continue
            tt = _tensor_of(t)
            if tt is None:
                kinds = {"map_type": "a map", "sparse_tensor_type": "a sparse tensor"}
                raise TypeError(f"ember.onnx.load: {where}: graph {kind} {v.name!r} is "
                                f"{kinds.get(which or '', 'of no tensor type')}; ember "
                                "imports graphs of tensors, and sequences and optionals of "
                                "tensors (map and sparse values are not supported)")
            if tt.elem_type and tt.elem_type not in _carried.CARRIER and \
                    tt.elem_type != _strings.STRING:  # 0: not declared
                ember_dtype(tt.elem_type, f"ember.onnx.load: {where}: graph "
                            f"{kind} {v.name!r}")
    for init in g.initializer:
        if init.data_type not in _carried.CARRIER and init.data_type != _strings.STRING:
            ember_dtype(init.data_type, f"ember.onnx.load: {where}: initializer "
                        f"{init.name!r}")


# -- which initializers are trained ----------------------------------------------------------------

#: ops whose outputs carry no gradient (booleans, integers, shapes, step functions)
_NO_GRADIENT = frozenset({
    "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor",
    "IsNaN", "IsInf", "Shape", "Size", "ArgMax", "ArgMin", "Sign", "Floor", "Ceil", "Round",
    "OneHot", "Range", "ConstantOfShape"})
#: input positions that are indices or conditions (no gradient flows into them)
_INDEX_INPUTS = {"Where": (0,), "Gather": (1,), "GatherElements": (1,), "GatherND": (1,),
                 "ScatterND": (1,), "ScatterElements": (1,), "TopK": (1,)}
_FLOAT_TYPES = (1, 10, 11, 16)


def _differentiable(nodes: list[Node], outputs: list[str]) -> set[str]:
    """Values a gradient can reach from the graph's outputs: a floating-point initializer
    among them is a parameter; one that only feeds masks, indices or shapes (a causal-mask
    buffer compared with 0) is a buffer."""
    reach = set(outputs)
    for n in reversed(nodes):
        if not any(o in reach for o in n.outputs) or n.op_type in _NO_GRADIENT:
            continue
        if n.op_type == "Cast" and int(n.attrs.get("to", 1)) not in _FLOAT_TYPES:
            continue
        rule = OPS.get(n.op_type)
        skip = set(_INDEX_INPUTS.get(n.op_type, ()))
        if rule is not None:
            skip |= set(rule.host_inputs) | set(rule.state_inputs)
        reach.update(name for i, name in enumerate(n.inputs) if name and i not in skip)
        reach.update(n.reads()[len(n.inputs):])  # what its subgraphs read
    return reach


# -- naming parameters after the graph ------------------------------------------------------------

class Scope(Module):
    """A namespace in an imported model's parameter tree (``layer1`` of ``layer1.0.weight``);
    it has no computation of its own."""


def _part(text: str) -> str:
    s = re.sub(r"[^0-9A-Za-z_]", "_", text)
    return s or "_"


def _place(root: Module, name: str, taken: set[str]) -> tuple[Module, str]:
    """The module and attribute that hold the initializer ``name``."""
    parts = [_part(p) for p in name.split(".")]
    mod = root
    for p in parts[:-1]:
        child = mod._modules.get(p)
        if child is None:
            if p in mod._parameters or p in mod._buffers:
                break
            child = Scope()
            mod.add_module(p, child)
        mod = child
    else:
        leaf = parts[-1]
        if leaf not in mod._modules and leaf not in mod._parameters and \
                leaf not in mod._buffers and leaf not in ("forward", "training") and \
                not hasattr(type(mod), leaf):  # a value named "half" is no Module.half
            full = ".".join(parts)
            taken.add(full)
            return mod, leaf
    flat = _part(name.replace(".", "_"))
    while flat in taken or flat in root._modules or hasattr(type(root), flat):
        flat += "_"
    taken.add(flat)
    return root, flat


# -- the module ---------------------------------------------------------------------------------

class OnnxModel(Module):
    """An imported ONNX graph.  Call it with the graph's inputs (positionally, or by name as
    keywords); it returns a tensor, or a tuple for several outputs.

    Attributes ``input_names``, ``output_names`` and ``opset`` describe the graph.
    """

    def __init__(self, model: Any, where: str, device: Device) -> None:
        super().__init__()
        onnx = _onnx()
        from onnx import numpy_helper

        model, opset = _opset(model, where)
        g = model.graph
        _check_values(g, where)
        nodes = [Node(n.op_type, n.name or f"{n.op_type}_{i}", list(n.input), list(n.output),
                      _attrs(onnx, n, opset, where), opset) for i, n in enumerate(g.node)]
        _check(nodes, list(g.node), where)
        object.__setattr__(self, "opset", opset)
        object.__setattr__(self, "source", where)
        inits = {t.name: numpy_helper.to_array(t) if t.data_type not in _carried.CARRIER
                 else _carried.to_carrier(numpy_helper.to_array(t), t.data_type)
                 for t in g.initializer}
        #: values of the types ember carries in a wider dtype (`_carried`), by name
        carried = _carried.value_types(model)
        object.__setattr__(self, "_types", carried)
        static: dict[str, np.ndarray] = {}
        params: dict[str, np.ndarray] = {}
        trainable = _differentiable(nodes, [v.name for v in g.output])
        for name, arr in inits.items():
            if arr.dtype.kind == "f" and name in trainable and name not in carried:
                params[name] = arr
            else:
                static[name] = arr
        # fold what depends on constants only
        run_nodes: list[Node] = []
        for n in nodes:
            if n.op_type == "Constant":
                static[n.outputs[0]] = _constant(n)
                continue
            rule = OPS[n.op_type]
            ins = [i for i in n.inputs if i]
            if rule.host is not None and ins and all(i in static for i in ins):
                outs = _call_host(rule.host, n, [static[i] if i else None for i in n.inputs])
                for name, v in zip(n.outputs, outs, strict=False):
                    static[name] = _carried.normalize(v, carried[name]) if name in carried \
                        else v
                continue
            run_nodes.append(n)
        run_nodes = _fuse.fuse(run_nodes, [v.name for v in g.output], {**params, **static})
        object.__setattr__(self, "_nodes", run_nodes)
        object.__setattr__(self, "_rules", [_fuse.RULES.get(n.op_type) or OPS[n.op_type]
                                            for n in run_nodes])
        init_names = set(inits)
        inputs = [v for v in g.input if v.name not in init_names]
        object.__setattr__(self, "input_names", [v.name for v in inputs])
        object.__setattr__(self, "output_names", [v.name for v in g.output])
        #: the ONNX element type of each output ember carries in a wider dtype (None: an
        #: ember dtype); `backend` narrows these outputs to it
        object.__setattr__(self, "carried", [carried.get(v.name) for v in g.output])
        object.__setattr__(self, "_input_types", [_value_type(v, where) for v in inputs])
        _own_modules(self, run_nodes, params, device)
        # register what the remaining nodes and the outputs read
        used = {i for n in run_nodes for i in n.reads() if i} | set(self.output_names)
        taken: set[str] = set()
        slots: dict[str, tuple[Module, str]] = {}
        consts: dict[str, tuple[np.ndarray, Module, str]] = {}
        for name, arr in params.items():
            if name in used:
                mod, attr = _place(self, name, taken)
                setattr(mod, attr, Parameter(_tensor(_contiguous(arr),
                                                     device=device)))
                slots[name] = (mod, attr)
        consts_root = Scope()
        for name, arr in static.items():
            if name not in used:
                continue
            if name in inits:
                mod, attr = _place(self, name, taken)
                persistent = True
            else:
                mod, attr = consts_root, _part(name)
                while attr in mod._buffers or hasattr(type(mod), attr):
                    attr += "_"
                persistent = False
            if arr.dtype.kind in "fiub" and arr.dtype in _SUPPORTED_NP:
                mod.register_buffer(attr, _tensor(_contiguous(arr), device=device),
                                    persistent=persistent)
                consts[name] = (arr, mod, attr)
            else:
                consts[name] = (arr, mod, "")
        if consts_root._buffers:
            self.add_module("constants", consts_root)
        object.__setattr__(self, "_slots", slots)
        object.__setattr__(self, "_consts", consts)
        object.__setattr__(self, "_device", device)
        # the last node that reads each value: it is dropped after that
        last: dict[str, int] = {}
        for k, n in enumerate(run_nodes):
            for name in n.reads():
                last[name] = k
        drop: list[list[str]] = [[] for _ in run_nodes]
        for name, at in last.items():
            if name not in self.output_names:
                drop[at].append(name)
        object.__setattr__(self, "_drop", drop)

    # -- running -------------------------------------------------------------------------------

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        names = self.input_names
        if len(args) > len(names):
            raise TypeError(f"the ONNX model takes {len(names)} input(s) ({', '.join(names)}), "
                            f"got {len(args)}")
        given: dict[str, Any] = dict(zip(names, args, strict=False))
        for k, v in kwargs.items():
            if k not in names:
                raise TypeError(f"the ONNX model has no input {k!r} (inputs: "
                                f"{', '.join(names)})")
            if k in given:
                raise TypeError(f"input {k!r} given twice")
            given[k] = v
        missing = [n for n in names if n not in given]
        if missing:
            raise TypeError(f"the ONNX model is missing input(s) {', '.join(missing)}")
        dev = self._run_device(given)
        values: dict[str, Any] = {}
        for name, expect in zip(names, self._input_types, strict=True):
            v = given[name]
            if name in self._types and isinstance(v, np.ndarray | np.generic):
                v = _carried.to_carrier(v, self._types[name])  # the narrow type, widened
            values[name] = _check_input(name, v, expect, dev)
        buffers: dict[int, Tensor] = {}
        for name, (arr, mod, attr) in self._consts.items():
            values[name] = arr
            if attr:
                buffers[id(arr)] = getattr(mod, attr)
        for name, (mod, attr) in self._slots.items():
            values[name] = getattr(mod, attr)
        run = Run(dev, buffers)
        run.scope = values
        run.types = self._types
        for step, (node, rule) in enumerate(zip(self._nodes, self._rules, strict=True)):
            xs = [values[i] if i else None for i in node.inputs]
            try:
                if rule.host is not None and all(x is None or is_host(x) for x in xs):
                    outs = _call_host(rule.host, node, xs)
                else:
                    outs = _as_tuple(rule.device(run, node, *_trim(xs)))
            except Exception as exc:
                exc.add_note(f"while running ONNX {node.where()} on {dev}, inputs "
                             + ", ".join(_describe(x) for x in xs))
                raise
            for name, v in zip(node.outputs, outs, strict=False):
                if name:
                    code = self._types.get(name)
                    values[name] = v if code is None else _carried.normalize(v, code)
            for name in self._drop[step]:
                values.pop(name, None)
        results = tuple(_output(run, values[n]) for n in self.output_names)
        return results[0] if len(results) == 1 else results

    def _run_device(self, given: dict[str, Any]) -> Device:
        for v in given.values():
            if isinstance(v, Tensor):
                return v.device
        for _, t in self.named_parameters():
            return t.device
        for _, t in self.named_buffers():
            return t.device
        dev: Device = self._device
        return dev

    def extra_repr(self) -> str:
        return (f"inputs={self.input_names}, outputs={self.output_names}, opset={self.opset}, "
                f"nodes={len(self._nodes)}")


def _own_modules(root: Module, nodes: list[Node], params: dict[str, np.ndarray],
                 device: Device) -> None:
    """Nodes that import as modules of their own (`MODULES`): each module is a child of
    ``root`` named after its node, and the initializers it holds (read by that node only)
    leave the graph's parameters."""
    readers: dict[str, int] = {}
    for n in nodes:
        for name in n.reads():
            readers[name] = readers.get(name, 0) + 1
    for n in nodes:
        build = MODULES.get(n.op_type)
        if build is None:
            continue
        mine = {k: v for k, v in params.items() if k in n.inputs and readers.get(k) == 1
                and k not in getattr(root, "output_names", ())}
        built = build(n, mine, device)
        if built is None:
            continue
        mod, held = built
        name = _part(n.name)
        while name in root._modules or name in root._parameters or name in root._buffers:
            name += "_"
        root.add_module(name, mod)
        n.attrs[MODULE] = mod
        n.inputs = ["" if i in held else i for i in n.inputs]
        for k in held:
            params.pop(k)


_SUPPORTED_NP = {np.dtype(d) for d in ("float16", "float32", "float64", "int8", "int16",
                                       "int32", "int64", "uint8", "bool")}


def _value_type(v: Any, where: str) -> tuple[Any, ...]:
    which = v.type.WhichOneof("value")
    if which in ("sequence_type", "optional_type"):
        inner = getattr(v.type, which).elem_type
        return (which, _value_type(type(v)(name=v.name, type=inner), where))
    tt = v.type.tensor_type
    dtype: Any = ember_dtype(tt.elem_type, f"{where}: input {v.name!r}") \
        if tt.elem_type in FROM_ONNX else _carried.CARRIER.get(tt.elem_type)
    if tt.elem_type == _strings.STRING:
        dtype = "string"  # a numpy array of str, kept on the host
    if not tt.HasField("shape"):
        return dtype, None
    dims: list[Any] = []
    for d in tt.shape.dim:
        dims.append(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?"))
    return dtype, dims


def _check_input(name: str, v: Any, expect: tuple[Any, ...], dev: Device) -> Any:
    if expect[0] == "sequence_type":
        if not isinstance(v, list | tuple):
            raise TypeError(f"input {name!r}: expected a sequence (a list of tensors), got "
                            f"{type(v).__name__}")
        return [_check_input(f"{name}[{i}]", e, expect[1], dev) for i, e in enumerate(v)]
    if expect[0] == "optional_type":
        return _control.EMPTY if v is None else _check_input(name, v, expect[1], dev)
    dtype, dims = expect
    if dtype == "string":  # strings stay on the host (`_strings`)
        a = np.asarray(v) if isinstance(v, np.ndarray | np.generic | list | tuple) else None
        if a is None or a.dtype.kind not in "OUS":
            raise TypeError(f"input {name!r}: expected strings (a numpy array of str), got "
                            f"{type(v).__name__ if a is None else a.dtype}")
        v = a.astype(object)
    elif isinstance(v, np.ndarray | np.generic):
        a = np.asarray(v)
        v = _tensor(a if a.flags.c_contiguous else a.copy(), device=dev)
    if not isinstance(v, Tensor) and dtype != "string":
        raise TypeError(f"input {name!r}: expected an ember.Tensor or numpy array, got "
                        f"{type(v).__name__}")
    if dtype is not None and dtype != "string" and v.dtype != dtype:
        raise TypeError(f"input {name!r}: expected dtype {dtype.name}, got {v.dtype.name}")
    if dims is not None:
        ok = len(dims) == v.ndim and all(isinstance(d, str) or d == s
                                         for d, s in zip(dims, v.shape, strict=False))
        if not ok:
            shown = "[" + ", ".join(str(d) for d in dims) + "]"
            raise ValueError(f"input {name!r}: expected shape {shown}, got {list(v.shape)}")
    return v


def _contiguous(a: np.ndarray) -> np.ndarray:
    return a if a.flags.c_contiguous else a.copy()


def _trim(xs: list[Any]) -> list[Any]:
    while xs and xs[-1] is None:
        xs = xs[:-1]
    return xs


def _as_tuple(out: Any) -> tuple[Any, ...]:
    return out if isinstance(out, tuple) else (out,)


def _call_host(fn: Any, node: Node, xs: Sequence[Any]) -> tuple[Any, ...]:
    out = fn(node, *_trim(list(xs)))
    return tuple(np.asarray(o) for o in _as_tuple(out))


def _output(run: Run, v: Any) -> Any:
    """A graph output: a tensor, a list of them (a sequence), or None (an empty optional)."""
    if isinstance(v, list):
        return [run.tensor(e) for e in v]
    if is_host(v) and v.dtype.kind in "OUS":
        return v  # strings: a numpy array (ember has no string dtype)
    return None if v is _control.EMPTY else run.tensor(v)


def _describe(x: Any) -> str:
    if x is None:
        return "none"
    if isinstance(x, list):
        return f"sequence of {len(x)}"
    if x is _control.EMPTY:
        return "empty optional"
    kind = "host" if is_host(x) else "tensor"
    dtype = x.dtype if is_host(x) else x.dtype.name
    return f"{kind} {dtype} {list(x.shape)}"


def load(path: str | os.PathLike[str] | Any, device: str | Device = "cpu") -> OnnxModel:
    """Import an ONNX model as an `ember.nn.Module` on ``device`` (any device stack).

    Floating-point initializers become parameters named after the graph (so
    ``state_dict()`` is readable and the model can be fine-tuned); integer initializers and
    constants are buffers.  An unsupported operator raises `UnsupportedOperatorError` naming
    each offending node before anything is built.

    Examples
    --------
    >>> import ember, ember.onnx, onnx, tempfile, os
    >>> from onnx import helper, TensorProto
    >>> g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
    ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    >>> path = os.path.join(tempfile.mkdtemp(), "relu.onnx")
    >>> onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    >>> ember.onnx.load(path)(ember.tensor([-1.0, 2.0])).tolist()
    [0.0, 2.0]
    """
    with _small_pages():
        model, where = _read(path)
        return OnnxModel(model, where, _device(device))


@contextlib.contextmanager
def _small_pages() -> Iterator[None]:
    """numpy's advice that its large arrays use transparent huge pages, off while the
    initializers are copied.  Where the kernel compacts memory to find a huge page on the
    first touch (``defrag`` set to ``madvise``), that fault cost 5x the copy: a BERT-base's
    440 MB of weights took 2.6 s to copy with the advice and 0.6 s without (2-core VM,
    2026-12-08, load average 6).  The arrays already made keep their pages."""
    try:
        from numpy._core import multiarray as ma
    except ImportError:  # pragma: no cover - numpy 1.x
        from numpy.core import multiarray as ma  # type: ignore[no-redef]
    switch = getattr(ma, "_set_madvise_hugepage", None)
    if switch is None:  # pragma: no cover - a numpy without the switch
        yield
        return
    before = switch(False)
    try:
        yield
    finally:
        switch(before)
