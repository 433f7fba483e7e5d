"""Triton source for fused groups: the code of each node, and the kernel shapes that hold them.

Each elementwise node is its op's `Expression` (the very code the unfused kernel runs) wrapped
in a ``@triton.jit`` device function; values live in registers in their *storage* dtype (bool as
bytes, half types as themselves) and every use converts them as the unfused kernel's load would
(bool to i1, half to float32 when the op widens), so a fused op sees exactly what the unfused
op reads from memory.

Three kernel shapes:

- ``flat``: every node elementwise with one shape: a 1-D grid over the (collapsed) elements.
- ``block``: a program holds ``BM`` rows and the whole inner extent of every value as an N-D
  block (axes padded to powers of two); reductions over inner axes are ``tl.sum``-style
  reductions of the block; ``cross`` reductions store one partial per program.
- ``loop``: rank-2 groups with long rows: one loop over the row per level of reductions (row
  softmax: max, sum, then the stores), elementwise nodes recomputed in each loop that needs them.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from ._array import kind_of
from ._codegen import TL

__all__ = ["acc_dtype", "conv_load", "conv_store", "identity", "pad"]

_LOW = ("float16", "bfloat16")

HELPERS = '''@triton.jit
def mul_(a, b):
    return a * b

'''


def pad(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def tl_name(dt: np.dtype[Any]) -> str:
    return TL[dt.name]


def conv_store(expr: str, dt: np.dtype[Any]) -> str:
    """A computed value converted to ``dt``'s storage type, as the unfused kernel stores it."""
    if dt.name in _LOW:  # via float32: the interpreter needs that
        return f"({expr}).to(tl.float32).to({TL[dt.name]})"
    return f"({expr}).to({TL[dt.name]})"


def conv_load(var: str, dt: np.dtype[Any], widen: bool) -> str:
    """A stored value as the unfused kernel loads it (``_codegen.load_expr``)."""
    if dt.kind == "b":
        return f"({var} != 0)"
    if widen and dt.name in _LOW:
        return f"{var}.to(tl.float32)"
    return var


def acc_dtype(op: str, dt: np.dtype[Any]) -> np.dtype[Any]:
    """The accumulator of a reduction, as the unfused kernels choose it."""
    if op in ("any", "all"):
        return np.dtype(np.int32)
    if op in ("mean", "var"):
        return np.dtype(np.float64 if dt.name == "float64" else np.float32)
    if dt.name in _LOW:
        return np.dtype(np.float32)
    if kind_of(dt) == "b":
        return np.dtype(np.uint8)
    return dt


def identity(op: str, acc: np.dtype[Any]) -> str:
    if op in ("sum", "any", "mean", "var"):
        return "0"
    if op in ("prod", "all"):
        return "1"
    if kind_of(acc) == "f":
        return "float('-inf')" if op == "max" else "float('inf')"
    info = np.iinfo(acc)
    return str(int(info.min if op == "max" else info.max))


class Functions:
    """The device functions of one kernel source: one per distinct op body."""

    def __init__(self) -> None:
        self.names: dict[tuple[str, int, int], str] = {}
        self.lines: list[str] = []

    def get(self, body: str, nargs: int, nscalars: int) -> str:
        key = (body, nargs, nscalars)
        name = self.names.get(key)
        if name is None:
            name = f"op{len(self.names)}_{hashlib.sha1(body.encode()).hexdigest()[:8]}"
            self.names[key] = name
            params = [f"x{i}" for i in range(nargs)] + [f"s{i}" for i in range(nscalars)]
            self.lines += ["@triton.jit", f"def {name}({', '.join(params)}):"]
            self.lines += [f"    {line}" for line in body.splitlines()]
            self.lines += ["    return r", ""]
        return name

    def source(self) -> str:
        return HELPERS + "\n".join(self.lines) + "\n"


def expand(var: str, r: int, rank: int) -> str:
    """A block of rank ``r`` as rank ``rank``: new axes right after axis 0 (the row axis)."""
    if r >= rank:
        return var
    idx = [":"] + ["None"] * (rank - r) + [":"] * (r - 1)
    return f"{var}[{', '.join(idx)}]"


def axis_index(var: str, axis: int, rank: int) -> str:
    """A 1-D index ``var`` placed on ``axis`` of a rank-``rank`` block."""
    if rank == 1:
        return var
    return f"{var}[{', '.join(':' if a == axis else 'None' for a in range(rank))}]"


def reduce_code(op: str, v: str, axes: list[int], acc: str) -> str:
    """``v`` reduced over ``axes`` (kept as size-1 axes), staying in type ``acc``."""
    for ax in sorted(axes, reverse=True):
        if op in ("sum", "mean", "var"):
            v = f"tl.sum({v}, axis={ax}, keep_dims=True).to({acc})"
        elif op == "prod":
            v = f"tl.reduce({v}, {ax}, mul_, keep_dims=True).to({acc})"
        elif op in ("max", "any"):
            v = f"tl.max({v}, axis={ax}, keep_dims=True).to({acc})"
        else:
            v = f"tl.min({v}, axis={ax}, keep_dims=True).to({acc})"
    return v


def combine_source(op: str, acc: np.dtype[Any], out: np.dtype[Any], count: int) -> str:
    """A kernel reducing ``[P, Q]`` partials over ``P`` into ``out[Q]``."""
    ident = identity(op, acc)
    ta = TL[acc.name]
    if op in ("sum", "mean"):
        step = f"acc = (acc + v).to({ta})"
    elif op == "prod":
        step = f"acc = (acc * v).to({ta})"
    elif op in ("max", "any"):
        step = "acc = tl.where((v != v) | (v > acc), v, acc)"
    else:
        step = "acc = tl.where((v != v) | (v < acc), v, acc)"
    fin = f"acc / {count}" if op == "mean" else "acc"
    if op in ("any", "all"):
        fin = "acc != 0"
    return (HELPERS + "@triton.jit\n"
            "def combine(out, part, P, Q, BQ: tl.constexpr):\n"
            "    q = tl.program_id(0).to(tl.int64) * BQ + tl.arange(0, BQ)\n"
            "    m = q < Q\n"
            f"    acc = tl.full([BQ], {ident}, {ta})\n"
            "    q64 = q * 0 + Q  # int64: P * Q may pass 2^31\n"
            "    for p in range(0, P):\n"
            "        v = tl.load(part + p * q64 + q, mask=m)\n"
            f"        {step}\n"
            f"    tl.store(out + q, {conv_store(fin, out)}, mask=m)\n")
