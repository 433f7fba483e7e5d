"""Elementwise kernels: each op's definition in the kernel IR (`ember.backend.ir`: numpy's and
PyTorch's semantics where WGSL differs) rendered to WGSL (`render`), one pipeline per op and
dtypes, run over any broadcast and strides by `run_map`.  ``clamp`` and ``cast`` are built in
the IR here (they take scalars, or are no named op of it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember.backend import ir
from ember.ops import elementwise as ew

from .render import render
from .runtime import Runtime, WGArray
from .strided import NAMES, run_map

__all__ = ["cast", "ir_kernel", "kernels", "op_body"]

BOOL = np.dtype(np.bool_)


def _result(root: ir.Value, dts: Sequence[np.dtype[Any]]) -> np.dtype[Any]:
    return BOOL if root.dtype == "bool" else dts[-1]


def op_body(op: Any, dts: Sequence[np.dtype[Any]]) -> tuple[ir.Value, np.dtype[Any]]:
    """The IR body of elementwise ``op`` on inputs of ``dts`` and its result dtype."""
    root = ir.expand(op.name, [dt.name for dt in dts])
    return root, _result(root, dts)


_RENDERED: dict[tuple[Any, ...], tuple[list[str], str, np.dtype[Any]]] = {}


def _rendered(op: Any, dts: Sequence[np.dtype[Any]]) -> tuple[list[str], str, np.dtype[Any]]:
    key = (op.name, tuple(dts))
    got = _RENDERED.get(key)
    if got is None:
        root, out = op_body(op, dts)
        r = render(root, NAMES[:len(dts)])
        got = _RENDERED[key] = (r.lines, r.expr, out)
    return got


def ir_kernel(rt: Runtime, op: Any) -> Callable[..., WGArray]:
    """A kernel of any elementwise ``op`` the kernel IR defines, on inputs of one shape or
    broadcasting (``Backend.ir_kernel``: a new op needs no code here)."""
    def kernel(*xs: WGArray) -> WGArray:
        lines, expr, out = _rendered(op, [x.dtype for x in xs])
        return run_map(rt, expr, list(xs), dtype=out, lines=lines)

    kernel.__name__ = op.name
    return kernel


def cast_body(src: np.dtype[Any], dst: np.dtype[Any]) -> ir.Value:
    b = ir.Builder()
    return ir.cast(b.input(0, src.name), dst.name)


def cast(rt: Runtime, x: WGArray, dtype: np.dtype[Any]) -> WGArray:
    dtype = np.dtype(dtype)
    if dtype == x.dtype:
        return run_map(rt, "a", [x])
    r = render(cast_body(x.dtype, dtype), ["a"])
    return run_map(rt, r.expr, [x], dtype=dtype, lines=r.lines)


def clamp_body(dt: np.dtype[Any], lo: bool, hi: bool) -> ir.Value:
    """``clamp`` of input 0 between scalars (``s0`` the lower bound where there is one):
    bounds are x's dtype; nan stays nan (its comparisons are false)."""
    b = ir.Builder()
    x = v = b.input(0, dt.name)
    if lo:
        s = b.scalar(0, dt.name)
        v = ir.where(x.lt(s), s, v)
    if hi:
        s = b.scalar(1 if lo else 0, dt.name)
        v = ir.where(x.gt(s), s, v)
    return v


def _clamp(rt: Runtime) -> Callable[..., WGArray]:
    def kernel(x: WGArray, min: Any = None, max: Any = None) -> WGArray:
        root = clamp_body(x.dtype, min is not None, max is not None)
        r = render(root, ["a"])
        ct = ir.compute_dtype(x.dtype.name)
        scalars = [(ct, _scalar(v, x.dtype)) for v in (min, max) if v is not None]
        return run_map(rt, r.expr, [x], lines=r.lines, scalars=scalars)

    return kernel


def _scalar(v: Any, dt: np.dtype[Any]) -> Any:
    if dt.kind == "b":
        return bool(v)
    return np.asarray(v).astype(dt)[()]


def kernels(rt: Runtime) -> dict[Any, Any]:
    # every elementwise op comes from the IR through Backend.ir_kernel; clamp takes scalars
    return {ew.clamp: _clamp(rt)}
