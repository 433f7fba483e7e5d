"""The kernel IR: every elementwise op's semantics, written once, for every backend to render.

A kernel body is a small DAG of typed scalar expressions (`Value`): leaves (an input, a
run-time scalar, a constant) and a fixed set of *primitives* — arithmetic, comparisons, bit
operations, ``where``, casts and the C library's math functions.  Each of ember's elementwise
ops is *defined* here in terms of primitives (`define`): numpy's and PyTorch's rules for
floor division and remainder (signs, zero divisors), NaN-propagating maximum, integer powers
(negative exponents included), out-of-range shifts, sign of zero, comparisons of bools...
A backend renders the primitives in its language (`ember_opencl`: OpenCL C; `ember_triton`:
Triton) and gets every op, eager or fused, from `expand`; adding an elementwise op means
declaring it (`ember.ops.Op`), defining it here (or with `define` from a plugin or a test) and
giving it a VJP rule — no backend file changes.

Values compute in the *compute dtype* of their storage type (`compute_dtype`: the 16-bit
floats compute in float32); a renderer loads and stores the storage types.

Examples
--------
>>> from ember.backend import ir
>>> body = ir.expand("maximum", ["float32", "float32"])
>>> body.dtype, body.op
('float32', 'where')
>>> ir.expand("floordiv", ["int64", "int64"]).dtype
'int64'
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

import numpy as np

__all__ = [
    "FLOAT_FUNCTIONS", "PRIMITIVES", "Value", "Builder", "compute_dtype", "define", "defined",
    "expand", "is_float", "is_int", "is_unsigned", "bits", "schedule", "where", "cast",
    "evaluate", "numpy_kernel", "on_define", "names",
]

#: the float -> float functions of the C library every renderer provides
FLOAT_FUNCTIONS = ("exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tan", "tanh", "asin",
                   "acos", "atan", "sinh", "cosh", "erf", "floor", "ceil", "rint", "trunc",
                   "fabs")
#: every primitive, by arity: what a renderer must implement
PRIMITIVES: dict[str, int] = {
    "input": 0, "scalar": 0, "const": 0,
    **dict.fromkeys(FLOAT_FUNCTIONS, 1),
    "isnan": 1, "isinf": 1,  # float -> bool
    "neg": 1, "invert": 1, "not": 1, "cast": 1,  # invert: ints; not: bools
    "add": 2, "sub": 2, "mul": 2,
    "fdiv": 2, "fmod": 2, "pow": 2, "atan2": 2,  # floats (fmod: C's, sign of the dividend)
    "idiv": 2, "imod": 2,  # ints, C's truncating division; never called with 0 or MIN / -1
    "lt": 2, "le": 2, "eq": 2, "ne": 2, "gt": 2, "ge": 2,  # -> bool
    "and": 2, "or": 2, "xor": 2,  # ints or bools
    "shl": 2, "shr": 2,  # ints, shift counts within [0, bits)
    "where": 3,
    # row programs only (`ember.backend.rows`): a reduction over the row of its elementwise
    # source (``arg``: sum, prod, max, min, argmax, argmin), the column index, the row length
    "reduce": 1, "col": 0, "rowlen": 0,
}
_COMPUTE = {"float16": "float32", "bfloat16": "float32"}
_DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                     "uint64", "float32", "float64"})


def compute_dtype(name: str) -> str:
    """The dtype a stored ``name`` computes in (the 16-bit floats in float32)."""
    return _COMPUTE.get(name, name)


def is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def is_unsigned(dtype: str) -> bool:
    return dtype.startswith("uint")


def is_int(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


def bits(dtype: str) -> int:
    return 8 if dtype == "bool" else int("".join(c for c in dtype if c.isdigit()))


class Value:
    """One node of a kernel body: ``op`` (a primitive) of ``src`` giving ``dtype``; ``arg``
    holds the input or scalar index, the constant, or nothing.  Built by a `Builder`, which
    gives one node per distinct expression (so a renderer sees shared subexpressions)."""

    __slots__ = ("arg", "builder", "dtype", "op", "src")

    def __init__(self, builder: Builder, op: str, dtype: str, src: tuple[Value, ...],
                 arg: Any) -> None:
        self.builder, self.op, self.dtype, self.src, self.arg = builder, op, dtype, src, arg

    def __repr__(self) -> str:
        inner = ", ".join([repr(s) for s in self.src] + ([repr(self.arg)] if self.arg is not None
                                                        else []))
        return f"{self.op}:{self.dtype}({inner})"

    # -- building ----------------------------------------------------------------------------

    def _other(self, other: Any) -> Value:
        return other if isinstance(other, Value) else self.builder.const(other, self.dtype)

    def _bin(self, op: str, other: Any, dtype: str | None = None) -> Value:
        o = self._other(other)
        if o.dtype != self.dtype:
            raise TypeError(f"ir: {op} of {self.dtype} and {o.dtype} (cast one first)")
        return self.builder.node(op, dtype or self.dtype, (self, o))

    def _rbin(self, op: str, other: Any) -> Value:
        return self.builder.const(other, self.dtype)._bin(op, self)

    def __add__(self, o: Any) -> Value: return self._bin("add", o)
    def __radd__(self, o: Any) -> Value: return self._rbin("add", o)
    def __sub__(self, o: Any) -> Value: return self._bin("sub", o)
    def __rsub__(self, o: Any) -> Value: return self._rbin("sub", o)
    def __mul__(self, o: Any) -> Value: return self._bin("mul", o)
    def __rmul__(self, o: Any) -> Value: return self._rbin("mul", o)

    def __truediv__(self, o: Any) -> Value:
        return self._bin("fdiv" if is_float(self.dtype) else "idiv", o)

    def __rtruediv__(self, o: Any) -> Value:
        return self.builder.const(o, self.dtype) / self

    def __mod__(self, o: Any) -> Value:
        return self._bin("fmod" if is_float(self.dtype) else "imod", o)

    def __neg__(self) -> Value:
        return self.builder.node("neg", self.dtype, (self,))

    def __invert__(self) -> Value:
        return self.builder.node("not" if self.dtype == "bool" else "invert", self.dtype, (self,))

    def __and__(self, o: Any) -> Value: return self._bin("and", o)
    def __or__(self, o: Any) -> Value: return self._bin("or", o)
    def __xor__(self, o: Any) -> Value: return self._bin("xor", o)
    def __lshift__(self, o: Any) -> Value: return self._bin("shl", o)
    def __rshift__(self, o: Any) -> Value: return self._bin("shr", o)

    # comparisons are methods: ``==`` stays identity, so values can key dictionaries
    def lt(self, o: Any) -> Value: return self._bin("lt", o, "bool")
    def le(self, o: Any) -> Value: return self._bin("le", o, "bool")
    def eq(self, o: Any) -> Value: return self._bin("eq", o, "bool")
    def ne(self, o: Any) -> Value: return self._bin("ne", o, "bool")
    def gt(self, o: Any) -> Value: return self._bin("gt", o, "bool")
    def ge(self, o: Any) -> Value: return self._bin("ge", o, "bool")

    def call(self, fn: str) -> Value:
        """A float function of the C library (`FLOAT_FUNCTIONS`), ``isnan`` or ``isinf``."""
        out = "bool" if fn in ("isnan", "isinf") else self.dtype
        if not is_float(self.dtype):
            raise TypeError(f"ir: {fn} of {self.dtype} (a float function)")
        return self.builder.node(fn, out, (self,))

    def to(self, dtype: str) -> Value:
        return self if dtype == self.dtype else self.builder.node("cast", dtype, (self,))


class Builder:
    """Makes `Value` nodes, one per distinct expression."""

    def __init__(self) -> None:
        self._nodes: dict[tuple[Any, ...], Value] = {}

    def node(self, op: str, dtype: str, src: tuple[Value, ...], arg: Any = None) -> Value:
        if op not in PRIMITIVES:
            raise ValueError(f"ir: unknown primitive {op!r}")
        if dtype not in _DTYPES:
            raise TypeError(f"ir: {op} gives {dtype}, not a compute dtype ({sorted(_DTYPES)})")
        key = (op, dtype, tuple(id(s) for s in src), _const_key(arg))
        v = self._nodes.get(key)
        if v is None:
            v = self._nodes[key] = Value(self, op, dtype, src, arg)
        return v

    def input(self, index: int, dtype: str) -> Value:
        return self.node("input", compute_dtype(dtype), (), index)

    def scalar(self, index: int, dtype: str) -> Value:
        return self.node("scalar", compute_dtype(dtype), (), index)

    def const(self, value: Any, dtype: str) -> Value:
        if dtype == "bool":
            value = bool(value)
        elif is_float(dtype):
            value = float(value)
        else:
            value = int(value)
        return self.node("const", dtype, (), value)


def _const_key(arg: Any) -> Any:
    # 0.0 and -0.0 (and every nan) are different constants
    if isinstance(arg, float):
        return ("f", math.copysign(1.0, arg), repr(arg))
    return arg


def where(cond: Value, a: Any, b: Any, dtype: str | None = None) -> Value:
    """``a`` where ``cond`` else ``b``; constants take the other branch's dtype, or ``dtype``
    where both are constants."""
    if not isinstance(a, Value) and not isinstance(b, Value):
        if dtype is None:
            raise TypeError("ir: where of two constants needs their dtype")
        a = cond.builder.const(a, dtype)
    av = a if isinstance(a, Value) else b._other(a)
    bv = b if isinstance(b, Value) else av._other(b)
    if av.dtype != bv.dtype or cond.dtype != "bool":
        raise TypeError(f"ir: where({cond.dtype}, {av.dtype}, {bv.dtype})")
    return cond.builder.node("where", av.dtype, (cond, av, bv))


def cast(v: Value, dtype: str) -> Value:
    return v.to(compute_dtype(dtype))


# -- the definitions ----------------------------------------------------------------------------

Definition = Callable[[list[Value]], Value]
_DEFS: dict[str, Definition] = {}


@overload
def define(name: str) -> Callable[[Definition], Definition]: ...
@overload
def define(name: str, fn: Definition) -> Definition: ...


def define(name: str, fn: Definition | None = None) -> Any:
    """Define elementwise op ``name``: ``fn(inputs) -> Value`` over the inputs' values (in their
    compute dtypes).  Usable as a decorator.  A definition for a name already defined replaces
    it."""
    def register(f: Definition) -> Definition:
        _DEFS[name] = f
        for listener in list(_LISTENERS):
            listener(name)
        return f

    return register(fn) if fn is not None else register


_LISTENERS: list[Callable[[str], None]] = []


def on_define(listener: Callable[[str], None]) -> None:
    """Call ``listener(name)`` whenever an op is defined from now on (backends use it to add a
    kernel for an op declared and defined after they were made)."""
    _LISTENERS.append(listener)


def names() -> list[str]:
    """Every defined op's name."""
    return list(_DEFS)


