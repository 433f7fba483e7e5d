"""Elementwise kernels: each op's definition in the kernel IR (`ember.backend.ir`: numpy's and
PyTorch's semantics where C differs) rendered to a C expression (`render`), compiled per dtype
by `run_map`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from ember.backend import ir
from ember.ops import elementwise as ew

from .render import render
from .runtime import CLArray, Runtime, compute_type, ctype, is_float
from .strided import run_map

__all__ = ["binary_expr", "cast_expr", "clamp_expr", "ir_kernel", "kernels", "op_expr",
           "unary_expr"]

BOOL = np.dtype(np.bool_)
_NAMES = ("a", "b", "c", "d")


def op_expr(op: Any, dts: Sequence[np.dtype[Any]]) -> tuple[str, np.dtype[Any], str]:
    """C for elementwise ``op`` on inputs ``a, b, c, d`` of ``dts``: the expression, its
    result dtype and the helper functions it calls."""
    root = ir.expand(op.name, [dt.name for dt in dts])
    expr, helpers = render(root, _NAMES[:len(dts)])
    return expr, BOOL if root.dtype == "bool" else dts[-1], helpers


def unary_expr(op: Any, dt: np.dtype[Any]) -> tuple[str, np.dtype[Any], str]:
    """The C expression of unary ``op`` on ``a`` of ``dt``, its result dtype and the helper
    functions it calls: the op's definition in the kernel IR, rendered (`render`; shared with
    the fusion compiler, so fused kernels compute exactly what these kernels do)."""
    return op_expr(op, [dt])


def binary_expr(op: Any, dt: np.dtype[Any]) -> tuple[str, np.dtype[Any], str]:
    """`unary_expr` for binary ``op`` on ``a``, ``b`` of ``dt``."""
    return op_expr(op, [dt, dt])


def ir_kernel(rt: Runtime, op: Any) -> Callable[..., CLArray]:
    """A kernel of any elementwise ``op`` the kernel IR defines, on inputs of one shape or
    broadcasting (``Backend.ir_kernel``: a new op needs no code here)."""
    def kernel(*xs: CLArray) -> CLArray:
        expr, out_dt, helpers = op_expr(op, [x.dtype for x in xs])
        return run_map(rt, expr, list(xs), dtype=out_dt, helpers=helpers)

    return kernel


def _unary(rt: Runtime, op: Any) -> Callable[[CLArray], CLArray]:
    def kernel(x: CLArray) -> CLArray:
        expr, out_dt, helpers = unary_expr(op, x.dtype)
        return run_map(rt, expr, [x], dtype=out_dt, helpers=helpers)

    return kernel


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
