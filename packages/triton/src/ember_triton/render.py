"""Triton from the kernel IR (`ember.backend.ir`): an op's body as lines of Triton code setting
``r`` from ``x0, x1, ...`` (and scalars ``s0, ...``), the form `elementwise.Expression` holds.

Bools are ``tl.int1``; the float functions call ``triton.language`` or the device functions of
``kernels/mathlib.py`` (correctly rounded float32 division and square root, functions
``triton.language`` lacks), which run compiled and interpreted alike.
"""

from __future__ import annotations

import math
from typing import Any

from ember.backend import ir

__all__ = ["TL_TYPES", "render"]

TL_TYPES = {"bool": "tl.int1", "int8": "tl.int8", "int16": "tl.int16", "int32": "tl.int32",
            "int64": "tl.int64", "uint8": "tl.uint8", "uint16": "tl.uint16",
            "uint32": "tl.uint32", "uint64": "tl.uint64", "float32": "tl.float32",
            "float64": "tl.float64"}
_INFIX = {"add": "+", "sub": "-", "mul": "*", "idiv": "//", "imod": "%", "fmod": "%",
          "lt": "<", "le": "<=", "eq": "==", "ne": "!=", "gt": ">", "ge": ">=",
          "and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>"}
_CALL = {"exp": "tl.exp", "expm1": "expm1_", "log": "tl.log", "log1p": "log1p_",
         "sqrt": "sqrt_", "sin": "tl.sin", "cos": "tl.cos", "tanh": "tanh_", "asin": "asin_",
         "acos": "acos_", "atan": "atan_", "sinh": "sinh_", "cosh": "cosh_", "erf": "tl.erf",
         "floor": "tl.floor", "ceil": "tl.ceil", "rint": "round_", "trunc": "trunc_",
         "fabs": "tl.abs", "atan2": "atan2_", "fdiv": "div_"}


def _const(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "float('nan')"
        if math.isinf(value):
            return "float('inf')" if value > 0 else "float('-inf')"
    return repr(value)


def _expr(v: ir.Value, args: list[str]) -> str:
    op, t = v.op, TL_TYPES[v.dtype]
    if op == "input":
        return f"x{v.arg}"
    if op == "scalar":
        return f"s{v.arg}"
    if op == "const":
        return _const(v.arg)
    consts = [s.op == "const" for s in v.src]
    if op == "cast":
        return f"({args[0]} != 0)" if v.dtype == "bool" else f"{args[0]}.to({t})"
    if op == "where":
        if consts[1] and consts[2]:  # two literals would select in float32: type one
            return f"tl.where({args[0]}, tl.full([1], {args[1]}, {t}), {args[2]}).to({t})"
        return f"tl.where({args[0]}, {args[1]}, {args[2]})"
    if op == "neg":
        return f"(-{args[0]})"
    if op == "invert":
        return f"(~{args[0]})"
    if op == "not":
        return f"({args[0]} == 0)"
    if op == "isnan":
        return f"({args[0]} != {args[0]})"
    if op == "isinf":
        return f"(tl.abs({args[0]}) == float('inf'))"
    if op == "tan":
        return f"(tl.sin({args[0]}) / tl.cos({args[0]}))"
    if op == "pow":  # in float64, with C's special cases (mathlib.fpow_)
        return f"fpow_({args[0]}.to(tl.float64), {args[1]}.to(tl.float64)).to({t})"
    if op in _INFIX:
        return f"({args[0]} {_INFIX[op]} {args[1]})"
    if op == "fdiv" and consts[0]:  # div_ reads its first operand's dtype
        args = [f"(tl.zeros_like({args[1]}) + {args[0]})", args[1]]
    return f"{_CALL[op]}({', '.join(args)})"


def render(root: ir.Value) -> str:
    """Lines of Triton setting ``r`` to ``root``: a subexpression used twice gets a name
    (``t0, t1, ...``), everything else is inlined."""
    lines, expr = ir.spell(root, _expr, lambda v, name, text: f"{name} = {text}")
    if root.op == "const":  # a value of the inputs' shape
        dtype = TL_TYPES[root.dtype]
        return "\n".join([*lines, f"r = tl.full(x0.shape, {expr}, {dtype})"])
    return "\n".join([*lines, f"r = {expr}"])