def defined(name: str) -> bool:
    return name in _DEFS


def expand(name: str, dtypes: Sequence[str]) -> Value:
    """The body of op ``name`` on inputs of (storage) ``dtypes``, inputs ``0..n-1``."""
    fn = _DEFS.get(name)
    if fn is None:
        raise NotImplementedError(f"ir: no definition of elementwise op {name!r} "
                                  f"(defined: {', '.join(sorted(_DEFS))})")
    b = Builder()
    return fn([b.input(i, d) for i, d in enumerate(dtypes)])


def schedule(root: Value, stop: Callable[[Value], bool] | None = None) -> Iterator[Value]:
    """The nodes of ``root``'s DAG in an order where every node follows its sources; with
    ``stop``, not descending below a node where it holds (the node itself is yielded)."""
    seen: set[int] = set()
    stack: list[tuple[Value, bool]] = [(root, False)]
    while stack:
        v, done = stack.pop()
        if done:
            yield v
            continue
        if id(v) in seen:
            continue
        seen.add(id(v))
        stack.append((v, True))
        if stop is None or not stop(v):
            stack.extend((s, False) for s in reversed(v.src) if id(s) not in seen)


def use_counts(order: Sequence[Value]) -> dict[int, int]:
    """How many times each node of ``order`` (by id) is a source of another."""
    uses: dict[int, int] = {}
    for v in order:
        for s in v.src:
            uses[id(s)] = uses.get(id(s), 0) + 1
    return uses


