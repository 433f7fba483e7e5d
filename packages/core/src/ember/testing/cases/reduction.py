# Lambdas with default arguments bind loop variables; mypy cannot infer their types.
# mypy: disable-error-code="misc"
"""Reductions over axes with keepdim, arg-reductions, var/std and cumulative ops."""

from __future__ import annotations

from typing import Any

import numpy as np

import ember

from ... import _dtype as dt
from .._case import Arg, rng_for, sample
from ._build import ALL, NUMBERS, case, float_out

#: dim argument, keepdim, input shape, view: one entry per variant
LAYOUTS: dict[str, tuple[Any, bool, tuple[int, ...], str]] = {
    "all": (None, False, (2, 3, 4), ""),
    "dim1": (1, False, (2, 3, 4), ""),
    "dims02-keepdim": ((0, 2), True, (2, 3, 4), "permuted"),
    "neg-keepdim": (-1, True, (3, 5), "sliced"),
    "scalar": (None, False, (), ""),
    "empty": (0, False, (0, 3), ""),
}


_F = {name: getattr(ember, name) for name in ("sum", "prod", "mean", "amax", "amin", "any", "all",
                                             "var", "std", "argmax", "argmin", "max", "min",
                                             "cumsum", "cumprod")}


def _acc(d: dt.DType) -> dt.DType:
    return dt.int64 if d.kind in "iub" else d


def _loose(d: dt.DType) -> dict[str, Any]:
    """Half-precision sums accumulate rounding: allow a few ulps of the result's scale."""
    return {"atol": 3e-2, "rtol": 1e-2} if d in (dt.float16, dt.bfloat16) else {}


def _axes(dim: Any) -> Any:
    return dim if not isinstance(dim, list) else tuple(dim)


_REDUCTIONS: dict[str, tuple[Any, Any, str, Any, bool]] = {
    # name: (numpy oracle, output dtype rule, domain, dtypes, allows empty)
    "sum": (np.sum, _acc, "real", ALL, True),
    "prod": (np.prod, _acc, "near1", ALL, True),
    "mean": (np.mean, float_out, "real", ALL, False),
    "amax": (np.max, lambda d: d, "real", ALL, False),
    "amin": (np.min, lambda d: d, "real", ALL, False),
    "any": (np.any, lambda d: dt.bool_, "small", ALL, True),
    "all": (np.all, lambda d: dt.bool_, "small", ALL, True),
}

for _name, (_f, _rule, _dom, _dtypes, _empty) in _REDUCTIONS.items():
    for _d in _dtypes:
        for _variant, (_dim, _keep, _shape, _view) in LAYOUTS.items():
            if _variant == "empty" and not _empty:
                continue
            if _variant == "scalar" and _name in ("amax", "amin") and _d.kind == "b":
                continue
            cid = f"{_name}-{_variant}-{_d.name}"
            x = Arg(np.asarray(sample(_shape, _d, rng_for(cid), _dom)), _view, (), _d)
            fn = _F[_name]

            def run(t: Any, fn: Any = fn, dim: Any = _dim, keep: bool = _keep) -> Any:
                return fn(t, dim=dim, keepdim=keep)

            def orc(v: np.ndarray, f: Any = _f, dim: Any = _dim, keep: bool = _keep) -> Any:
                if v.dtype == bool and f in (np.sum, np.prod, np.mean):
                    v = v.astype(np.int64)
                return np.asarray(f(v, axis=dim, keepdims=keep))

            differentiable = _name not in ("any", "all") and _d.kind == "f"
            case(cid, "reduction", run, orc, [x], _rule(_d),
                 grad=(0,) if differentiable and _name not in ("amax", "amin") else (),
                 **_loose(_d))

for _name in ("var", "std"):
    for _d in ALL:
        for _variant, (_dim, _keep, _shape, _view) in LAYOUTS.items():
            if _variant in ("empty", "scalar"):
                continue
            for corr in (0, 1):
                cid = f"{_name}-{_variant}-correction{corr}-{_d.name}"
                x = Arg(np.asarray(sample(_shape, _d, rng_for(cid))), _view, (), _d)
                np_f = np.var if _name == "var" else np.std

                def run(t: Any, fn: Any = _F[_name], dim: Any = _dim,
                        keep: bool = _keep, c: int = corr) -> Any:
                    return fn(t, dim=dim, keepdim=keep, correction=c)

                def orc(v: np.ndarray, f: Any = np_f, dim: Any = _dim, keep: bool = _keep,
                        c: int = corr) -> Any:
                    return np.asarray(f(v.astype(np.float64), axis=dim, keepdims=keep, ddof=c))

                case(cid, "reduction", run, orc, [x], float_out(_d), **_loose(_d))

