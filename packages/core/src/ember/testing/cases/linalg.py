# Lambdas with default arguments bind loop variables; mypy cannot infer their types.
# mypy: disable-error-code="misc"
"""matmul (batched, broadcasting, 1-D operands, empty inner axis) and outer."""

from __future__ import annotations

from typing import Any

import numpy as np

import ember

from ... import _dtype as dt
from .._case import Arg, Case, register, rng_for, sample
from ._build import NUMBERS, case
from .errors import _raises

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


# -- einsum, bmm, cdist, vector_norm, normalize (composites of matmul, sums, slices) -------------

def _cdist(a: np.ndarray, b: np.ndarray, p: float) -> Any:
    d = np.abs(a[..., :, None, :] - b[..., None, :, :])
    if p == np.inf:
        return d.max(-1)
    if p == 0:
        return (d != 0).sum(-1).astype(np.float64)
    return (d ** p).sum(-1) ** (1.0 / p)


def _vector_norm(x: np.ndarray, ord: float, axis: Any, keepdims: bool = False) -> Any:
    a = np.abs(x)
    if ord == np.inf:
        return a.max(axis=axis, keepdims=keepdims)
    if ord == -np.inf:
        return a.min(axis=axis, keepdims=keepdims)
    if ord == 0:
        return (a != 0).sum(axis=axis, keepdims=keepdims).astype(np.float64)
    return (a ** ord).sum(axis=axis, keepdims=keepdims) ** (1.0 / ord)


_EINSUM: dict[str, tuple[str, tuple[tuple[int, ...], ...], str]] = {
    # id: (equation, operand shapes, view of the first operand); numpy's einsum cannot sum
    # over an ellipsis, so its oracle names that axis
    "matmul": ("ij,jk->ik", ((3, 4), (4, 5)), "permuted"),
    "batched-implicit": ("bij,bjk", ((2, 3, 4), (2, 4, 5)), ""),
    "three-operands": ("bij,bjk,k->bi", ((2, 3, 4), (2, 4, 5), (5,)), ""),
    "ellipsis-broadcast": ("...ij,...jk->...ik", ((2, 1, 3, 4), (3, 4, 2)), ""),
    "ellipsis-summed": ("...ij,...jk->ik", ((2, 3, 4), (2, 4, 5)), "sliced"),
    "outer-transposed": ("i,j->ji", ((3,), (4,)), ""),
    "diagonal-trace": ("iji->j", ((3, 2, 3),), ""),
    "sum-permute": ("abc->ca", ((2, 3, 4),), "permuted"),
}