def spell(root: Value, expr: Callable[[Value, list[str]], str],
          line: Callable[[Value, str, str], str], prefix: str = "t", longest: int = 0,
          order: Sequence[Value] | None = None) -> tuple[list[str], str]:
    """``root`` spelled in a language: each node by ``expr(node, its sources' spellings)``
    (sources first); a node other than the root and the leaves that is used more than once
    (or, with ``longest``, spelled longer than that) is named ``{prefix}0, {prefix}1, ...`` by
    the statement ``line(node, name, spelling)``.  Returns the statements and the root's
    spelling."""
    order = list(schedule(root)) if order is None else order
    uses = use_counts(order)
    code: dict[int, str] = {}
    lines: list[str] = []
    for v in order:
        text = expr(v, [code[id(s)] for s in v.src])
        if v.src and v is not root and (uses.get(id(v), 0) > 1
                                        or (longest and len(text) > longest)):
            name = f"{prefix}{len(lines)}"
            lines.append(line(v, name, text))
            text = name
        code[id(v)] = text
    return lines, code[id(root)]


# float functions: one primitive each, or a short formula
def _function(fn: str) -> Definition:
    return lambda xs: xs[0].call(fn)


for _fn in ("exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tan", "tanh", "asin", "acos",
            "atan", "sinh", "cosh", "erf"):
    define(_fn, _function(_fn))
