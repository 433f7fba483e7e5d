# Lambdas with default arguments bind loop variables; mypy cannot infer their types.
# mypy: disable-error-code="misc"
"""Set, counting and closeness functions: unique, bincount, isclose and allclose."""

from __future__ import annotations

from typing import Any

import numpy as np

import ember

from ... import _dtype as dt
from .._case import Arg, Case, register, rng_for, sample
from ._build import case
from .errors import _raises


def _unique(v: np.ndarray) -> Any:
    values, inverse, counts = np.unique(v, return_inverse=True, return_counts=True)
    return values, inverse.reshape(v.shape), counts


for _d in (dt.int64, dt.int32, dt.float32):
    cid = f"unique-{_d.name}"
    v = Arg(np.asarray(sample((3, 4), _d, rng_for(cid), "small")), "permuted", (), _d)
    case(cid, "sets", ember.unique, lambda x: np.unique(x), [v], _d, grad=())
    case(f"unique-inverse-counts-{_d.name}", "sets",
         lambda t: ember.unique(t, return_inverse=True, return_counts=True), _unique, [v],
         (_d, dt.int64, dt.int64), grad=())


def _unique_dim(v: np.ndarray, axis: int) -> Any:
    values, inverse, counts = np.unique(v, return_inverse=True, return_counts=True, axis=axis)
    return values, inverse.reshape(-1), counts


for _d in (dt.int64, dt.float32):
    for _axis in (0, -1):
        cid = f"unique-dim{_axis}-{_d.name}"
        # five slices, three of them twice, in a shuffled order (and a permuted view)
        base = np.asarray(sample((5, 2, 3) if _axis == 0 else (3, 2, 5), _d, rng_for(cid),
                                 "small"))
        v = Arg(np.ascontiguousarray(np.take(base, [2, 0, 4, 1, 2, 4, 3, 0], axis=_axis)),
                "permuted", (), _d)
        case(cid, "sets",
             lambda t, a=_axis: ember.unique(t, dim=a, return_inverse=True, return_counts=True),
             lambda x, a=_axis: _unique_dim(x, a), [v], (_d, dt.int64, dt.int64), grad=())

for _d in (dt.int64, dt.int32):
    cid = f"bincount-{_d.name}"
    v = Arg(np.asarray(sample((9,), _d, rng_for(cid), "small")) * 2, "", (), _d)
    case(cid, "sets", ember.bincount, lambda x: np.bincount(x), [v], dt.int64, grad=())
for _d in (dt.float32, dt.float64):
    cid = f"bincount-weights-minlength-{_d.name}"
    rng = rng_for(cid)
    v = Arg(np.asarray(sample((9,), dt.int64, rng, "small")), "", (), dt.int64)
    w = Arg(np.asarray(sample((9,), _d, rng)), "", (), _d)
    case(cid, "sets", lambda x, ws: ember.bincount(x, ws, minlength=6),
         lambda x, ws: np.bincount(x, ws, minlength=6), [v, w], _d, grad=(1,))
    cid = f"isclose-{_d.name}"
    a = np.array([1.0, 1.0, np.inf, -np.inf, np.nan, 0.0, 1e-9])
    b = np.array([1.0 + 1e-7, 1.1, np.inf, np.inf, np.nan, 1e-9, 0.0])
    x1, x2 = (Arg(np.asarray(t, dtype=_d.numpy_name), "", (), _d) for t in (a, b))
    for nan in (False, True):
        case(f"{cid}{'-equal_nan' if nan else ''}", "sets",
             lambda s, t, nan=nan: ember.isclose(s, t, rtol=1e-5, atol=1e-8, equal_nan=nan),
             lambda s, t, nan=nan: np.isclose(s, t, rtol=1e-5, atol=1e-8, equal_nan=nan),
             [x1, x2], dt.bool_, grad=())


def _allclose(device: Any) -> None:
    a = ember.tensor([1.0, 2.0, 3.0], device=device)
    assert ember.allclose(a, a + 1e-7) is True
    assert a.allclose(a + 1e-3) is False
    assert ember.allclose(a, ember.tensor([[1.0, 2.0, 3.0]] * 2, device=device))  # broadcasts
    nan = ember.tensor([float("nan")], device=device)
    assert not ember.allclose(nan, nan) and ember.allclose(nan, nan, equal_nan=True)
    assert ember.allclose(a, a + 0.5, rtol=0.0, atol=0.5) and not ember.allclose(a, a + 0.5,
                                                                                 atol=0.4)


def _count_errors(device: Any) -> None:
    with _raises(ValueError, "bincount", "negative", "-3"):
        ember.bincount(ember.tensor([1, -3, 2], device=device))
    with _raises(ember.ShapeError, "bincount", "1-D", "(2, 2)"):
        ember.bincount(ember.ones(2, 2, dtype=dt.int64, device=device))
    with _raises(ember.DTypeError, "bincount", "float32"):
        ember.bincount(ember.ones(3, device=device))
    with _raises(ember.ShapeError, "bincount", "weights", "(2,)", "(3,)"):
        ember.bincount(ember.tensor([0, 1, 2], device=device), ember.ones(2, device=device))


register(Case(id="allclose-python-bool", group="sets", check=_allclose, dtypes=(dt.float32,)))
register(Case(id="error-bincount-names-values-and-shapes", group="errors", check=_count_errors,
              dtypes=(dt.float32, dt.int64)))