# arg-reductions and max/min with a dim: distinct values, so the index is unique
for _d in NUMBERS:
    for _name, _f in (("argmax", np.argmax), ("argmin", np.argmin)):
        for _variant, (_dim, _keep, _view) in {"flat": (None, False, ""),
                                                "dim1": (1, False, "permuted"),
                                                "neg-keepdim": (-1, True, "sliced")}.items():
            cid = f"{_name}-{_variant}-{_d.name}"
            x = Arg(np.asarray(sample((2, 3, 4), _d, rng_for(cid), "distinct")), _view, (), _d)

            def run(t: Any, fn: Any = _F[_name], dim: Any = _dim,
                    keep: bool = _keep) -> Any:
                return fn(t, dim=dim, keepdim=keep)

            def orc(v: np.ndarray, f: Any = _f, dim: Any = _dim, keep: bool = _keep) -> Any:
                out = np.asarray(f(v, axis=dim))
                if keep:
                    out = out.reshape((1,) * v.ndim) if dim is None else np.expand_dims(out, dim)
                return out

            case(cid, "reduction", run, orc, [x], dt.int64, grad=())
    for _name, _f, _af in (("max", np.max, np.argmax), ("min", np.min, np.argmin)):
        for _keep in (False, True):
            cid = f"{_name}-dim-{'keepdim' if _keep else 'drop'}-{_d.name}"
            x = Arg(np.asarray(sample((3, 5), _d, rng_for(cid), "distinct")), "", (), _d)

            def run2(t: Any, fn: Any = _F[_name], keep: bool = _keep) -> Any:
                values, indices = fn(t, 1, keepdim=keep)
                return values, indices

            def orc2(v: np.ndarray, f: Any = _f, af: Any = _af, keep: bool = _keep) -> Any:
                idx = af(v, axis=1)
                val = f(v, axis=1)
                if keep:
                    return val[:, None], idx[:, None]
                return val, idx

            case(cid, "reduction", run2, orc2, [x], (_d, dt.int64))

for _name, _f, _dom in (("cumsum", np.cumsum, "real"), ("cumprod", np.cumprod, "near1")):
    for _d in ALL:
        for _variant, (_dim, _shape, _view) in {"dim0": (0, (3, 4), ""),
                                                 "neg": (-1, (2, 3, 4), "permuted"),
                                                 "sliced": (1, (2, 5), "sliced"),
                                                 "empty": (0, (0, 3), ""),
                                                 "scalar": (0, (), "")}.items():
            cid = f"{_name}-{_variant}-{_d.name}"
            x = Arg(np.asarray(sample(_shape, _d, rng_for(cid), _dom)), _view, (), _d)

            def run3(t: Any, fn: Any = _F[_name], dim: int = _dim) -> Any:
                return fn(t, dim)

            def orc3(v: np.ndarray, f: Any = _f, dim: int = _dim) -> Any:
                if v.ndim == 0:
                    return v.astype(np.int64) if v.dtype == bool else v
                return f(v.astype(np.int64) if v.dtype == bool else v, axis=dim)

            case(cid, "reduction", run3, orc3, [x], _acc(_d), **_loose(_d))

# nan and inf: nan propagates through sums and extremes, inf survives them
for _name, (_f, _rule, _dom, _dtypes, _empty) in _REDUCTIONS.items():
    for _d in dt.FLOAT_DTYPES:
        cid = f"{_name}-edges-{_d.name}"
        v = np.asarray(sample((3, 4), _d, rng_for(cid), "near1"))
        v[0, 1], v[1, 2], v[1, 0], v[2, 3] = np.nan, np.inf, -np.inf, 0.0
        x = Arg(v, "", (), _d)

        def run4(t: Any, fn: Any = _F[_name]) -> Any:
            return fn(t, dim=1)

        def orc4(a: np.ndarray, f: Any = _f) -> Any:
            return np.asarray(f(a, axis=1))

        case(cid, "reduction", run4, orc4, [x], _rule(_d), grad=(), **_loose(_d))

# a 0-d tensor reduces over dim 0 or -1 to itself, as in PyTorch; ``axis=`` spells ``dim``
for _d in dt.FLOAT_DTYPES:
    for _name in ("sum", "prod", "mean", "amax", "amin"):
        for _dim in (0, -1):
            cid = f"{_name}-0d-dim{_dim}-{_d.name}"
            x = Arg(np.asarray(sample((), _d, rng_for(cid), "near1")), "", (), _d)

            def run5(t: Any, fn: Any = _F[_name], dim: int = _dim) -> Any:
                return fn(t, dim)

            case(cid, "reduction", run5, lambda a: np.asarray(a, np.float64), [x], _d,
                 **_loose(_d))
    for _name, _f in (("sum", np.sum), ("mean", np.mean), ("amax", np.max)):
        cid = f"{_name}-axis-{_d.name}"
        x = Arg(np.asarray(sample((3, 4), _d, rng_for(cid), "near1")), "", (), _d)

        def run6(t: Any, fn: Any = _F[_name]) -> Any:
            return fn(t, axis=1, keepdim=True)

        def orc6(a: np.ndarray, f: Any = _f) -> Any:
            return f(a.astype(np.float64), axis=1, keepdims=True)

        case(cid, "reduction", run6, orc6, [x], _d, **_loose(_d))
