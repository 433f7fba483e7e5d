# Lambdas with default arguments bind loop variables; mypy cannot infer their types.
# mypy: disable-error-code="misc"
"""PyTorch's other names, composites in core (square, exp2, log2, log10, hypot, logaddexp,
fmod, lerp, nansum, nanmean, median, quantile, mm, dot, kron, cross, diagonal, diag, trace,
tile, rot90, searchsorted, isin, take, masked_select): each backend runs them through its
primitives, so these cases check that the primitives compose as numpy's functions do."""

from __future__ import annotations

from typing import Any

import numpy as np

import ember

from ... import _dtype as dt
from .._case import Arg, rng_for, sample
from ._build import ALL, FLOATS, NUMBERS, binary, case, float_out, number_out, unary

_F = (dt.float32, dt.float64)


def _ints(f: Any) -> Any:
    def g(*xs: np.ndarray) -> Any:
        return f(*[x.astype(np.int64) if x.dtype == bool else x for x in xs])
    return g


def _same(d: dt.DType) -> dt.DType:
    return d


unary("square", ember.square, _ints(np.square), ALL, number_out)
unary("exp2", ember.exp2, lambda x: np.exp2(x.astype(np.float64)), FLOATS, float_out)
unary("log2", ember.log2, lambda x: np.log2(x.astype(np.float64)), FLOATS, float_out,
      "positive")
unary("log10", ember.log10, lambda x: np.log10(x.astype(np.float64)), FLOATS, float_out,
      "positive")
binary("hypot", ember.hypot, np.hypot, FLOATS, _same)
binary("logaddexp", ember.logaddexp, np.logaddexp, FLOATS, _same)
binary("fmod", ember.fmod, _ints(np.fmod), NUMBERS, number_out, ("grid", "grid-nonzero"),
       differentiable=False, edges=False)


def _arg(cid: str, shape: tuple[int, ...], d: dt.DType, domain: str = "real",
         view: str = "") -> Arg:
    return Arg(np.asarray(sample(shape, d, rng_for(cid), domain)), view, (), d)


def _with_nans(cid: str, shape: tuple[int, ...], d: dt.DType) -> Arg:
    v = np.asarray(sample(shape, d, rng_for(cid)))
    v[rng_for(cid + "/nan").random(shape) < 0.3] = np.nan
    v[0] = np.nan  # a slice of nans along axis 1
    return Arg(v, "", (), d)


def _nanmean(x: np.ndarray, dim: int | None) -> Any:
    keep = ~np.isnan(x)
    count = keep.sum(axis=dim)
    return np.where(count == 0, np.nan, np.where(keep, x, 0).sum(axis=dim) / np.maximum(count, 1))


