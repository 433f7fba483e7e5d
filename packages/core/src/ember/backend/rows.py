"""Row programs: reductions over the inner (row) axis in the kernel IR, and the row kernels
built from them.

A row program computes, for every row of ``[R, N]`` inputs, a few reductions over the row of
elementwise expressions (the *prologue*) and elementwise expressions that use their results
(the *epilogue*).  It is a DAG of `ember.backend.ir` values with three more primitives:
``reduce`` (``arg``: ``sum``, ``prod``, ``max``, ``min``, ``argmax``, ``argmin``), ``col`` (the
column index, int64) and ``rowlen`` (``N``, int64).  Inputs have a *layout*: ``elem`` (one
value per element, ``[R, N]``), ``row`` (one per row, ``[R]``: a statistic, a target) or
``col`` (one per column, ``[N]``: a weight).  Each value has a *level*: ``row`` when it is the
same along the row (a reduction, a row input, a constant and what is computed from them only),
``elem`` otherwise.

Reductions follow PyTorch's rules: sums and products of integers and bools are int64; the
extremes keep their dtype and propagate nan; the arg-reductions give the first index of the
extreme (nan counting as the extreme) as int64; `mean` and `var` (with ``correction``) are
built from sums.  Over an empty row a reduction gives its identity (0, 1, -inf / +inf, index
0); the ops that call a row kernel refuse empty rows where PyTorch does.

The row kernels of the composite ops (softmax, log_softmax, layer_norm, rms_norm,
cross_entropy and their backwards: `ember.backend.row_kernels`) are written once with `define`;
a backend renders a program with its language's spelling over the one scheduling loop
(`ember.backend.row_schedule`), and `evaluate` is the numpy reference.  A plugin or a test adds
a row kernel the same way: declare its `ember.ops.Op`, `define` its program; every backend that
renders row programs gets a kernel for it (`Backend.row_kernel`), and `call` runs it as ember
ops on a device that has none.

Examples
--------
>>> from ember.backend import rows
>>> import numpy as np
>>> p = rows.expand("softmax", ["float32"], {})
>>> [(v.dtype, p.level(v)) for v, _ in p.outputs]
[('float32', 'elem')]
>>> rows.evaluate(p, [np.zeros((1, 4), np.float32)])[0]
array([[0.25, 0.25, 0.25, 0.25]], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, overload

import numpy as np

from . import ir
from .ir import Value

__all__ = [
    "LAYOUTS", "REDUCTIONS", "RowBuilder", "RowProgram", "define", "defined", "names",
    "expand", "on_define", "evaluate", "reduce", "sum_", "prod", "amax", "amin", "argmax",
    "argmin", "mean", "var", "geometry", "call",
]

LAYOUTS = ("elem", "row", "col")
REDUCTIONS = ("sum", "prod", "max", "min", "argmax", "argmin")


class RowBuilder(ir.Builder):
    """An `ir.Builder` whose inputs have a layout (``elem``, ``row``, ``col``)."""

    def __init__(self) -> None:
        super().__init__()
        self.layouts: dict[int, tuple[str, str]] = {}

    def _declare(self, index: int, dtype: str, layout: str) -> Value:
        old = self.layouts.get(index)
        if old is not None and old != (layout, dtype):
            raise TypeError(f"rows: input {index} declared as {old} and as {(layout, dtype)}")
        self.layouts[index] = (layout, dtype)
        return self.input(index, dtype)

    def elem(self, index: int, dtype: str) -> Value:
        """Input ``index``: one value per element of the row."""
        return self._declare(index, dtype, "elem")

    def row(self, index: int, dtype: str) -> Value:
        """Input ``index``: one value per row."""
        return self._declare(index, dtype, "row")

    def col(self, index: int, dtype: str) -> Value:
        """Input ``index``: one value per column (shared by the rows)."""
        return self._declare(index, dtype, "col")

    def column(self) -> Value:
        """The column index (int64)."""
        return self.node("col", "int64", ())

    def length(self, dtype: str = "int64") -> Value:
        """The row length ``N`` in ``dtype``."""
        return self.node("rowlen", "int64", ()).to(ir.compute_dtype(dtype))


def _reduce_dtype(kind: str, dtype: str) -> str:
    if kind in ("argmax", "argmin"):
        return "int64"
    if kind in ("sum", "prod") and not ir.is_float(dtype):
        return "int64"
    return dtype


def reduce(kind: str, v: Value) -> Value:
    """The reduction ``kind`` (`REDUCTIONS`) of elementwise ``v`` over the row."""
    if kind not in REDUCTIONS:
        raise ValueError(f"rows: unknown reduction {kind!r} (one of {', '.join(REDUCTIONS)})")
    if _level(v, {}) != "elem":
        raise TypeError(f"rows: {kind} of a value that is the same along the row ({v.op}); "
                        f"reduce an expression of an elem or col input")
    out = _reduce_dtype(kind, v.dtype)
    src = v.to(out) if kind in ("sum", "prod") else v
    return v.builder.node("reduce", out, (src,), kind)


def sum_(v: Value) -> Value:
    return reduce("sum", v)


def prod(v: Value) -> Value:
    return reduce("prod", v)


def amax(v: Value) -> Value:
    return reduce("max", v)


def amin(v: Value) -> Value:
    return reduce("min", v)


def argmax(v: Value) -> Value:
    return reduce("argmax", v)


def argmin(v: Value) -> Value:
    return reduce("argmin", v)


def _length(v: Value) -> Value:
    b = v.builder
    if not isinstance(b, RowBuilder):
        raise TypeError("rows: a row reduction needs values of a RowBuilder")
    return b.length(v.dtype)


def mean(v: Value) -> Value:
    """``sum(v) / N`` (floats only, as PyTorch's ``mean``)."""
    if not ir.is_float(v.dtype):
        raise TypeError(f"rows: mean of {v.dtype} (a floating-point reduction)")
    return sum_(v) / _length(v)


def var(v: Value, correction: int = 1) -> Value:
    """The variance over the row with ``N - correction`` degrees of freedom (floored at 0, as
    PyTorch: a row too short gives inf or nan)."""
    if not ir.is_float(v.dtype):
        raise TypeError(f"rows: var of {v.dtype} (a floating-point reduction)")
    c = v - mean(v)
    dof = _length(v) - float(correction)
    return sum_(c * c) / ir.where(dof.lt(0.0), 0.0, dof)


def _level(v: Value, memo: dict[int, str]) -> str:
    """``elem`` or ``row`` (see the module docstring)."""
    got = memo.get(id(v))
    if got is not None:
        return got
    for u in ir.schedule(v):
        if id(u) in memo:
            continue
        if u.op == "input":
            b = u.builder
            layout = b.layouts[u.arg][0] if isinstance(b, RowBuilder) else "elem"
            memo[id(u)] = "row" if layout == "row" else "elem"
        elif u.op == "col":
            memo[id(u)] = "elem"
        elif u.op in ("reduce", "rowlen", "scalar", "const"):
            memo[id(u)] = "row"
        else:
            memo[id(u)] = "elem" if any(memo[id(s)] == "elem" for s in u.src) else "row"
    return memo[id(v)]


class RowProgram:
    """One row kernel: its inputs' layouts and storage dtypes, its outputs (a value and the
    storage dtype it is written in) and the facts every renderer reads."""

    def __init__(self, name: str, builder: RowBuilder, inputs: Sequence[str],
                 outputs: Sequence[tuple[Value, str]]) -> None:
        self.name = name
        self.builder = builder
        self.dtypes = list(inputs)
        # an input the program does not read keeps the elem layout
        self.layouts = [builder.layouts[i][0] if i in builder.layouts else "elem"
                        for i in range(len(inputs))]
        self.outputs = list(outputs)
        self._levels: dict[int, str] = {}
        for v, _ in self.outputs:
            _level(v, self._levels)

    def level(self, v: Value) -> str:
        return _level(v, self._levels)

    def nodes(self) -> list[Value]:
        """Every node the outputs need, each after its sources."""
        seen: set[int] = set()
        order: list[Value] = []
        for v, _ in self.outputs:
            for u in ir.schedule(v):
                if id(u) not in seen:
                    seen.add(id(u))
                    order.append(u)
        return order

    def reductions(self) -> list[Value]:
        return [v for v in self.nodes() if v.op == "reduce"]

    def out_layouts(self) -> list[str]:
        return [self.level(v) for v, _ in self.outputs]

    def __repr__(self) -> str:
        return f"RowProgram({self.name}, {list(zip(self.layouts, self.dtypes, strict=True))})"


# -- the registry -------------------------------------------------------------------------------

RowDefinition = Callable[[RowBuilder, Sequence[str], Mapping[str, Any]],
                         Sequence["Value | tuple[Value, str]"]]
_DEFS: dict[str, RowDefinition] = {}
_OPS: set[str] = set()
_LISTENERS: list[Callable[[str], None]] = []
_CACHE: dict[tuple[Any, ...], RowProgram] = {}


@overload
def define(name: str, *, op: bool = True) -> Callable[[RowDefinition], RowDefinition]: ...
@overload
def define(name: str, fn: RowDefinition, *, op: bool = True) -> RowDefinition: ...


def define(name: str, fn: RowDefinition | None = None, *, op: bool = True) -> Any:
    """Define row kernel ``name``: ``fn(builder, dtypes, params)`` declares the inputs it reads
    (``builder.elem(i, dtypes[i])``, ``.row``, ``.col``) and returns its outputs, each a value
    or ``(value, storage dtype)`` (default: the value's own dtype).  Usable as a decorator; a
    new definition of a name replaces the old one.

    ``op``: the `ember.ops.Op` of that name (if declared) takes exactly the program's inputs
    and params and returns its outputs, so a backend that renders row programs can adopt the
    program as the op's kernel.  The composite ops' programs (`row_kernels`) are defined with
    ``op=False``: their ops take more (a ``dim``, a loss reduction) and the backends call the
    programs from their own kernels for them."""
    def register(f: RowDefinition) -> RowDefinition:
        _DEFS[name] = f
        if op:
            _OPS.add(name)
        else:
            _OPS.discard(name)
        for key in [k for k in _CACHE if k[0] == name]:
            del _CACHE[key]
        if op:
            for listener in list(_LISTENERS):
                listener(name)
        return f

    return register(fn) if fn is not None else register


def on_define(listener: Callable[[str], None]) -> None:
    """Call ``listener(name)`` whenever a row kernel that is an op's kernel (``define``'s
    ``op``) is defined from now on."""
    _LISTENERS.append(listener)


def defined(name: str) -> bool:
    return name in _DEFS


def names(ops: bool = False) -> list[str]:
    """Every defined row kernel's name (``ops``: only those that are an op's kernel)."""
    return [n for n in _DEFS if n in _OPS] if ops else list(_DEFS)


def _freeze(params: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted((k, repr(v)) for k, v in params.items()))


def expand(name: str, dtypes: Sequence[str], params: Mapping[str, Any]) -> RowProgram:
    """The program of row kernel ``name`` for inputs of (storage) ``dtypes`` and ``params``
    (cached: the same arguments give the same program object)."""
    key = (name, tuple(dtypes), _freeze(params))
    p = _CACHE.get(key)
    if p is not None:
        return p
    fn = _DEFS.get(name)
    if fn is None:
        raise NotImplementedError(f"rows: no definition of row kernel {name!r} "
                                  f"(defined: {', '.join(sorted(_DEFS))})")
    b = RowBuilder()
    outs = [o if isinstance(o, tuple) else (o, o.dtype) for o in fn(b, list(dtypes), params)]
    p = _CACHE[key] = RowProgram(name, b, dtypes, outs)
    return p


# -- shapes -------------------------------------------------------------------------------------


def geometry(p: RowProgram, shapes: Sequence[tuple[int, ...]]
             ) -> tuple[tuple[int, ...], int, int]:
    """``(lead, R, N)`` of a call with inputs of ``shapes``: elem inputs are ``[*lead, N]``
    (the row is the last axis), row inputs ``lead``, col inputs ``[N]``; a `ShapeError` names
    the input that does not fit."""
    from .._errors import ShapeError

    if len(shapes) != len(p.layouts):
        raise ShapeError(f"{p.name}: takes {len(p.layouts)} inputs, got {len(shapes)}")
    elems = [s for s, lay in zip(shapes, p.layouts, strict=True) if lay == "elem"]
    if not elems or not elems[0]:
        raise ShapeError(f"{p.name}: needs an elem input with a row axis, got shapes "
                         f"{list(shapes)}")
    full = elems[0]
    lead, n = full[:-1], full[-1]
    for i, (s, lay) in enumerate(zip(shapes, p.layouts, strict=True)):
        want = {"elem": full, "row": lead, "col": (n,)}[lay]
        if tuple(s) != tuple(want):
            raise ShapeError(f"{p.name}: input {i} ({lay}) has shape {tuple(s)}, expected "
                             f"{tuple(want)} for rows of {full}")
    r = 1
    for d in lead:
        r *= d
    return tuple(lead), r, n


# -- the numpy reference ----------------------------------------------------------------------

def _np_reduce(kind: str, a: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    r, n = a.shape
    if kind in ("sum", "prod"):
        total: np.ndarray = (a.sum if kind == "sum" else a.prod)(axis=1, dtype=dtype,
                                                                keepdims=True)
        return total
    if n == 0:
        if kind in ("argmax", "argmin"):
            return np.zeros((r, 1), np.int64)
        if dtype.kind == "f":
            fill: Any = -np.inf if kind == "max" else np.inf
        elif dtype.kind == "b":
            fill = kind == "min"
        else:
            info = np.iinfo(dtype)
            fill = info.min if kind == "max" else info.max
        return np.full((r, 1), fill, dtype)
    fns: dict[str, Callable[..., np.ndarray]] = {"max": np.max, "min": np.min,
                                                 "argmax": np.argmax, "argmin": np.argmin}
    out = fns[kind](a, axis=1, keepdims=True)
    return out.astype(dtype, copy=False)


def evaluate(p: RowProgram, inputs: Sequence[Any]) -> list[np.ndarray]:
    """The outputs of ``p`` computed with numpy on ``inputs`` (elem ``[R, N]``, row ``[R]``,
    col ``[N]``, any dtype: each is taken in its compute dtype): elem outputs ``[R, N]``, row
    outputs ``[R]``, in their storage dtypes.  The reference semantics of row programs."""
    arrays: list[np.ndarray] = []
    r = n = None
    for a, lay, name in zip(inputs, p.layouts, p.dtypes, strict=True):
        x = np.asarray(a).astype(ir.compute_dtype(name), copy=False)
        if lay == "elem":
            r, n = x.shape
        elif lay == "row":
            r = x.shape[0]
            x = x.reshape(-1, 1)
        else:
            n = x.shape[0]
            x = x.reshape(1, -1)
        arrays.append(x)
    if r is None or n is None:
        raise ValueError(f"{p.name}: no input gives the rows' shape")
    values: dict[int, np.ndarray] = {}
    with np.errstate(all="ignore"):
        for v in p.nodes():
            dt = np.dtype(v.dtype)
            if v.op == "input":
                out = arrays[v.arg]
            elif v.op == "col":
                out = np.arange(n, dtype=np.int64).reshape(1, n)
            elif v.op == "rowlen":
                out = np.asarray(n, np.int64)
            elif v.op == "reduce":
                src = np.broadcast_to(values[id(v.src[0])], (r, n))
                out = _np_reduce(v.arg, src, dt)
            elif v.op == "const":
                out = np.asarray(v.arg, dt)
            elif v.op == "cast":
                out = values[id(v.src[0])]
            elif v.op == "scalar":
                raise ValueError(f"{p.name}: row programs take constants, not scalars")
            else:
                out = ir._NP[v.op](*(values[id(s)] for s in v.src))
            values[id(v)] = np.asarray(out).astype(dt, copy=False)
    result = []
    for v, store in p.outputs:
        shape = (r, n) if p.level(v) == "elem" else (r, 1)
        o = np.broadcast_to(values[id(v)], shape)
        o = o.reshape(r) if p.level(v) == "row" else o
        result.append(np.ascontiguousarray(o).astype(_np_storage(store), copy=False))
    return result


def _np_storage(dtype: str) -> Any:
    if dtype == "bfloat16":  # numpy has none: the reference keeps float32
        return np.float32
    return np.dtype(dtype)


# -- any device: the program as ember ops ------------------------------------------------------


def call(op: Any, *tensors: Any, **params: Any) -> Any:
    """Run row kernel ``op`` (an `ember.ops.Op` whose name is defined here) on ``tensors``:
    as the device's own kernel where it has one (a backend that renders row programs adopts
    every defined one), else as ember ops, one per node, on the device (so it also runs,
    differentiated or fused, under decorators).  The row is the last axis of elem inputs."""
    from .._apply import apply

    device = tensors[0].device
    if device.implements(op):
        return apply(op, *tensors, **params)
    p = expand(op.name, [t.dtype.name for t in tensors], params)
    outs = as_ember_ops(p, tensors)
    return outs[0] if len(outs) == 1 else tuple(outs)


def as_ember_ops(p: RowProgram, tensors: Sequence[Any]) -> list[Any]:
    """``p`` computed op by op with ember ops on ``tensors`` (see `call`)."""
    import ember

    lead, _, n = geometry(p, [tuple(t.shape) for t in tensors])
    device = tensors[0].device
    ins = []
    for t, lay in zip(tensors, p.layouts, strict=True):
        ins.append(t.unsqueeze(-1) if lay == "row" else t)
    values: dict[int, Any] = {}
    for v in p.nodes():
        if v.op == "input":
            t = ins[v.arg]
            out = t if t.dtype.name == v.dtype else t.to(getattr(ember, v.dtype))
        elif v.op == "col":
            out = ember.arange(n, dtype=ember.int64, device=device)
        elif v.op == "rowlen":
            out = ember.tensor(n, dtype=ember.int64, device=device)
        elif v.op == "const":
            out = ember.tensor(v.arg, dtype=getattr(ember, v.dtype), device=device)
        elif v.op == "reduce":
            s = values[id(v.src[0])]
            s = s.expand(*lead, n) if tuple(s.shape) != (*lead, n) else s
            out = _EMBER_REDUCE[v.arg](s)
        elif v.op == "cast":
            out = values[id(v.src[0])].to(getattr(ember, v.dtype))
        else:
            fn = _EMBER_OPS.get(v.op)
            if fn is None:
                raise NotImplementedError(f"{p.name}: primitive {v.op!r} has no ember op")
            out = fn(*(values[id(s)] for s in v.src))
        values[id(v)] = out
    result = []
    for v, store in p.outputs:
        o = values[id(v)]
        if p.level(v) == "row":
            o = o.expand(*lead, 1)[..., 0] if o.ndim else o.expand(*lead)
        elif tuple(o.shape) != (*lead, n):
            o = o.expand(*lead, n)
        dt = getattr(ember, store)
        result.append(o if o.dtype == dt else o.to(dt))
    return result


def _ember_table() -> tuple[dict[str, Callable[..., Any]], dict[str, Callable[[Any], Any]]]:
    import ember

    ops: dict[str, Callable[..., Any]] = {
        "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
        "fdiv": lambda a, b: a / b, "neg": lambda a: -a, "pow": ember.pow,
        "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "eq": ember.eq, "ne": ember.ne,
        "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b, "where": ember.where,
        "and": ember.logical_and, "or": ember.logical_or, "xor": ember.logical_xor,
        "not": ember.logical_not, "isnan": ember.isnan, "isinf": ember.isinf,
        "fabs": ember.abs, "rint": ember.round, "atan2": ember.atan2,
    }
    for fn in ir.FLOAT_FUNCTIONS:
        if fn not in ops and hasattr(ember, fn):
            ops[fn] = getattr(ember, fn)
    red: dict[str, Callable[[Any], Any]] = {
        "sum": lambda s: s.sum(dim=-1, keepdim=True),
        "prod": lambda s: s.prod(dim=-1, keepdim=True),
        "max": lambda s: s.amax(dim=-1, keepdim=True),
        "min": lambda s: s.amin(dim=-1, keepdim=True),
        "argmax": lambda s: s.argmax(dim=-1, keepdim=True),
        "argmin": lambda s: s.argmin(dim=-1, keepdim=True),
    }
    return ops, red


class _Lazy(dict):  # type: ignore[type-arg]  # filled on first use: ember imports this module
    def __init__(self, which: int) -> None:
        super().__init__()
        self.which = which

    def _fill(self) -> None:
        if not super().__len__():
            self.update(_ember_table()[self.which])

    def get(self, key: Any, default: Any = None) -> Any:
        self._fill()
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self._fill()
        return super().__getitem__(key)


_EMBER_OPS: dict[str, Callable[..., Any]] = _Lazy(0)
_EMBER_REDUCE: dict[str, Callable[[Any], Any]] = _Lazy(1)