for _d in (dt.float32, dt.float64):
    for _variant, (eq, shapes, view) in _EINSUM.items():
        cid = f"einsum-{_variant}-{_d.name}"
        rng = rng_for(cid)
        args = [Arg(np.asarray(sample(s, _d, rng)), view if i == 0 else "", (), _d)
                for i, s in enumerate(shapes)]
        case(cid, "linalg", lambda *ts, eq=eq: ember.einsum(eq, *ts),
             lambda *vs, eq=eq: np.einsum(eq.replace("...ij,...jk->ik", "bij,bjk->ik"), *vs),
             args, _d)
    cid = f"bmm-{_d.name}"
    rng = rng_for(cid)
    a, b = (Arg(np.asarray(sample(s, _d, rng)), v, (), _d)
            for s, v in (((2, 3, 4), "permuted"), ((2, 4, 5), "")))
    case(cid, "linalg", lambda x, y: x.bmm(y), np.matmul, [a, b], _d)
    for p, tag in ((2.0, "p2"), (1.0, "p1"), (np.inf, "pinf"), (3.0, "p3"), (0.0, "p0")):
        cid = f"cdist-{tag}-{_d.name}"
        rng = rng_for(cid)
        x1 = Arg(np.asarray(sample((2, 4, 3), _d, rng)), "", (), _d)
        x2 = Arg(np.asarray(sample((1, 5, 3), _d, rng)), "", (), _d)
        case(cid, "linalg", lambda a, b, p=p: ember.cdist(a, b, p=p),
             lambda a, b, p=p: _cdist(a, b, p), [x1, x2], _d, grad=() if p == 0 else None)
    cid = f"cdist-mm-{_d.name}"  # |a|^2 + |b|^2 - 2 a.b, as PyTorch past 25 rows
    rng = rng_for(cid)
    x1 = Arg(np.asarray(sample((30, 3), _d, rng)), "", (), _d)
    x2 = Arg(np.asarray(sample((4, 3), _d, rng)), "", (), _d)
    mm_tol: dict[str, Any] = {"rtol": 1e-4, "atol": 1e-5} if _d is dt.float32 else {"rtol": 1e-9}
    case(cid, "linalg", ember.cdist, lambda a, b: _cdist(a, b, 2.0), [x1, x2], _d, **mm_tol)
    for ord, dim, keep, tag in ((2, None, False, "2"), (1, -1, True, "1-keepdim"),
                                (np.inf, 0, False, "inf"), (-np.inf, 1, False, "neg-inf"),
                                (0, (0, 1), False, "0"), (3, (0, 1), False, "3")):
        cid = f"vector_norm-{tag}-{_d.name}"
        x = Arg(np.asarray(sample((3, 4), _d, rng_for(cid), "nonzero")), "permuted", (), _d)
        case(cid, "linalg",
             lambda t, o=ord, d=dim, k=keep: ember.linalg.vector_norm(t, o, d, k),
             lambda v, o=ord, d=dim, k=keep: _vector_norm(v, o, d, k), [x], _d,
             grad=() if ord == 0 else None)
    cid = f"normalize-zero-row-{_d.name}"  # a zero row stays zero, its gradient finite
    v = np.asarray(sample((3, 4), _d, rng_for(cid)))
    v[1] = 0
    case(cid, "linalg", lambda t: ember.nn.functional.normalize(t, dim=1),
         lambda x: x / np.maximum(np.sqrt((x * x).sum(1, keepdims=True)), 1e-12),
         [Arg(v, "", (), _d)], _d, grad=())
    cid = f"normalize-p1-dim0-{_d.name}"
    x = Arg(np.asarray(sample((3, 4), _d, rng_for(cid), "nonzero")), "", (), _d)
    case(cid, "linalg", lambda t: ember.nn.functional.normalize(t, p=1, dim=0),
         lambda v: v / np.abs(v).sum(0, keepdims=True), [x], _d)


def _einsum_errors(device: Any) -> None:
    a, b = ember.ones(2, 3, device=device), ember.ones(4, 5, device=device)
    with _raises(ember.ShapeError, "einsum", "operand 0", "'ij'", "(2, 3, 3)"):
        ember.einsum("ij,jk", ember.ones(2, 3, 3, device=device), b)
    with _raises(ember.ShapeError, "einsum", "subscript j", "size 4", "size 3"):
        ember.einsum("ij,jk", a, b)
    with _raises(ValueError, "einsum", "2 operand subscript(s)", "1 tensor(s)"):
        ember.einsum("ij,jk", a)
    with _raises(ValueError, "einsum", "output subscript z"):
        ember.einsum("ij->z", a)
    with _raises(ember.ShapeError, "bmm", "(2, 3)", "(4, 5)"):
        ember.bmm(a, b)
    with _raises(ember.ShapeError, "cdist", "(2, 3)", "(4, 5)"):
        ember.cdist(a, b)
    with _raises(ember.DTypeError, "vector_norm", "int64"):
        ember.linalg.vector_norm(ember.ones(3, dtype=dt.int64, device=device))


register(Case(id="error-einsum-bmm-cdist-name-op-and-shapes", group="errors",
              check=_einsum_errors, dtypes=(dt.float32, dt.int64)))