for _d in _F:
    n = _d.name
    cid = f"lerp-tensor-{n}"
    s, e = _arg(cid + "/s", (3, 4), _d), _arg(cid + "/e", (3, 4), _d, view="permuted")
    w = Arg(np.asarray(rng_for(cid).uniform(-0.5, 1.5, (3, 4)), dtype=_d.numpy_name), "", (), _d)
    case(cid, "composite", ember.lerp, lambda a, b, t: a + t * (b - a), [s, e, w], _d)
    for dim in (None, 1):
        cid = f"nansum-dim{dim}-{n}"
        case(cid, "composite", lambda x, dim=dim: ember.nansum(x, dim),
             lambda x, dim=dim: np.nansum(x, axis=dim), [_with_nans(cid, (3, 5), _d)], _d,
             grad=())
        cid = f"nanmean-dim{dim}-{n}"
        case(cid, "composite", lambda x, dim=dim: ember.nanmean(x, dim),
             lambda x, dim=dim: _nanmean(x, dim), [_with_nans(cid, (3, 5), _d)], _d, grad=())
    cid = f"count_nonzero-{n}"
    case(cid, "composite", lambda x: ember.count_nonzero(x, 0),
         lambda x: np.count_nonzero(x, axis=0), [_arg(cid, (4, 3), _d, "grid")], dt.int64,
         grad=())
    for dim in (None, 0, 1):
        cid = f"median-dim{dim}-{n}"
        a = _arg(cid, (4, 5), _d, "distinct")
        if dim is None:
            case(cid, "composite", ember.median,
                 lambda x: np.sort(x, axis=None)[(x.size - 1) // 2], [a], _d)
        else:
            case(cid, "composite", lambda x, dim=dim: ember.median(x, dim).values,
                 lambda x, dim=dim: np.take(np.sort(x, axis=dim), (x.shape[dim] - 1) // 2,
                                            axis=dim), [a], _d)
    for interp in ("linear", "lower", "higher", "midpoint", "nearest"):
        cid = f"quantile-{interp}-{n}"
        case(cid, "composite",
             lambda x, i=interp: ember.quantile(x, [0.1, 0.5, 0.75], 1, interpolation=i),
             lambda x, i=interp: np.quantile(x, [0.1, 0.5, 0.75], axis=1, method=i),
             [_arg(cid, (3, 6), _d, "distinct")], _d)
    mats: dict[str, tuple[Any, Any, list[tuple[int, ...]]]] = {
        "mm": (ember.mm, np.matmul, [(3, 4), (4, 2)]),
        "dot": (ember.dot, np.dot, [(5,), (5,)]),
        "kron": (ember.kron, np.kron, [(2, 3), (3, 2)]),
        "cross": (lambda a, b: ember.cross(a, b, dim=-1), lambda a, b: np.cross(a, b),
                  [(4, 3), (4, 3)]),
        "trace": (ember.trace, np.trace, [(4, 3)]),
        "diagonal": (lambda x: ember.diagonal(x, 1, 0, 2),
                     lambda x: np.diagonal(x, 1, 0, 2), [(3, 2, 4)]),
        "diag-vector": (lambda x: ember.diag(x, -1), lambda x: np.diag(x, -1), [(3,)]),
        "diag-matrix": (lambda x: ember.diag(x, 1), lambda x: np.diag(x, 1), [(3, 4)]),
        "tile": (lambda x: ember.tile(x, (2, 1, 2)), lambda x: np.tile(x, (2, 1, 2)),
                 [(2, 3)]),
        "rot90": (lambda x: ember.rot90(x, 1, (1, 2)), lambda x: np.rot90(x, 1, (1, 2)),
                  [(2, 3, 4)]),
    }
    for name, (efn, ofn, shapes) in mats.items():
        cid = f"{name}-{n}"
        args = [_arg(f"{cid}/{i}", s, _d, view="permuted" if i == 0 and len(s) == 2 else "")
                for i, s in enumerate(shapes)]
        case(cid, "composite", efn, ofn, args, _d)

for _d in (dt.float32, dt.int64):
    n = _d.name
    cid = f"searchsorted-{n}"
    seq = Arg(np.sort(np.asarray(sample((7,), _d, rng_for(cid), "grid"))), "", (), _d)
    vals = _arg(cid + "/v", (3, 4), _d, "grid")
    for side in ("left", "right"):
        case(f"searchsorted-{side}-{n}", "composite",
             lambda s, v, side=side: ember.searchsorted(s, v, side=side),
             lambda s, v, side=side: np.searchsorted(s, v, side=side), [seq, vals], dt.int64,
             grad=())
    cid = f"isin-{n}"
    case(cid, "composite", ember.isin, np.isin,
         [_arg(cid, (3, 4), _d, "grid"), _arg(cid + "/t", (3,), _d, "grid")], dt.bool_,
         grad=())
    cid = f"take-{n}"
    idx = Arg(np.array([[0, -1], [5, 11]]), "", (), dt.int64)
    case(cid, "composite", ember.take, lambda x, i: np.take(x, i),
         [_arg(cid, (3, 4), _d, view="permuted"), idx], _d)
    cid = f"masked_select-{n}"
    mask = Arg(rng_for(cid).random((4,)) < 0.5, "", (), dt.bool_)
    case(cid, "composite", ember.masked_select,
         lambda x, m: x[np.broadcast_to(m, x.shape)], [_arg(cid, (3, 4), _d), mask], _d)