define("rsqrt", lambda xs: 1.0 / xs[0].call("sqrt"))
define("reciprocal", lambda xs: 1.0 / xs[0])
define("sigmoid", lambda xs: 1.0 / (1.0 + (-xs[0]).call("exp")))

# the inverse hyperbolic functions from log1p and sqrt (accurate near 0); past 1e8, where x*x
# would overflow float32's range soon after, asinh(x) and acosh(x) are log(2x) to the last bit
_LN2 = math.log(2.0)


@define("asinh")
def _asinh(xs: list[Value]) -> Value:
    x = xs[0]
    a = x.call("fabs")
    near = (a + a * a / (1.0 + (1.0 + a * a).call("sqrt"))).call("log1p")
    r = where(a.gt(1e8), a.call("log") + _LN2, near)
    return where(x.eq(0), x, where(x.lt(0), -r, r))  # odd, and -0.0 stays -0.0


@define("acosh")
def _acosh(xs: list[Value]) -> Value:
    x = xs[0]
    t = x - 1.0  # sqrt(t) is nan below 1: so is acosh
    near = (t + t.call("sqrt") * (t + 2.0).call("sqrt")).call("log1p")
    return where(x.gt(1e8), x.call("log") + _LN2, near)


@define("atanh")
def _atanh(xs: list[Value]) -> Value:
    x = xs[0]
    a = x.call("fabs")  # of |x|: 1 - |x| is exact near 1, where the result grows
    r = 0.5 * (2.0 * a / (1.0 - a)).call("log1p")
    return where(x.eq(0), x, where(x.lt(0), -r, r))


@define("copysign")
def _copysign(xs: list[Value]) -> Value:
    a, b = xs
    m = a.call("fabs")
    # b's sign bit: negative numbers and -0.0 (1 / -0.0 is -inf); a nan's sign is not read
    negative = b.lt(0) | (b.eq(0) & (1.0 / b).lt(0))
    return where(negative, -m, m)


def _rounding(fn: str) -> Definition:
    def body(xs: list[Value]) -> Value:  # integers are their own floor, ceil, ...
        return xs[0].call(fn) if is_float(xs[0].dtype) else xs[0]

    return body


for _name, _fn in (("floor", "floor"), ("ceil", "ceil"), ("round", "rint"), ("trunc", "trunc")):
    define(_name, _rounding(_fn))


@define("neg")
def _neg(xs: list[Value]) -> Value:
    x = xs[0]
    return (0 - x) if is_unsigned(x.dtype) else -x


@define("abs")
def _abs(xs: list[Value]) -> Value:
    x = xs[0]
    if is_float(x.dtype):
        return x.call("fabs")
    if is_unsigned(x.dtype) or x.dtype == "bool":
        return x
    return where(x.lt(0), -x, x)


@define("sign")
def _sign(xs: list[Value]) -> Value:
    x = xs[0]
    if x.dtype == "bool":
        return x
    if is_float(x.dtype):  # signed zeros and nan are their own sign
        return where(x.gt(0), 1.0, where(x.lt(0), -1.0, x))
    if is_unsigned(x.dtype):
        return where(x.gt(0), 1, x)
    return where(x.gt(0), 1, where(x.lt(0), -1, x))


define("logical_not", lambda xs: xs[0].eq(0))


@define("isnan")
def _isnan(xs: list[Value]) -> Value:
    x = xs[0]
    return x.call("isnan") if is_float(x.dtype) else x.builder.const(False, "bool")


@define("isinf")
def _isinf(xs: list[Value]) -> Value:
    x = xs[0]
    return x.call("isinf") if is_float(x.dtype) else x.builder.const(False, "bool")


