"""OpenCL C from the kernel IR (`ember.backend.ir`): an op's body as one C expression, with the
helper function it calls where the body shares a subexpression.

Values compute in C's types for each IR dtype (bools are 0/1 ``uchar``); results of arithmetic
on the narrow integer types are cast back to the type (C computes them in ``int``).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

from ember.backend import ir

__all__ = ["C_TYPES", "render"]

C_TYPES = {"bool": "uchar", "int8": "char", "int16": "short", "int32": "int", "int64": "long",
           "uint8": "uchar", "uint16": "ushort", "uint32": "uint", "uint64": "ulong",
           "float32": "float", "float64": "double"}
_NARROW = frozenset({"int8", "int16", "uint8", "uint16"})
_INFIX = {"add": "+", "sub": "-", "mul": "*", "fdiv": "/", "idiv": "/", "imod": "%",
          "lt": "<", "le": "<=", "eq": "==", "ne": "!=", "gt": ">", "ge": ">=",
          "and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>"}
_CALL = {**{f: f for f in ir.FLOAT_FUNCTIONS}, "isnan": "isnan", "isinf": "isinf",
         "fmod": "fmod", "pow": "pow", "atan2": "atan2"}


def _const(value: Any, dtype: str) -> str:
    t = C_TYPES[dtype]
    if dtype == "bool":
        return "1" if value else "0"
    if isinstance(value, float):
        if math.isnan(value):
            return f"(({t})NAN)"
        if math.isinf(value):
            return f"(({t})INFINITY)" if value > 0 else f"(-({t})INFINITY)"
        text = repr(value)
        return f"{text}f" if dtype == "float32" else text
    return f"(({t}){value})"


def _expr(v: ir.Value, args: list[str], names: Sequence[str]) -> str:
    op, t = v.op, C_TYPES[v.dtype]
    if op == "input":
        return str(names[v.arg])
    if op == "scalar":
        return f"s{v.arg}"
    if op == "const":
        return _const(v.arg, v.dtype)
    if op == "cast":
        if v.dtype == "bool":
            return f"(({args[0]}) != 0)"
        if ir.is_float(v.src[0].dtype) and not ir.is_float(v.dtype):
            return f"(({t})(long)({args[0]}))"  # as numpy on x86: wraps, not undefined
        return f"(({t})({args[0]}))"
    if op == "where":
        return f"(({args[0]}) ? ({args[1]}) : ({args[2]}))"
    if op == "neg":
        code = f"(-{args[0]})"
    elif op == "invert":
        code = f"(~{args[0]})"
    elif op == "not":
        return f"(({args[0]}) == 0)"
    elif op in _INFIX:
        code = f"({args[0]} {_INFIX[op]} {args[1]})"
    else:
        return f"{_CALL[op]}({', '.join(args)})"
    return f"(({t}){code})" if v.dtype in _NARROW else code


def render(root: ir.Value, names: Sequence[str]) -> tuple[str, str]:
    """``(expression, helpers)``: C for ``root`` over inputs named ``names`` (scalars
    ``s0, s1, ...``).  A body that uses a subexpression twice becomes a helper function (its
    source in ``helpers``, named after its hash), called by the expression."""
    order = list(ir.schedule(root))
    uses: dict[int, int] = {}
    for v in order:
        for s in v.src:
            uses[id(s)] = uses.get(id(s), 0) + 1
    shared = any(uses.get(id(v), 0) > 1 and v.src for v in order)
    code: dict[int, str] = {}
    if not shared:
        for v in order:
            code[id(v)] = _expr(v, [code[id(s)] for s in v.src], names)
        return code[id(root)], ""
    # a function of the inputs and scalars the body reads, one SSA line per node
    leaves = [v for v in order if v.op in ("input", "scalar")]
    leaves.sort(key=lambda v: (v.op != "input", v.arg))
    params = [f"{C_TYPES[v.dtype]} {names[v.arg] if v.op == 'input' else f's{v.arg}'}"
              for v in leaves]
    lines: list[str] = []
    for v in order:
        text = _expr(v, [code[id(s)] for s in v.src], names)
        if v.src and v is not root and uses.get(id(v), 0) > 1:
            name = f"t{len(lines)}"
            lines.append(f"    const {C_TYPES[v.dtype]} {name} = {text};")
            text = name
        code[id(v)] = text
    body = "\n".join([*lines, f"    return {code[id(root)]};"])
    digest = hashlib.sha1(f"{params}{body}".encode()).hexdigest()[:12]
    fn = f"ir_{digest}"
    helper = f"\n{C_TYPES[root.dtype]} {fn}({', '.join(params)})\n{{\n{body}\n}}\n"
    call = ", ".join(names[v.arg] if v.op == "input" else f"s{v.arg}" for v in leaves)
    return f"{fn}({call})", helper
