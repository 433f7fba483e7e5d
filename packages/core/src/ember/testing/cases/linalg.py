# Lambdas with default arguments bind loop variables; mypy cannot infer their types.
# mypy: disable-error-code="misc"
"""matmul (batched, broadcasting, 1-D operands, empty inner axis) and outer."""

from __future__ import annotations

from typing import Any

import numpy as np

import ember

from ... import _dtype as dt
from .._case import Arg, rng_for, sample
from ._build import NUMBERS, case

_SHAPES: dict[str, tuple[tuple[int, ...], tuple[int, ...], str, str]] = {
    "2d": ((3, 4), (4, 5), "", ""),
    "batched": ((2, 3, 4), (2, 4, 5), "", ""),
    "broadcast": ((2, 1, 3, 4), (3, 4, 2), "", ""),
    "vec-mat": ((4,), (4, 3), "", ""),
    "mat-vec": ((3, 4), (4,), "", ""),
    "vec-vec": ((5,), (5,), "", ""),
    "empty-inner": ((3, 0), (0, 2), "", ""),
    "empty-batch": ((0, 3, 4), (4, 2), "", ""),
    "permuted": ((3, 4), (4, 5), "permuted", "permuted"),
    "sliced": ((3, 4), (4, 5), "sliced", ""),
    "expanded": ((1, 4), (4, 2), "expanded", ""),
}

for _d in NUMBERS:
    tol: dict[str, Any] = {"atol": 3e-2, "rtol": 1e-2} if _d in (dt.float16, dt.bfloat16) else {}
    for _variant, (sa, sb, va, vb) in _SHAPES.items():
        cid = f"matmul-{_variant}-{_d.name}"
        rng = rng_for(cid)
        a = Arg(np.asarray(sample(sa, _d, rng)), va, (3, 4) if va == "expanded" else (), _d)
        b = Arg(np.asarray(sample(sb, _d, rng)), vb, (), _d)
        case(cid, "linalg", ember.matmul, lambda x, y: np.asarray(np.matmul(x, y)), [a, b], _d,
             **tol)
    cid = f"matmul-operator-{_d.name}"
    rng = rng_for(cid)
    a, b = (Arg(np.asarray(sample(s, _d, rng)), "", (), _d) for s in ((2, 3), (3, 2)))
    case(cid, "linalg", lambda x, y: x @ y, lambda x, y: x @ y, [a, b], _d, **tol)
    cid = f"outer-{_d.name}"
    a, b = (Arg(np.asarray(sample(s, _d, rng_for(cid))), "", (), _d) for s in ((3,), (4,)))
    case(cid, "linalg", ember.outer, np.outer, [a, b], _d, **tol)
