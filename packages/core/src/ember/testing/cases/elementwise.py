# Lambdas with default arguments bind loop variables; mypy cannot infer their types.
# mypy: disable-error-code="misc"
"""Elementwise primitives: every unary and binary op, where and clamp, over every dtype."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

import ember

from ... import _dtype as dt
from .._case import Arg, rng_for, sample
from ._build import ALL, INTS, NUMBERS, binary, case, float_out, number_out, unary

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _ints(f: Callable[..., Any]) -> Callable[..., Any]:
    """The oracle on bool inputs computes in int64, as ember's arithmetic on bool does."""
    def g(*xs: np.ndarray) -> Any:
        return f(*[x.astype(np.int64) if x.dtype == bool else x for x in xs])
    return g


def _bool(d: dt.DType) -> dt.DType:
    return dt.bool_


def _same(d: dt.DType) -> dt.DType:
    return d


FLOAT_UNARY: dict[str, tuple[Callable[[np.ndarray], Any], str]] = {
    "exp": (np.exp, "real"),
    "expm1": (np.expm1, "real"),
    "log": (np.log, "positive"),
    "log1p": (np.log1p, "positive"),
    "sqrt": (np.sqrt, "positive"),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), "positive"),
    "sin": (np.sin, "real"),
    "cos": (np.cos, "real"),
    "tan": (np.tan, "unit"),
    "tanh": (np.tanh, "real"),
    "asin": (np.arcsin, "unit"),
    "acos": (np.arccos, "unit"),
    "atan": (np.arctan, "real"),
    "sinh": (np.sinh, "real"),
    "cosh": (np.cosh, "real"),
    "erf": (lambda x: _erf(x.astype(np.float64)) if x.size else x.astype(np.float64), "real"),
    "sigmoid": (lambda x: 1.0 / (1.0 + np.exp(-x)), "real"),
    "reciprocal": (lambda x: 1.0 / x, "nonzero"),
    "asinh": (np.arcsinh, "real"),
    "atanh": (np.arctanh, "unit"),
}
for _name, (_f, _dom) in FLOAT_UNARY.items():
    unary(_name, getattr(ember, _name), lambda x, f=_f: f(x.astype(np.float64)), ALL, float_out,
          _dom)

# acosh is defined from 1 up: its samples are shifted there (edges: nan, inf, -inf -> nan, 1)
unary("acosh", lambda t: ember.acosh(t + 1), lambda x: np.arccosh(x.astype(np.float64) + 1), ALL,
      float_out, "positive")

NUMBER_UNARY: dict[str, tuple[Callable[[np.ndarray], Any], bool]] = {
    "neg": (np.negative, True),
    "abs": (np.abs, True),
    # piecewise constant: gradient 0 (PyTorch's), which finite differences confirm away from
    # the jumps (samples sit there rarely; the "grid" cases below stay off the gradient check)
    "sign": (np.sign, True),
    "floor": (np.floor, True),
    "ceil": (np.ceil, True),
    "round": (np.round, True),
    "trunc": (np.trunc, True),
}
for _name, (_f, _diff) in NUMBER_UNARY.items():
    unary(_name, getattr(ember, _name), _ints(_f), ALL, number_out, differentiable=_diff)

unary("logical_not", ember.logical_not, np.logical_not, ALL, _bool, differentiable=False)
unary("isnan", ember.isnan, np.isnan, ALL, _bool, differentiable=False)
unary("isinf", ember.isinf, np.isinf, ALL, _bool, differentiable=False)
unary("bitwise_not", ember.bitwise_not, lambda x: np.invert(x), (*INTS, dt.bool_), _same,
      edges=False, differentiable=False)

ARITHMETIC: dict[str, tuple[Callable[..., Any], tuple[str, str], bool]] = {
    "add": (np.add, ("real", "real"), True),
    "sub": (np.subtract, ("real", "real"), True),
    "mul": (np.multiply, ("real", "real"), True),
    "maximum": (np.maximum, ("real", "real"), True),
    "minimum": (np.minimum, ("real", "real"), True),
    "floordiv": (np.floor_divide, ("grid", "grid-nonzero"), False),
    # grid inputs sit on remainder's jumps: no finite-difference check there
    "remainder": (np.remainder, ("grid", "grid-nonzero"), False),
}
def _keep_bool(d: dt.DType) -> dt.DType:
    return d  # maximum and minimum of two bool tensors are bool (or and and), as PyTorch's


for _name, (_f, _doms, _diff) in ARITHMETIC.items():
    binary(_name, getattr(ember, _name), _ints(_f), ALL,
           _keep_bool if _name in ("maximum", "minimum") else number_out, _doms,
           differentiable=_diff, edges=_name not in ("floordiv", "remainder"))

binary("copysign", ember.copysign, lambda a, b: np.copysign(a.astype(np.float64), b), ALL,
       float_out, ("real", "real"))