define("bitwise_not", lambda xs: ~xs[0])
define("add", lambda xs: xs[0] + xs[1])
define("sub", lambda xs: xs[0] - xs[1])
define("mul", lambda xs: xs[0] * xs[1])
define("div", lambda xs: xs[0] / xs[1])
define("atan2", lambda xs: xs[0].builder.node("atan2", xs[0].dtype, (xs[0], xs[1])))


def _safe_divisor(a: Value, b: Value) -> tuple[Value, Value]:
    """``b`` with 0 (and -1 for signed types: MIN / -1 overflows) replaced by 1, and the mask
    of the replaced lanes."""
    bad = b.eq(0) if is_unsigned(a.dtype) else b.eq(0) | b.eq(-1)
    return where(bad, 1, b), bad


@define("floordiv")
def _floordiv(xs: list[Value]) -> Value:
    a, b = xs
    if is_float(a.dtype):
        # numpy's npy_divmod: from fmod, so that a == b * q + r holds exactly
        m = a % b
        d = (a - m) / b
        d = where(m.ne(0) & (b.lt(0) ^ m.lt(0)), d - 1.0, d)
        q = d.call("floor")
        q = where((d - q).gt(0.5), q + 1.0, q)
        q = where(d.eq(0), 0.0 * (a / b), q)  # a signed zero
        return where(b.eq(0), a / b, q)
    safe, bad = _safe_divisor(a, b)
    q = a / safe
    if is_unsigned(a.dtype):
        return where(bad, 0, q)
    r = a % safe
    q = where(r.ne(0) & (r.lt(0) ^ safe.lt(0)), q - 1, q)
    return where(b.eq(0), 0, where(b.eq(-1), -a, q))  # integer x // 0 is 0 (PyTorch's CPU)


@define("remainder")
def _remainder(xs: list[Value]) -> Value:
    a, b = xs
    if is_float(a.dtype):  # the divisor's sign, zeros included
        m = a % b
        r = where(m.ne(0) & (b.lt(0) ^ m.lt(0)), m + b, m)
        return where(b.eq(0), m, where(m.eq(0), where(b.lt(0), -0.0, 0.0, a.dtype), r))
    safe, bad = _safe_divisor(a, b)
    r = a % safe
    if not is_unsigned(a.dtype):
        r = where(r.ne(0) & (r.lt(0) ^ safe.lt(0)), r + safe, r)
    return where(bad, 0, r)


@define("pow")
def _pow(xs: list[Value]) -> Value:
    a, b = xs
    if is_float(a.dtype):
        return a.builder.node("pow", a.dtype, (a, b))
    # square and multiply over every bit of the exponent
    e = b if is_unsigned(a.dtype) else where(b.lt(0), 0, b)
    r, base = a * 0 + 1, a
    for _ in range(bits(a.dtype)):
        r = where((e & 1).ne(0), r * base, r)
        base = base * base
        e = e >> 1
    if is_unsigned(a.dtype):
        return r
    # negative exponents: 1 / a ** |b| truncated toward zero (PyTorch)
    inv = where(a.eq(1), 1, where(a.eq(-1), where((b & 1).ne(0), -1, 1, a.dtype), 0))
    return where(b.lt(0), inv, r)


@define("maximum")
def _maximum(xs: list[Value]) -> Value:
    a, b = xs
    if is_float(a.dtype):  # nan wins
        return where(a.call("isnan") | b.call("isnan"), a + b, where(a.gt(b), a, b))
    return where(a.gt(b), a, b)


@define("minimum")
def _minimum(xs: list[Value]) -> Value:
    a, b = xs
    if is_float(a.dtype):
        return where(a.call("isnan") | b.call("isnan"), a + b, where(a.lt(b), a, b))
    return where(a.lt(b), a, b)


def _bytes(v: Value) -> Value:
    """Bools as bytes (some renderers' 1-bit integers compare and combine as signed)."""
    return v.to("uint8") if v.dtype == "bool" else v


def _compare(op: str) -> Definition:
    def body(xs: list[Value]) -> Value:
        a, b = _bytes(xs[0]), _bytes(xs[1])
        return a._bin(op, b, "bool")

    return body


for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    define(_name, _compare(_name))
define("logical_and", lambda xs: xs[0].ne(0) & xs[1].ne(0))
define("logical_or", lambda xs: xs[0].ne(0) | xs[1].ne(0))
define("logical_xor", lambda xs: xs[0].ne(0) ^ xs[1].ne(0))


