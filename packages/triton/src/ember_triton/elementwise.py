"""Elementwise kernels: each op is a line of Triton code, compiled per signature by
:mod:`ember_triton._codegen`.

float16 and bfloat16 compute in float32; float32 uses correctly rounded division and square
root (``div_rn``, ``sqrt_rn``); transcendental functions beyond ``triton.language``'s own are
written in ``kernels/mathlib.py`` so that they run compiled and interpreted alike.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from ember.ops import composite as cops
from ember.ops import elementwise as ew

from ._array import DeviceArray, kind_of
from ._codegen import elementwise, run_binary, run_plan

if TYPE_CHECKING:
    from .backend import TritonBackend

__all__ = ["KERNELS", "Expression", "binary", "binary_expression", "cast_expression",
           "clamp_expression", "unary", "unary_expression", "where_expression"]

# float functions: x0 is float32 or float64
_FLOAT_UNARY = {
    "exp": "tl.exp(x0)", "expm1": "expm1_(x0)", "log": "tl.log(x0)", "log1p": "log1p_(x0)",
    "sqrt": "sqrt_(x0)", "rsqrt": "1.0 / sqrt_(x0)", "sin": "tl.sin(x0)",
    "cos": "tl.cos(x0)", "tan": "tl.sin(x0) / tl.cos(x0)", "tanh": "tanh_(x0)",
    "asin": "asin_(x0)", "acos": "acos_(x0)", "atan": "atan_(x0)", "sinh": "sinh_(x0)",
    "cosh": "cosh_(x0)", "erf": "tl.erf(x0)", "sigmoid": "1.0 / (1.0 + tl.exp(-x0))",
    "reciprocal": "div_(tl.zeros_like(x0) + 1.0, x0)",
}
_FLOAT_NUMERIC = {
    "neg": "-x0", "abs": "tl.abs(x0)", "sign": "fsign_(x0)", "floor": "tl.floor(x0)",
    "ceil": "tl.ceil(x0)", "round": "round_(x0)", "trunc": "trunc_(x0)",
}
_INT_NUMERIC = {
    "neg": "-x0", "abs": "tl.where(x0 < 0, -x0, x0)", "sign": "sign_(x0)",
    "floor": "x0", "ceil": "x0", "round": "x0", "trunc": "x0",
}
_UINT_NUMERIC = {**_INT_NUMERIC, "abs": "x0", "neg": "0 - x0", "sign": "(x0 > 0).to(x0.dtype)"}

_FLOAT_BINARY = {
    "add": "x0 + x1", "sub": "x0 - x1", "mul": "x0 * x1", "div": "div_(x0, x1)",
    "floordiv": "ffloordiv_(x0, x1)", "remainder": "fremainder_(x0, x1)",
    "pow": "fpow_(x0.to(tl.float64), x1.to(tl.float64))",
    "maximum": "fmax_(x0, x1)", "minimum": "fmin_(x0, x1)", "atan2": "atan2_(x0, x1)",
}
_INT_BINARY = {
    "add": "x0 + x1", "sub": "x0 - x1", "mul": "x0 * x1",
    "floordiv": "ifloordiv_(x0, x1)", "remainder": "iremainder_(x0, x1)",
    "pow": "ipow_(x0, x1, {bits})", "maximum": "tl.where(x0 > x1, x0, x1)",
    "minimum": "tl.where(x0 < x1, x0, x1)",
}
_UINT_BINARY = {**_INT_BINARY, "floordiv": "ufloordiv_(x0, x1)", "pow": "upow_(x0, x1, {bits})",
                "remainder": "uremainder_(x0, x1)"}
_COMPARE = {"eq": "x0 == x1", "ne": "x0 != x1", "lt": "x0 < x1", "le": "x0 <= x1",
            "gt": "x0 > x1", "ge": "x0 >= x1"}
_LOGIC = {"logical_and": "x0 & x1", "logical_or": "x0 | x1", "logical_xor": "x0 ^ x1"}
_BITWISE = {"bitwise_and": "x0 & x1", "bitwise_or": "x0 | x1", "bitwise_xor": "x0 ^ x1",
            "left_shift": "x0 << x1", "right_shift": "x0 >> x1"}


def _bits(dtype: np.dtype[Any]) -> int:
    return dtype.itemsize * 8


class Expression(NamedTuple):
    """One op as Triton code: ``body`` sets ``r`` from ``x0, x1, ...`` (and scalars ``s0, ...``,
    one-element arrays holding ``scalars``' values in their dtypes); the result is converted to
    ``out`` and operands are loaded widened (half types as float32) when ``widen``.

    The eager kernels below and the Triton fusion compiler both build their code from this, so a
    fused op computes what the unfused one does.
    """

    body: str
    out: np.dtype[Any]
    widen: bool = True
    scalars: tuple[tuple[Any, np.dtype[Any]], ...] = ()


@functools.cache  # pure: called on every eager op
def unary_expression(name: str, dt: np.dtype[Any]) -> Expression:
    if name in _FLOAT_UNARY:
        return Expression(f"r = {_FLOAT_UNARY[name]}", dt)
    if name in ("logical_not",):
        return Expression("r = x0 == 0", np.dtype(np.bool_))
    if name == "isnan":
        return Expression("r = x0 != x0", np.dtype(np.bool_))
    if name == "isinf":
        body = "r = tl.abs(x0) == float('inf')" if kind_of(dt) == "f" else "r = x0 != x0"
        return Expression(body, np.dtype(np.bool_))
    if name == "bitwise_not":
        return Expression("r = x0 == 0" if kind_of(dt) == "b" else "r = ~x0", dt)
    table = _FLOAT_NUMERIC if kind_of(dt) == "f" else (_UINT_NUMERIC if kind_of(dt) == "u"
                                                   else _INT_NUMERIC)
    return Expression(f"r = {table[name]}", dt)


@functools.cache  # pure: called on every eager op
def binary_expression(name: str, dt: np.dtype[Any]) -> Expression:
    if name in _COMPARE:
        body = _COMPARE[name]
        if kind_of(dt) == "b":  # i1 compares as signed: compare bytes instead
            body = body.replace("x0", "x0.to(tl.uint8)").replace("x1", "x1.to(tl.uint8)")
        return Expression(f"r = {body}", np.dtype(np.bool_))
    if name in _LOGIC:
        return Expression(f"r = (x0 != 0) {_LOGIC[name][3]} (x1 != 0)", np.dtype(np.bool_))
    if name in _BITWISE:
        if kind_of(dt) == "b":  # bitwise on bools: as bytes, then back to bool
            body = _BITWISE[name].replace("x0", "x0.to(tl.uint8)").replace(
                "x1", "x1.to(tl.uint8)")
            return Expression(f"r = ({body}) != 0", dt)
        return Expression(f"r = {_BITWISE[name]}", dt)
    if kind_of(dt) == "f":
        return Expression(f"r = {_FLOAT_BINARY[name]}", dt)
    table = _UINT_BINARY if kind_of(dt) in "ub" else _INT_BINARY
    return Expression("r = " + table[name].format(bits=_bits(dt)), dt)


def where_expression(dt: np.dtype[Any]) -> Expression:
    return Expression("r = tl.where(x0, x1, x2)", dt, widen=False)


def clamp_expression(dt: np.dtype[Any], min: Any = None, max: Any = None) -> Expression:
    scalars: list[tuple[Any, np.dtype[Any]]] = []
    body = ["r = x0"]
    if min is not None:
        body.append(f"r = tl.where(r < s{len(scalars)}, s{len(scalars)}, r)")
        scalars.append((min, dt))
    if max is not None:
        body.append(f"r = tl.where(r > s{len(scalars)}, s{len(scalars)}, r)")
        scalars.append((max, dt))
    return Expression("\n".join(body), dt, scalars=tuple(scalars))


def cast_expression(dt: np.dtype[Any]) -> Expression:
    return Expression("r = x0 != 0" if kind_of(dt) == "b" else "r = x0", dt)


def run(be: TritonBackend, e: Expression, inputs: list[DeviceArray]) -> DeviceArray:
    """Launch the generated elementwise kernel of ``e`` on ``inputs``."""
    scalars = [be.scalar(v, d) for v, d in e.scalars]
    return elementwise(be, e.body, inputs, e.out, scalars=scalars, widen=e.widen)


# Unary and binary ops look their recorded launches up by a key of their own (cheaper than
# `elementwise`'s, which spells out the code): the op's name stands for the code.

def unary(name: str) -> Any:
    def kernel(be: TritonBackend, x: DeviceArray) -> DeviceArray:
        key = ("unary", name, x.shape, x.strides, x.dtype)
        plan = be.elementwise_plans.get(key)
        if plan is not None:
            return run_plan(be, plan, (x,))
        e = unary_expression(name, x.dtype)
        return elementwise(be, e.body, [x], e.out, widen=e.widen, plan_key=key)

    kernel.__name__ = name
    return kernel


def binary(name: str) -> Any:
    def kernel(be: TritonBackend, a: DeviceArray, b: DeviceArray) -> DeviceArray:
        key = ("binary", name, a.shape, a.strides, a.dtype, b.shape, b.strides, b.dtype)
        plan = be.elementwise_plans.get(key)
        if plan is not None:
            return run_binary(be, plan, a, b)
        e = binary_expression(name, a.dtype)
        return elementwise(be, e.body, [a, b], e.out, widen=e.widen, plan_key=key)

    kernel.__name__ = name
    return kernel


def _where(be: TritonBackend, cond: DeviceArray, a: DeviceArray, b: DeviceArray) -> DeviceArray:
    return run(be, where_expression(a.dtype), [cond, a, b])


def _clamp(be: TritonBackend, x: DeviceArray, min: Any = None, max: Any = None) -> DeviceArray:
    if min is None and max is None:
        return x
    return run(be, clamp_expression(x.dtype, min, max), [x])


def _clamp_backward(be: TritonBackend, g: DeviceArray, x: DeviceArray, min: Any = None,
                    max: Any = None) -> DeviceArray:
    """``g`` where ``min <= x <= max``, else 0 (`ember.ops.composite.clamp_backward`)."""
    conds: list[str] = []
    scalars: list[DeviceArray] = []
    for bound, cmp in ((min, ">="), (max, "<=")):
        if bound is not None:
            conds.append(f"(x1 {cmp} s{len(scalars)})")
            scalars.append(be.scalar(bound, x.dtype))
    if not conds:
        return g
    body = f"r = tl.where({' & '.join(conds)}, x0, tl.zeros_like(x0))"
    return elementwise(be, body, [g, x], g.dtype, scalars=scalars)


KERNELS: dict[Any, Any] = {}
for _name in (*ew.FLOAT_UNARY, *ew.NUMERIC_UNARY, *ew.BOOL_UNARY, "bitwise_not"):
    KERNELS[getattr(ew, _name)] = unary(_name)
for _name in (*ew.ARITHMETIC_BINARY, *ew.FLOAT_BINARY, *ew.COMPARISON_BINARY,
              *ew.LOGICAL_BINARY, *ew.BITWISE_BINARY):
    KERNELS[getattr(ew, _name)] = binary(_name)
#: arithmetic binary ops by kernel name whose result keeps the operands' dtype: the ones
#: `TritonBackend.dispatch_binary` answers from recorded launches
SAME_DTYPE_BINARY = {getattr(ew, n): n for n in (*ew.ARITHMETIC_BINARY, *ew.FLOAT_BINARY)
                     if getattr(ew, n).result == "same"}
KERNELS[ew.where] = _where
KERNELS[ew.clamp] = _clamp
KERNELS[cops.clamp_backward] = _clamp_backward
