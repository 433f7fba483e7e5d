"""A language's spelling of the kernel IR's primitives (`ember.backend.ir`) as expressions.

What every C-like renderer (OpenCL C, WGSL) spells alike lives in `CodeTable.expr`, once:
inputs by their names, scalars ``s0, s1, ...``, negation and bitwise not, the infix operators
of `CodeTable.INFIX` and the calls of `CodeTable.CALL`.  A language gives its tables, its
constants, casts, select and logical not, how a result of a narrow type is wrapped, and any op
it spells its own way (`CodeTable.special`), in the manner of tinygrad's ``code_for_op``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from .ir import Value

__all__ = ["CodeTable"]


class CodeTable:
    """The spelling of the IR's primitives in one language (see the module docstring)."""

    #: the binary primitives written ``(a OP b)``
    INFIX: ClassVar[dict[str, str]]
    #: the primitives written as a call ``fn(args)``, by function name
    CALL: ClassVar[dict[str, str]]
    #: ``where`` over ``{0}`` (the condition), ``{1}`` and ``{2}``
    WHERE: ClassVar[str]
    #: logical ``not`` over ``{0}``
    NOT: ClassVar[str]

    def const(self, value: Any, dtype: str) -> str:
        raise NotImplementedError

    def cast(self, x: str, src: str, dst: str) -> str:
        raise NotImplementedError

    def wrap(self, code: str, dtype: str) -> str:
        """An arithmetic result ``code`` brought back into ``dtype``'s range."""
        return code

    def special(self, v: Value, args: list[str]) -> str | None:
        """The language's own spelling of ``v`` where it has one (else None)."""
        return None

    def check(self, v: Value) -> None:
        """Refuse a node the language cannot spell (after leaves and constants)."""

    def expr(self, v: Value, args: list[str], names: Sequence[str]) -> str:
        """Node ``v`` over its sources' spellings ``args`` (inputs named ``names``)."""
        op = v.op
        if op == "input":
            return str(names[v.arg])
        if op == "scalar":
            return f"s{v.arg}"
        if op == "const":
            return self.const(v.arg, v.dtype)
        self.check(v)
        if op == "cast":
            return self.cast(args[0], v.src[0].dtype, v.dtype)
        if op == "where":
            return self.WHERE.format(*args)
        if op == "not":
            return self.NOT.format(*args)
        own = self.special(v, args)
        if own is not None:
            return own
        if op == "neg":
            code = f"(-{args[0]})"
        elif op == "invert":
            code = f"(~{args[0]})"
        elif op in self.INFIX:
            code = f"({args[0]} {self.INFIX[op]} {args[1]})"
        else:
            return f"{self.CALL[op]}({', '.join(args)})"
        return self.wrap(code, v.dtype)