def _trunc_div(a: np.ndarray, b: np.ndarray) -> Any:
    if a.dtype.kind == "f":
        return np.trunc(a.astype(np.float64) / b)
    a, b = a.astype(np.int64), b.astype(np.int64)
    return np.where((a % b != 0) & ((a < 0) != (b < 0)), a // b + 1, a // b)


binary("div-trunc", lambda a, b: ember.div(a, b, rounding_mode="trunc"), _trunc_div, ALL,
       number_out, ("grid", "grid-nonzero"), differentiable=False, edges=False)
binary("div-floor", lambda a, b: ember.div(a, b, rounding_mode="floor"),
       _ints(np.floor_divide), ALL, number_out, ("grid", "grid-nonzero"), differentiable=False,
       edges=False)


def _pow(a: np.ndarray, b: np.ndarray) -> Any:
    if a.dtype.kind in "iub" and b.dtype.kind in "iub":
        return np.power(a.astype(np.int64), b.astype(np.int64))
    return np.power(a.astype(np.float64), b)


# float pow: positive base, any exponent; integer pow: small exponents (no negative powers)
binary("pow", ember.pow, _pow, dt.FLOAT_DTYPES, _same, ("positive", "real"))
binary("pow", ember.pow, _pow, (*INTS, dt.bool_), number_out, ("real", "small"), edges=False)

binary("div", ember.div, lambda a, b: a.astype(np.float64) / b, ALL, float_out,
       ("real", "nonzero"))
binary("atan2", ember.atan2, lambda a, b: np.arctan2(a.astype(np.float64), b), ALL, float_out,
       ("real", "nonzero"))

_COMPARE: dict[str, Any] = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
            "gt": np.greater, "ge": np.greater_equal}
for _name, _f in _COMPARE.items():
    # "grid" values make ties likely, so equality is exercised
    binary(_name, getattr(ember, _name), _f, ALL, _bool, ("grid", "grid"), differentiable=False)

_LOGICAL: dict[str, Any] = {"logical_and": np.logical_and, "logical_or": np.logical_or,
                            "logical_xor": np.logical_xor}
for _name, _f in _LOGICAL.items():
    binary(_name, getattr(ember, _name), _f, ALL, _bool, ("small", "small"),
           differentiable=False)

_BITWISE: dict[str, Any] = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
                            "bitwise_xor": np.bitwise_xor}
for _name, _f in _BITWISE.items():
    binary(_name, getattr(ember, _name), _f, (*INTS, dt.bool_), _same, edges=False,
           differentiable=False, scalar=None)
binary("left_shift", ember.left_shift, lambda a, b: np.left_shift(a, b), INTS, _same,
       ("small", "small"), edges=False, differentiable=False)
binary("right_shift", ember.right_shift, lambda a, b: np.right_shift(a, b), INTS, _same,
       ("real", "small"), edges=False, differentiable=False)


# -- where and clamp ----------------------------------------------------------------------------

for _d in ALL:
    for _variant, (sc, sa, sb) in {"basic": ((3, 4), (3, 4), (3, 4)),
                                   "broadcast": ((3, 1), (1, 4), (2, 3, 4)),
                                   "empty": ((0, 3), (0, 3), (1, 3)),
                                   "scalar": ((), (), ())}.items():
        cid = f"where-{_variant}-{_d.name}"
        rng = rng_for(cid)
        cond = Arg(np.asarray(sample(sc, dt.bool_, rng)), "", (), dt.bool_)
        a = Arg(np.asarray(sample(sa, _d, rng)), "", (), _d)
        b = Arg(np.asarray(sample(sb, _d, rng)), "permuted" if len(sb) > 1 else "", (), _d)
        case(cid, "elementwise", ember.where, np.where, [cond, a, b], _d)
    cid = f"where-pyscalar-{_d.name}"
    rng = rng_for(cid)
    cond = Arg(np.asarray(sample((3, 4), dt.bool_, rng)), "", (), dt.bool_)
    a = Arg(np.asarray(sample((3, 4), _d, rng)), "", (), _d)
    wout = number_out(_d)
    case(cid, "elementwise", lambda c, x: ember.where(c, x, 0),
         lambda c, x, o=wout: wrap_to_any(np.where(c, x, 0), o), [cond, a], wout)


def wrap_to_any(v: Any, out: dt.DType) -> Any:
    from ._build import wrap_to

    return wrap_to(v, out)


for _d in NUMBERS:
    for _variant, (lo, hi, view) in {"both": (-1, 1, ""), "min": (0, None, "permuted"),
                                     "max": (None, 1, "sliced")}.items():
        cid = f"clamp-{_variant}-{_d.name}"
        x = Arg(np.asarray(sample((3, 4), _d, rng_for(cid))), view, (), _d)
        lo_ = 0 if (lo is not None and _d.kind == "u") else lo
        case(cid, "elementwise", lambda t, lo=lo_, hi=hi: ember.clamp(t, lo, hi),
             lambda v, lo=lo_, hi=hi: np.clip(v, lo, hi), [x], _d)
    cid = f"clamp-tensor-{_d.name}"
    rng = rng_for(cid)
    x, lo_t, hi_t = (Arg(np.asarray(sample(s, _d, rng, "distinct")), "", (), _d)
                     for s in ((3, 4), (4,), (3, 1)))
    case(cid, "elementwise", lambda t, a, b: ember.clamp(t, a, ember.maximum(a, b)),
         lambda v, a, b: np.minimum(np.maximum(v, a), np.maximum(a, b)), [x, lo_t, hi_t], _d,
         grad=())  # integer-valued samples tie with the bounds, where clamp has a kink