def _bitwise(op: str) -> Definition:
    def body(xs: list[Value]) -> Value:
        a, b = xs
        if a.dtype == "bool":
            return _bytes(a)._bin(op, _bytes(b)).ne(0)
        return a._bin(op, b)

    return body


for _name, _op in (("bitwise_and", "and"), ("bitwise_or", "or"), ("bitwise_xor", "xor")):
    define(_name, _bitwise(_op))


def _shift(left: bool) -> Definition:
    def body(xs: list[Value]) -> Value:
        a, b = (_bytes(x) for x in xs)
        n = bits(a.dtype)
        out = b.lt(0) | b.ge(n)  # numpy: every bit shifted out
        s = where(out, 0, b)
        r = a << s if left else a >> s
        full = 0 if left or is_unsigned(a.dtype) else where(a.lt(0), -1, 0, a.dtype)
        r = where(out, full, r)
        return r.ne(0) if xs[0].dtype == "bool" else r

    return body


define("left_shift", _shift(True))
define("right_shift", _shift(False))
define("where", lambda xs: where(xs[0].ne(0) if xs[0].dtype != "bool" else xs[0], xs[1], xs[2]))


# -- the reference renderer: numpy ----------------------------------------------------------------

def _trunc_div(a: Any, b: Any) -> Any:
    q = np.floor_divide(a, b)
    return np.where((np.remainder(a, b) != 0) & ((a < 0) != (b < 0)), q + 1, q)


_NP: dict[str, Callable[..., Any]] = {
    "exp": np.exp, "expm1": np.expm1, "log": np.log, "log1p": np.log1p, "sqrt": np.sqrt,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "tanh": np.tanh, "asin": np.arcsin,
    "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh,
    "erf": np.frompyfunc(math.erf, 1, 1), "floor": np.floor, "ceil": np.ceil, "rint": np.rint,
    "trunc": np.trunc, "fabs": np.fabs, "isnan": np.isnan, "isinf": np.isinf,
    "neg": np.negative, "invert": np.invert, "not": np.logical_not,
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "fdiv": np.true_divide,
    "fmod": np.fmod, "pow": np.power, "atan2": np.arctan2, "idiv": _trunc_div,
    "imod": lambda a, b: a - b * _trunc_div(a, b),
    "lt": np.less, "le": np.less_equal, "eq": np.equal, "ne": np.not_equal,
    "gt": np.greater, "ge": np.greater_equal, "and": np.bitwise_and, "or": np.bitwise_or,
    "xor": np.bitwise_xor, "shl": np.left_shift, "shr": np.right_shift, "where": np.where,
}


def evaluate(root: Value, inputs: Sequence[Any], scalars: Sequence[Any] = ()) -> Any:
    """``root`` computed with numpy on ``inputs`` (arrays in their compute dtypes, broadcast
    together) and ``scalars``: the IR's reference semantics, and the kernel of a backend
    computing with numpy."""
    values: dict[int, Any] = {}
    with np.errstate(all="ignore"):
        for v in schedule(root):
            dt = np.dtype(v.dtype)
            if v.op == "input":
                out = np.asarray(inputs[v.arg])
            elif v.op == "scalar":
                out = np.asarray(scalars[v.arg])
            elif v.op == "const":
                out = np.asarray(v.arg, dt)
            elif v.op == "cast":
                out = values[id(v.src[0])]
            else:
                out = _NP[v.op](*(values[id(s)] for s in v.src))
            values[id(v)] = np.asarray(out).astype(dt, copy=False)
    return values[id(root)]


def numpy_kernel(name: str) -> Callable[..., Any]:
    """A kernel of op ``name`` on numpy arrays (`evaluate`, one expansion per input dtypes):
    what a backend computing with numpy returns from ``Backend.ir_kernel``."""
    bodies: dict[tuple[str, ...], Value] = {}

    def kernel(*xs: Any) -> Any:
        key = tuple(x.dtype.name for x in xs)
        root = bodies.get(key)
        if root is None:
            root = bodies[key] = expand(name, key)
        out = evaluate(root, [x.astype(compute_dtype(x.dtype.name), copy=False) for x in xs])
        return out.astype(bool if root.dtype == "bool" else xs[-1].dtype, copy=False)

    kernel.__name__ = name
    return kernel
