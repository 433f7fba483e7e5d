"""Type promotion of every dtype pair against the array API's rules, on the device."""

from __future__ import annotations

from typing import Any

import numpy as np

import ember

from ... import _dtype as dt
from .._case import Case, register

_SIGNED = ("int8", "int16", "int32", "int64")
_FLOAT_SIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


def expected_promotion(a: dt.DType, b: dt.DType) -> str:
    """The array API standard's promotion table, written out independently of ember's.

    Within a kind the standard decides: the wider type; ``uint8`` with a signed type gives the
    smallest signed type holding both; ``float16`` with ``bfloat16`` gives ``float32``.  Across
    kinds the standard leaves it open and ember follows PyTorch: bool < integers < floats, the
    higher kind's type unchanged.
    """
    rank = {"b": 0, "i": 1, "u": 1, "f": 2}
    if a is b:
        return a.name
    if rank[a.kind] != rank[b.kind]:
        return (a if rank[a.kind] > rank[b.kind] else b).name
    if a.kind == "f":
        if {a.name, b.name} == {"float16", "bfloat16"}:
            return "float32"
        return a.name if _FLOAT_SIZE[a.name] >= _FLOAT_SIZE[b.name] else b.name
    if "uint8" in (a.name, b.name):
        other = b if a.name == "uint8" else a
        return {"int8": "int16"}.get(other.name, other.name)
    return a.name if _SIGNED.index(a.name) >= _SIGNED.index(b.name) else b.name


def _make(a: dt.DType, b: dt.DType) -> Any:
    want = dt.BY_NAME[expected_promotion(a, b)]

    def make(device: Any) -> Any:
        got = ember.promote_types(a, b)
        assert got is want, f"promote_types({a.name}, {b.name}) is {got.name}, not {want.name}"
        x = ember.ones(2, dtype=a, device=device)
        y = ember.ones(2, dtype=b, device=device)
        return (x + y, x * y, ember.maximum(x, y),
                ember.where(ember.ones(2, dtype=dt.bool_, device=device), x, y), x == y)
    return make


def _expected_ops(a: dt.DType, b: dt.DType) -> tuple[Any, ...]:
    """Result dtypes of ``add, mul, maximum, where, ==`` on ``a`` and ``b``."""
    want = dt.BY_NAME[expected_promotion(a, b)]
    # Note: arithmetic on two bools computes in int64 (docs/design.md), where keeps bool, and
    # so does maximum (their logical or, as PyTorch's)
    arith = dt.int64 if want is dt.bool_ else want
    return (arith, arith, want, want, dt.bool_)


def _ones_of() -> tuple[Any, ...]:
    one = np.ones(2)
    return (np.full(2, 2.0), one, one, one, np.ones(2, dtype=bool))


for _a in dt.ALL_DTYPES:
    for _b in dt.ALL_DTYPES:
        register(Case(id=f"promote-{_a.name}-{_b.name}", group="promotion", make=_make(_a, _b),
                      oracle=_ones_of, out=_expected_ops(_a, _b),
                      dtypes=(_a, _b, dt.BY_NAME[expected_promotion(_a, _b)])))


def _scalar_make(d: dt.DType) -> Any:
    def make(device: Any) -> Any:
        x = ember.ones(2, dtype=d, device=device)
        return (x + 1, x * 1.5, x + True, x / 2)
    return make


def _scalar_out(d: dt.DType) -> tuple[Any, ...]:
    int_want = dt.int64 if d is dt.bool_ else d
    float_want = d if d.kind == "f" else dt.float32
    return (int_want, float_want, int_want, float_want)


for _d in dt.ALL_DTYPES:
    register(Case(id=f"promote-python-scalars-{_d.name}", group="promotion",
                  make=_scalar_make(_d),
                  oracle=lambda: (np.full(2, 2.0), np.full(2, 1.5), np.full(2, 2.0),
                                  np.full(2, 0.5)),
                  out=_scalar_out(_d), dtypes=(_d, dt.float32, dt.int64)))
