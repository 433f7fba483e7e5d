"""Shared builders: one call registers an op's cases over dtypes and input layouts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ... import _dtype as dt
from .._case import Arg, Case, register, rng_for, sample, with_edges

__all__ = ["FLOATS", "ALL", "INTS", "NUMBERS", "float_out", "number_out", "unary", "binary",
           "wrap_to", "case"]

FLOATS = dt.FLOAT_DTYPES
INTS = dt.INT_DTYPES
NUMBERS = (*FLOATS, *INTS)
ALL = dt.ALL_DTYPES


def float_out(d: dt.DType) -> dt.DType:
    return d if d.kind == "f" else dt.float32


def number_out(d: dt.DType) -> dt.DType:
    return dt.int64 if d.kind == "b" else d


def wrap_to(value: Any, out: dt.DType) -> Any:
    """An integer oracle result wrapped to ``out`` as the hardware does (uint8 ``-1`` is 255)."""
    if out.kind in "iu":
        from ..._host import numpy_dtype

        return np.asarray(value).astype(np.int64).astype(numpy_dtype(out))
    return value


def case(id: str, group: str, fn: Callable[..., Any], oracle: Callable[..., Any],
         args: Sequence[Arg], out: Any = None, *, grad: Sequence[int] | None = None,
         **kw: Any) -> Case:
    """Register one op case; ``grad`` defaults to every floating input."""
    if grad is None:
        grad = [i for i, a in enumerate(args) if a.ember_dtype().kind == "f"]
    return register(Case(id=id, group=group, fn=fn, oracle=oracle, args=tuple(args), out=out,
                         grad=tuple(grad), **kw))


def _arg(key: str, shape: tuple[int, ...], d: dt.DType, domain: str, view: str = "",
         expand: tuple[int, ...] = (), edges: bool = False) -> Arg:
    v = sample(shape, d, rng_for(key), domain)
    if edges:
        v = with_edges(np.asarray(v))
    return Arg(np.asarray(v), view, expand, d)


def unary(name: str, fn: Callable[..., Any], oracle: Callable[..., Any], dtypes: Sequence[dt.DType],
          out: Callable[[dt.DType], dt.DType], domain: str = "real", *, group: str = "elementwise",
          edges: bool = True, differentiable: bool = True, **kw: Any) -> None:
    """Cases ``name-{basic,scalar,empty,permuted,sliced,expanded,edges}-{dtype}``."""
    for d in dtypes:
        o = out(d)

        def orc(x: np.ndarray, o: dt.DType = o) -> Any:
            return wrap_to(oracle(x), o)

        layouts: list[tuple[str, tuple[int, ...], str, tuple[int, ...], bool]] = [
            ("basic", (3, 4), "", (), False),
            ("scalar", (), "", (), False),
            ("empty", (0, 3), "", (), False),
            ("permuted", (3, 2, 4), "permuted", (), False),
            ("sliced", (2, 5), "sliced", (), False),
            ("expanded", (3, 1), "expanded", (3, 4), False),
        ]
        if edges and d.kind == "f":
            layouts.append(("edges", (8,), "", (), True))
        for variant, shape, view, expand, edge in layouts:
            cid = f"{name}-{variant}-{d.name}"
            a = _arg(cid, shape, d, domain, view, expand, edge)
            g = (0,) if differentiable and d.kind == "f" and not edge else ()
            case(cid, group, fn, orc, [a], o, grad=g, **kw)


def binary(name: str, fn: Callable[..., Any], oracle: Callable[..., Any],
           dtypes: Sequence[dt.DType], out: Callable[[dt.DType], dt.DType],
           domains: tuple[str, str] = ("real", "real"), *, group: str = "elementwise",
           edges: bool = True, scalar: Any = 2, differentiable: bool = True, **kw: Any) -> None:
    """Cases ``name-{basic,broadcast,scalar,empty,permuted,sliced,expanded,pyscalar,edges}-dt``."""
    da, db = domains
    for d in dtypes:
        o = out(d)

        def orc(a: np.ndarray, b: np.ndarray, o: dt.DType = o) -> Any:
            return wrap_to(oracle(a, b), o)

        layouts: list[tuple[str, tuple[int, ...], tuple[int, ...], str, str, bool]] = [
            ("basic", (3, 4), (3, 4), "", "", False),
            ("broadcast", (2, 3, 4), (3, 1), "", "", False),
            ("scalar", (3, 4), (), "", "", False),
            ("empty", (0, 3), (1, 3), "", "", False),
            ("permuted", (3, 4), (3, 4), "permuted", "permuted", False),
            ("sliced", (2, 5), (2, 5), "sliced", "", False),
            ("expanded", (3, 1), (3, 4), "expanded", "", False),
        ]
        if edges and d.kind == "f":
            layouts.append(("edges", (8,), (8,), "", "", True))
        for variant, sa, sb, va, vb, edge in layouts:
            cid = f"{name}-{variant}-{d.name}"
            a = _arg(cid + "/a", sa, d, da, va, (3, 4) if va == "expanded" else (), edge)
            b = _arg(cid + "/b", sb, d, db, vb)
            g = (0, 1) if differentiable and d.kind == "f" and not edge else ()
            case(cid, group, fn, orc, [a, b], o, grad=g, **kw)
        if scalar is not None:
            cid = f"{name}-pyscalar-{d.name}"
            a = _arg(cid, (3, 4), d, da)
            so = out(dt.result_type_scalar(d, scalar, dt.float32))

            def f1(x: Any, s: Any = scalar) -> Any:
                return fn(x, s)

            def o1(x: np.ndarray, s: Any = scalar, so: dt.DType = so) -> Any:
                return wrap_to(oracle(x, np.asarray(s)), so)

            case(cid, group, f1, o1, [a], so,
                 grad=(0,) if differentiable and d.kind == "f" else (), **kw)
