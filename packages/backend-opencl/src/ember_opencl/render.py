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
from ember.backend.spelling import CodeTable

__all__ = ["C_TYPES", "TABLE", "render"]

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


class _C(CodeTable):
    INFIX = _INFIX
    CALL = _CALL
    WHERE = "(({0}) ? ({1}) : ({2}))"
    NOT = "(({0}) == 0)"

    def const(self, value: Any, dtype: str) -> str:
        return _const(value, dtype)

    def cast(self, x: str, src: str, dst: str) -> str:
        t = C_TYPES[dst]
        if dst == "bool":
            return f"(({x}) != 0)"
        if ir.is_float(src) and not ir.is_float(dst):
            return f"(({t})(long)({x}))"  # as numpy on x86: wraps, not undefined
        return f"(({t})({x}))"

    def wrap(self, code: str, dtype: str) -> str:
        return f"(({C_TYPES[dtype]}){code})" if dtype in _NARROW else code


#: OpenCL C's spelling of the IR's primitives
TABLE = _C()


def render(root: ir.Value, names: Sequence[str]) -> tuple[str, str]:
    """``(expression, helpers)``: C for ``root`` over inputs named ``names`` (scalars
    ``s0, s1, ...``).  A body that uses a subexpression twice becomes a helper function (its
    source in ``helpers``, named after its hash), called by the expression."""
    lines, result = ir.spell(root, lambda v, args: TABLE.expr(v, args, names),
                             lambda v, name, text: f"    const {C_TYPES[v.dtype]} {name} = {text};")
    if not lines:
        return result, ""
    # a function of the inputs and scalars the body reads, one SSA line per shared node
    leaves = [v for v in ir.schedule(root) if v.op in ("input", "scalar")]
    leaves.sort(key=lambda v: (v.op != "input", v.arg))
    params = [f"{C_TYPES[v.dtype]} {names[v.arg] if v.op == 'input' else f's{v.arg}'}"
              for v in leaves]
    body = "\n".join([*lines, f"    return {result};"])
    digest = hashlib.sha1(f"{params}{body}".encode()).hexdigest()[:12]
    fn = f"ir_{digest}"
    helper = f"\n{C_TYPES[root.dtype]} {fn}({', '.join(params)})\n{{\n{body}\n}}\n"
    call = ", ".join(names[v.arg] if v.op == "input" else f"s{v.arg}" for v in leaves)
    return f"{fn}({call})", helper
