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


def _check(a: dt.DType, b: dt.DType) -> Any:
    want = dt.BY_NAME[expected_promotion(a, b)]

    def check(device: Any) -> None:
        got = ember.promote_types(a, b)
        assert got is want, f"promote_types({a.name}, {b.name}) is {got.name}, not {want.name}"
        x = ember.ones(2, dtype=a, device=device)
        y = ember.ones(2, dtype=b, device=device)
        # Note: arithmetic on two bools computes in int64 (docs/design.md), where keeps bool
        arith = dt.int64 if want is dt.bool_ else want
        ops = {"add": (x + y, arith), "mul": (x * y, arith),
               "maximum": (ember.maximum(x, y), arith),
               "where": (ember.where(ember.ones(2, dtype=dt.bool_, device=device), x, y), want)}
        for name, (out, expect_dtype) in ops.items():
            assert out.dtype is expect_dtype, (
                f"{name}({a.name}, {b.name}) gave {out.dtype.name}, not {expect_dtype.name}")
        np.testing.assert_array_equal(np.asarray((x + y).numpy(), dtype=np.float64),
                                      np.full(2, 2.0))
        cmp = x == y
        assert cmp.dtype is dt.bool_ and bool(cmp.all().item())
    return check


for _a in dt.ALL_DTYPES:
    for _b in dt.ALL_DTYPES:
        register(Case(id=f"promote-{_a.name}-{_b.name}", group="promotion", check=_check(_a, _b),
                      dtypes=(_a, _b, dt.BY_NAME[expected_promotion(_a, _b)])))


def _scalar_check(d: dt.DType) -> Any:
    def check(device: Any) -> None:
        x = ember.ones(2, dtype=d, device=device)
        int_want = dt.int64 if d is dt.bool_ else d
        float_want = d if d.kind == "f" else dt.float32
        assert (x + 1).dtype is int_want, f"{d.name} + 1 gave {(x + 1).dtype.name}"
        assert (x * 1.5).dtype is float_want, f"{d.name} * 1.5 gave {(x * 1.5).dtype.name}"
        assert (x + True).dtype is int_want, f"{d.name} + True gave {(x + True).dtype.name}"
        assert (x / 2).dtype is float_want, f"{d.name} / 2 gave {(x / 2).dtype.name}"
        np.testing.assert_allclose(np.asarray((x * 1.5).numpy(), dtype=np.float64), [1.5, 1.5])
    return check


for _d in dt.ALL_DTYPES:
    register(Case(id=f"promote-python-scalars-{_d.name}", group="promotion",
                  check=_scalar_check(_d),
                  dtypes=(_d, dt.float32, dt.int64)))
