"""Elementwise kernels: each op is a C expression template, compiled per dtype by `run_map`.

Semantics follow numpy/PyTorch where C differs: Python-style ``floordiv``/``remainder``, nan
propagating ``maximum``/``minimum``, integer division by zero giving 0 instead of trapping.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from ember.ops import elementwise as ew

from .runtime import CLArray, Runtime, compute_type, ctype, is_float
from .strided import run_map

__all__ = ["binary_expr", "cast_expr", "clamp_expr", "kernels", "unary_expr"]

BOOL = np.dtype(np.bool_)


def _is_float(dt: np.dtype[Any]) -> bool:
    return is_float(dt)


def _bits(dt: np.dtype[Any]) -> int:
    return dt.itemsize * 8


# -- helpers, specialised per type ------------------------------------------------------------

def _floordiv_helper(t: str, is_float: bool, unsigned: bool) -> str:
    if is_float:
        # numpy's npy_divmod: exact floor of the quotient
        return f"""
{t} fdiv_{t}({t} a, {t} b) {{
    if (b == 0) return a / b;
    {t} mod = fmod(a, b);
    {t} div = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1;
    if (div == 0) return copysign(({t})0, a / b);
    {t} fl = floor(div);
    if (div - fl > ({t})0.5) fl += 1;
    return fl;
}}"""
    if unsigned:
        return f"{t} fdiv_{t}({t} a, {t} b) {{ return b == 0 ? 0 : a / b; }}"
    return f"""
{t} fdiv_{t}({t} a, {t} b) {{
    if (b == 0) return 0;
    if (b == -1) return ({t})(-a);
    {t} q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
    return q;
}}"""


def _remainder_helper(t: str, is_float: bool, unsigned: bool) -> str:
    if is_float:
        return f"""
{t} fmod_{t}({t} a, {t} b) {{
    {t} m = fmod(a, b);
    if (b == 0) return m;
    if (m != 0) {{ if ((b < 0) != (m < 0)) m += b; }}
    else m = copysign(({t})0, b);
    return m;
}}"""
    if unsigned:
        return f"{t} fmod_{t}({t} a, {t} b) {{ return b == 0 ? 0 : a % b; }}"
    return f"""
{t} fmod_{t}({t} a, {t} b) {{
    if (b == 0 || b == -1) return 0;
    {t} m = a % b;
    if (m != 0 && ((m < 0) != (b < 0))) m += b;
    return m;
}}"""


def _ipow_helper(t: str, unsigned: bool) -> str:
    neg = "" if unsigned else (
        "if (b < 0) { if (a == 1) return 1; if (a == -1) return (b & 1) ? -1 : 1; return 0; }")
    return f"""
{t} ipow_{t}({t} a, {t} b) {{
    {neg}
    {t} r = 1;
    while (b) {{ if (b & 1) r = ({t})(r * a); a = ({t})(a * a); b >>= 1; }}
    return r;
}}"""


# -- expression tables --------------------------------------------------------------------------

_FLOAT_UNARY = {
    ew.exp: "exp(a)", ew.expm1: "expm1(a)", ew.log: "log(a)", ew.log1p: "log1p(a)",
    ew.sqrt: "sqrt(a)", ew.rsqrt: "({t})1 / sqrt(a)", ew.sin: "sin(a)", ew.cos: "cos(a)",
    ew.tan: "tan(a)", ew.tanh: "tanh(a)", ew.asin: "asin(a)", ew.acos: "acos(a)",
    ew.atan: "atan(a)", ew.sinh: "sinh(a)", ew.cosh: "cosh(a)", ew.erf: "erf(a)",
    ew.sigmoid: "({t})1 / (({t})1 + exp(-a))", ew.reciprocal: "({t})1 / a",
    ew.floor: "floor(a)", ew.ceil: "ceil(a)", ew.round: "rint(a)", ew.trunc: "trunc(a)",
}

_CMP = {ew.eq: "==", ew.ne: "!=", ew.lt: "<", ew.le: "<=", ew.gt: ">", ew.ge: ">="}


def unary_expr(op: Any, dt: np.dtype[Any]) -> tuple[str, np.dtype[Any]]:
    """The C expression of unary ``op`` on ``a`` of ``dt``, and its result dtype (shared with
    the fusion compiler, so fused kernels compute exactly what these kernels do)."""
    t = compute_type(dt)
    out_dt = dt
    if op in _FLOAT_UNARY:
        if not _is_float(dt):
            return "a", dt  # floor/ceil/round/trunc of ints: identity
        expr = _FLOAT_UNARY[op].format(t=t)
    elif op is ew.neg:
        expr = "-a"
    elif op is ew.abs:
        expr = "fabs(a)" if _is_float(dt) else ("a" if dt.kind in "ub" else "(a < 0 ? -a : a)")
    elif op is ew.sign:
        expr = (f"(a > 0 ? ({t})1 : (a < 0 ? ({t})-1 : a))" if _is_float(dt)
                else "((a > 0) - (a < 0))")
    elif op is ew.logical_not:
        expr, out_dt = "a == 0", BOOL
    elif op is ew.isnan:
        expr, out_dt = ("isnan(a)" if _is_float(dt) else "0"), BOOL
    elif op is ew.isinf:
        expr, out_dt = ("isinf(a)" if _is_float(dt) else "0"), BOOL
    elif op is ew.bitwise_not:
        expr = "a == 0" if dt.kind == "b" else "~a"
    else:  # pragma: no cover - table and dispatch list agree
        raise NotImplementedError(op.name)
    return expr, out_dt


def _unary(rt: Runtime, op: Any) -> Callable[[CLArray], CLArray]:
    def kernel(x: CLArray) -> CLArray:
        expr, out_dt = unary_expr(op, x.dtype)
        return run_map(rt, expr, [x], dtype=out_dt)

    return kernel


def binary_expr(op: Any, dt: np.dtype[Any]) -> tuple[str, np.dtype[Any], str]:
    """The C expression of binary ``op`` on ``a``, ``b`` of ``dt``, its result dtype and the
    helper functions it calls (shared with the fusion compiler)."""
    t = compute_type(dt)
    fl, uns = _is_float(dt), dt.kind in "ub"
    helpers = ""
    out_dt = dt
    if op is ew.add:
        expr = "a + b"
    elif op is ew.sub:
        expr = "a - b"
    elif op is ew.mul:
        expr = "a * b"
    elif op is ew.div:
        expr = "a / b"
    elif op is ew.atan2:
        expr = "atan2(a, b)"
    elif op is ew.floordiv:
        helpers, expr = _floordiv_helper(t, fl, uns), f"fdiv_{t}(a, b)"
    elif op is ew.remainder:
        helpers, expr = _remainder_helper(t, fl, uns), f"fmod_{t}(a, b)"
    elif op is ew.pow:
        if fl:
            expr = "pow(a, b)"
        else:
            helpers, expr = _ipow_helper(t, uns), f"ipow_{t}(a, b)"
    elif op is ew.maximum:
        expr = ("(isnan(a) ? a : (isnan(b) ? b : (a > b ? a : b)))" if fl
                else "(a > b ? a : b)")
    elif op is ew.minimum:
        expr = ("(isnan(a) ? a : (isnan(b) ? b : (a < b ? a : b)))" if fl
                else "(a < b ? a : b)")
    elif op in _CMP:
        expr, out_dt = f"a {_CMP[op]} b", BOOL
    elif op is ew.logical_and:
        expr, out_dt = "(a != 0) && (b != 0)", BOOL
    elif op is ew.logical_or:
        expr, out_dt = "(a != 0) || (b != 0)", BOOL
    elif op is ew.logical_xor:
        expr, out_dt = "(a != 0) != (b != 0)", BOOL
    elif op is ew.bitwise_and:
        expr = "a & b"
    elif op is ew.bitwise_or:
        expr = "a | b"
    elif op is ew.bitwise_xor:
        expr = "a ^ b"
    elif op is ew.left_shift:
        bits = _bits(dt)
        expr = f"((b < 0 || b >= {bits}) ? 0 : ({t})(a << b))"
        if dt.kind == "b":
            expr = f"({expr}) != 0"
    elif op is ew.right_shift:
        bits = _bits(dt)
        sat = "0" if uns else "(a < 0 ? -1 : 0)"
        expr = f"((b < 0 || b >= {bits}) ? {sat} : (a >> b))"
        if dt.kind == "b":
            expr = f"({expr}) != 0"
    else:  # pragma: no cover
        raise NotImplementedError(op.name)
    return expr, out_dt, helpers


def _binary(rt: Runtime, op: Any) -> Callable[[CLArray, CLArray], CLArray]:
    def kernel(x: CLArray, y: CLArray) -> CLArray:
        expr, out_dt, helpers = binary_expr(op, x.dtype)
        return run_map(rt, expr, [x, y], dtype=out_dt, helpers=helpers)

    return kernel


def _where(rt: Runtime) -> Callable[..., CLArray]:
    def kernel(cond: CLArray, x: CLArray, y: CLArray) -> CLArray:
        return run_map(rt, "a ? b : c", [cond, x, y], dtype=x.dtype)

    return kernel


def clamp_expr(dt: np.dtype[Any], min: Any = None, max: Any = None
               ) -> tuple[str, list[tuple[str, Any]]]:
    """The C expression of ``clamp`` on ``a`` of ``dt`` and its scalars ``s0``, ``s1`` as
    (C type, value) pairs (shared with the fusion compiler)."""
    t = compute_type(dt)
    expr, scalars = "a", []
    # Note: bounds are cast to x's dtype first; nan stays nan (comparisons are false)
    if min is not None:
        scalars.append((t, _cast_scalar(min, dt)))
        expr = f"({expr} < s0 ? s0 : {expr})"
    if max is not None:
        j = len(scalars)
        scalars.append((t, _cast_scalar(max, dt)))
        expr = f"(a > s{j} ? s{j} : {expr})" if min is None else \
            f"(a > s{j} ? s{j} : (a < s0 ? s0 : a))"
    return expr, scalars


def _clamp(rt: Runtime) -> Callable[..., CLArray]:
    def kernel(x: CLArray, min: Any = None, max: Any = None) -> CLArray:
        expr, scalars = clamp_expr(x.dtype, min, max)
        return run_map(rt, expr, [x], scalars=scalars)

    return kernel


def _cast_scalar(v: Any, dt: np.dtype[Any]) -> Any:
    if dt.kind == "b":
        return int(bool(v))
    return np.asarray(v).astype(dt)[()]


def cast_expr(src: np.dtype[Any], dst: np.dtype[Any]) -> str:
    """The C expression converting ``a`` of ``src`` to ``dst``."""
    if dst.kind == "b":
        return "a != 0"
    if is_float(src) and dst.kind in "iu":
        # float -> narrow int goes through long, as numpy does on x86 (wraps instead of UB)
        return f"({ctype(dst)})(long)a"
    return "a"


def cast(rt: Runtime, x: CLArray, dtype: np.dtype[Any]) -> CLArray:
    return run_map(rt, cast_expr(x.dtype, dtype), [x], dtype=dtype)


_UNARY_OPS = (*(getattr(ew, n) for n in (*ew.FLOAT_UNARY, *ew.NUMERIC_UNARY, *ew.BOOL_UNARY)),
              ew.bitwise_not)
_BINARY_OPS = tuple(getattr(ew, n) for n in (*ew.ARITHMETIC_BINARY, *ew.FLOAT_BINARY,
                                             *ew.COMPARISON_BINARY, *ew.LOGICAL_BINARY,
                                             *ew.BITWISE_BINARY))


def kernels(rt: Runtime) -> dict[Any, Any]:
    table: dict[Any, Any] = {op: _unary(rt, op) for op in _UNARY_OPS}
    table.update({op: _binary(rt, op) for op in _BINARY_OPS})
    table[ew.where] = _where(rt)
    table[ew.clamp] = _clamp(rt)
    return table
