"""Elementwise kernels: each op's definition in the kernel IR (`ember.backend.ir`), rendered to
Triton (`render`), compiled per signature by :mod:`ember_triton._codegen`.

float16 and bfloat16 compute in float32; float32 uses correctly rounded division and square
root (``div_rn``, ``sqrt_rn``); transcendental functions beyond ``triton.language``'s own are
written in ``kernels/mathlib.py`` so that they run compiled and interpreted alike.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from ember.backend import ir
from ember.ops import composite as cops
from ember.ops import elementwise as ew

from ._array import DeviceArray, kind_of
from ._codegen import elementwise, run_binary, run_plan
from .render import render

if TYPE_CHECKING:
    from .backend import TritonBackend

__all__ = ["KERNELS", "Expression", "binary", "binary_expression", "cast_expression",
           "clamp_expression", "ir_kernel", "op_expression", "unary", "unary_expression",
           "where_expression"]

_BOOL = np.dtype(np.bool_)


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
    """Op ``name`` on ``x0`` of ``dt``: its definition in the kernel IR, rendered."""
    root = ir.expand(name, [dt.name])
    return Expression(render(root), _BOOL if root.dtype == "bool" else dt)


@functools.cache  # pure: called on every eager op
def binary_expression(name: str, dt: np.dtype[Any]) -> Expression:
    """Op ``name`` on ``x0``, ``x1`` of ``dt``: its definition in the kernel IR, rendered."""
    root = ir.expand(name, [dt.name, dt.name])
    return Expression(render(root), _BOOL if root.dtype == "bool" else dt)


@functools.cache
def op_expression(name: str, dts: tuple[np.dtype[Any], ...]) -> Expression:
    """Any op the kernel IR defines, on ``x0, x1, ...`` of ``dts``."""
    root = ir.expand(name, [dt.name for dt in dts])
    return Expression(render(root), _BOOL if root.dtype == "bool" else dts[-1])


def ir_kernel(name: str) -> Any:
    """A kernel of elementwise op ``name`` from its kernel IR definition (``Backend.ir_kernel``:
    a new op needs no code here)."""
    def kernel(be: TritonBackend, *xs: DeviceArray) -> DeviceArray:
        return run(be, op_expression(name, tuple(x.dtype for x in xs)), list(xs))

    kernel.__name__ = name
    return kernel


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
