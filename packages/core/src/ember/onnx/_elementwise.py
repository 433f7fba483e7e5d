"""Elementwise operators: unary maths, activations, arithmetic, comparisons, Where, Cast."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

import ember as E
from ember import Tensor
from ember.nn import functional as F

from ._dtypes import ember_dtype, numpy_dtype
from ._registry import Node, Run, op

# -- unary maths -------------------------------------------------------------------------------

_UNARY: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[np.ndarray], np.ndarray] | None]] = {
    "Abs": (E.abs, np.abs), "Neg": (E.neg, np.negative), "Exp": (E.exp, None),
    "Log": (E.log, None), "Sqrt": (E.sqrt, np.sqrt), "Reciprocal": (E.reciprocal, None),
    "Sin": (E.sin, None), "Cos": (E.cos, None), "Tan": (E.tan, None), "Tanh": (E.tanh, None),
    "Asin": (E.asin, None), "Acos": (E.acos, None), "Atan": (E.atan, None),
    "Sinh": (E.sinh, None), "Cosh": (E.cosh, None), "Sigmoid": (E.sigmoid, None),
    "Erf": (E.erf, None), "Floor": (E.floor, np.floor), "Ceil": (E.ceil, np.ceil),
    "Round": (E.round, np.round), "Sign": (E.sign, np.sign),
    "Not": (E.logical_not, np.logical_not), "IsNaN": (E.isnan, np.isnan),
    "Relu": (F.relu, None), "Asinh": (E.asinh, None), "Acosh": (E.acosh, None),
    "Atanh": (E.atanh, None), "BitwiseNot": (E.bitwise_not, np.invert),
}


def _unary(fn: Callable[[Tensor], Tensor]) -> Callable[..., Tensor]:
    def run(r: Run, node: Node, x: Any) -> Tensor:
        return fn(r.tensor(x))
    return run


def _unary_host(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    def run(node: Node, x: np.ndarray) -> np.ndarray:
        return np.asarray(fn(x)).astype(x.dtype if fn is not np.isnan and fn is not
                                        np.logical_not else bool)
    return run


for _name, (_fn, _host) in _UNARY.items():
    op(_name, host=_unary_host(_host) if _host is not None else None)(_unary(_fn))


@op("Identity", host=lambda node, x: x)
def identity(r: Run, node: Node, x: Any) -> Any:
    return x


@op("Dropout", host_inputs=(1, 2), note="inference: the input unchanged (and an all-true "
    "mask); training_mode: a mask from the seed attribute (numpy's RandomState, as the "
    "ONNX reference) or else from ember's generator")
def dropout(r: Run, node: Node, x: Any, ratio: Any = None, training: Any = None) -> Any:
    x = r.tensor(x)
    p = 0.5 if ratio is None else float(r.host(ratio).reshape(-1)[0])
    train = training is not None and bool(r.host(training).reshape(-1)[0])
    if not train or p == 0.0:
        if len(node.outputs) > 1:
            return x, E.ne(x, x).logical_not()
        return x
    if not 0.0 <= p < 1.0:
        raise ValueError(f"{node.where()}: ratio {p} is outside [0, 1)")
    seed = node.attrs.get("seed")
    if seed is not None:
        # Note: a seeded mask is drawn as the ONNX reference draws it (numpy's legacy
        # RandomState, uniform in [0, 1), kept where >= ratio), so seeded graphs agree with it
        keep_np = np.random.RandomState(int(seed) % 2**32).uniform(0.0, 1.0, x.shape) >= p
        keep = E.tensor(keep_np, device=x.device)
    else:
        keep = E.rand(x.shape, device=x.device) >= p
    y = E.where(keep, x * (1.0 / (1.0 - p)), 0.0)
    return (y, keep) if len(node.outputs) > 1 else y


@op("IsInf")
def isinf(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    pos, neg = node.attrs.get("detect_positive", 1), node.attrs.get("detect_negative", 1)
    if pos and neg:
        return E.isinf(t)
    inf = E.isinf(t)
    if not (pos or neg):
        return E.logical_and(inf, E.logical_not(inf))
    return E.logical_and(inf, t > 0 if pos else t < 0)


# -- activations with attributes -------------------------------------------------------------

def _attr(node: Node, name: str, default: float) -> float:
    return float(node.attrs.get(name, default))


@op("LeakyRelu")
def leaky_relu(r: Run, node: Node, x: Any) -> Tensor:
    return F.leaky_relu(r.tensor(x), _attr(node, "alpha", 0.01))


@op("Elu")
def elu(r: Run, node: Node, x: Any) -> Tensor:
    return F.elu(r.tensor(x), _attr(node, "alpha", 1.0))


@op("Celu")
def celu(r: Run, node: Node, x: Any) -> Tensor:
    a = _attr(node, "alpha", 1.0)
    t = r.tensor(x)
    return E.maximum(t, t * 0.0) + E.minimum(t * 0.0, E.expm1(t / a) * a)


@op("Selu")
def selu(r: Run, node: Node, x: Any) -> Tensor:
    a = _attr(node, "alpha", 1.67326319217681884765625)
    g = _attr(node, "gamma", 1.05070102214813232421875)
    t = r.tensor(x)
    return E.where(t > 0, t, E.expm1(t) * a) * g


@op("HardSigmoid")
def hard_sigmoid(r: Run, node: Node, x: Any) -> Tensor:
    a, b = _attr(node, "alpha", 0.2), _attr(node, "beta", 0.5)
    return E.clamp(r.tensor(x) * a + b, 0.0, 1.0)


@op("HardSwish")
def hard_swish(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    return t * E.clamp(t * (1.0 / 6.0) + 0.5, 0.0, 1.0)


@op("Softplus")
def softplus(r: Run, node: Node, x: Any) -> Tensor:
    return F.softplus(r.tensor(x))


@op("Softsign")
def softsign(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    return t / (E.abs(t) + 1.0)


@op("Mish")
def mish(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    return t * E.tanh(F.softplus(t))


@op("ThresholdedRelu")
def thresholded_relu(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    return E.where(t > _attr(node, "alpha", 1.0), t, 0.0)


@op("Gelu", note="approximate 'none' (erf) and 'tanh'")
def gelu(r: Run, node: Node, x: Any) -> Tensor:
    approx = node.attrs.get("approximate", "none")
    if approx not in ("none", "tanh"):
        raise ValueError(f"{node.where()}: approximate must be 'none' or 'tanh', got {approx!r}")
    return F.gelu(r.tensor(x), approximate=approx)


@op("PRelu")
def prelu(r: Run, node: Node, x: Any, slope: Any) -> Tensor:
    t, st = r.tensor(x), r.tensor(slope)
    if st.ndim == 1 and t.ndim > 2 and st.shape[0] == t.shape[1] != t.shape[-1]:
        # Note: PRelu-6 files (read through the version converter) give one slope per channel
        st = st.reshape((st.shape[0],) + (1,) * (t.ndim - 2))
    return E.where(t < 0, t * st, t)


@op("Clip", note="min and max as attributes before opset 11, as inputs from 11")
def clip(r: Run, node: Node, x: Any, lo: Any = None, hi: Any = None) -> Tensor:
    t = r.tensor(x)
    if node.opset < 11:  # Clip-6: float attributes, unbounded by default
        lo, hi = node.attrs.get("min"), node.attrs.get("max")
        return E.clamp(t, None if lo is None else float(lo), None if hi is None else float(hi))
    if lo is None and hi is None:
        return t
    bounds: list[Any] = []
    for b in (lo, hi):
        if b is None:
            bounds.append(None)
        elif isinstance(b, np.ndarray):
            v = b.reshape(-1)[0].item()
            bounds.append(v)
        else:
            bounds.append(b)
    return E.clamp(t, bounds[0], bounds[1])


# -- binary and variadic arithmetic ----------------------------------------------------------

def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":  # ONNX integer division truncates toward zero
        q = np.abs(a) // np.abs(b)
        out: np.ndarray = (np.sign(a) * np.sign(b) * q).astype(a.dtype)
    else:
        out = (a / b).astype(a.dtype)
    return out


def _host_mod(node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.fmod(a, b) if node.attrs.get("fmod", 0) else np.mod(a, b)
    return out


_BINARY: dict[str, tuple[Callable[[Any, Any], Any], Callable[..., np.ndarray]]] = {
    "Add": (lambda a, b: a + b, lambda node, a, b: (a + b).astype(a.dtype)),
    "Sub": (lambda a, b: a - b, lambda node, a, b: (a - b).astype(a.dtype)),
    "Mul": (lambda a, b: a * b, lambda node, a, b: (a * b).astype(a.dtype)),
    "Equal": (E.eq, lambda node, a, b: np.equal(a, b)),
    "Less": (E.lt, lambda node, a, b: np.less(a, b)),
    "Greater": (E.gt, lambda node, a, b: np.greater(a, b)),
    "LessOrEqual": (E.le, lambda node, a, b: np.less_equal(a, b)),
    "GreaterOrEqual": (E.ge, lambda node, a, b: np.greater_equal(a, b)),
    "And": (E.logical_and, lambda node, a, b: np.logical_and(a, b)),
    "Or": (E.logical_or, lambda node, a, b: np.logical_or(a, b)),
    "Xor": (E.logical_xor, lambda node, a, b: np.logical_xor(a, b)),
    "BitwiseAnd": (E.bitwise_and, lambda node, a, b: np.bitwise_and(a, b)),
    "BitwiseOr": (E.bitwise_or, lambda node, a, b: np.bitwise_or(a, b)),
    "BitwiseXor": (E.bitwise_xor, lambda node, a, b: np.bitwise_xor(a, b)),
}


def _binary(fn: Callable[[Any, Any], Any]) -> Callable[..., Tensor]:
    def run(r: Run, node: Node, a: Any, b: Any) -> Tensor:
        return fn(r.tensor(a), r.tensor(b))  # type: ignore[no-any-return]  # ember ops
    return run


for _name, (_fn2, _host2) in _BINARY.items():
    op(_name, host=_host2)(_binary(_fn2))


@op("Div", host=lambda node, a, b: _int_div(a, b))
def div(r: Run, node: Node, a: Any, b: Any) -> Tensor:
    ta, tb = r.tensor(a), r.tensor(b)
    if ta.dtype.kind in "iu":
        return E.trunc(ta.double() / tb.double()).to(ta.dtype)
    return ta / tb


@op("Mod", host=_host_mod)
def mod(r: Run, node: Node, a: Any, b: Any) -> Tensor:
    ta, tb = r.tensor(a), r.tensor(b)
    if node.attrs.get("fmod", 0):
        if ta.dtype.kind in "iu":
            return ta - E.trunc(ta.double() / tb.double()).to(ta.dtype) * tb
        return ta - E.trunc(ta / tb) * tb
    return E.remainder(ta, tb)


@op("Pow", host=lambda node, a, b: np.power(a, b).astype(a.dtype))
def pow_(r: Run, node: Node, a: Any, b: Any) -> Tensor:
    ta = r.tensor(a)
    if isinstance(b, np.ndarray) and b.size == 1:
        e = b.reshape(-1)[0].item()
        if e == 2:
            return ta * ta
        if e == 1:
            return ta
        if e == 0.5:
            return E.sqrt(ta)
        return E.pow(ta, float(e) if ta.dtype.kind == "f" else e)
    return E.pow(ta, r.tensor(b).to(ta.dtype))


def _variadic(fn: Callable[[Any, Any], Any], npfn: Callable[..., np.ndarray],
              mean: bool = False) -> tuple[Callable[..., Any], Callable[..., np.ndarray]]:
    def run(r: Run, node: Node, *xs: Any) -> Tensor:
        out = functools.reduce(fn, [r.tensor(x) for x in xs])
        return out / len(xs) if mean else out

    def host(node: Node, *xs: np.ndarray) -> np.ndarray:
        out = functools.reduce(npfn, xs)
        return (out / len(xs) if mean else out).astype(xs[0].dtype)
    return run, host


for _name, (_fn3, _np3, _mean) in {
        "Max": (E.maximum, np.maximum, False), "Min": (E.minimum, np.minimum, False),
        "Sum": (lambda a, b: a + b, np.add, False), "Mean": (lambda a, b: a + b, np.add, True),
}.items():
    _dev, _hst = _variadic(_fn3, _np3, _mean)
    op(_name, host=_hst)(_dev)


@op("Where", host=lambda node, c, a, b: np.where(c, a, b))
def where(r: Run, node: Node, c: Any, a: Any, b: Any) -> Tensor:
    return E.where(r.tensor(c), r.tensor(a), r.tensor(b))


# -- types -----------------------------------------------------------------------------------

def _host_cast(node: Node, x: np.ndarray) -> np.ndarray:
    return x.astype(numpy_dtype(int(node.attrs["to"]), node.where()))


@op("Cast", host=_host_cast)
def cast(r: Run, node: Node, x: Any) -> Tensor:
    return r.tensor(x).to(ember_dtype(int(node.attrs["to"]), node.where()))


@op("CastLike", host=lambda node, x, like: x.astype(like.dtype))
def cast_like(r: Run, node: Node, x: Any, like: Any) -> Tensor:
    return r.tensor(x).to(r.tensor(like).dtype if not isinstance(like, np.ndarray)
                          else r.tensor(np.zeros((), like.dtype)).dtype)



@op("BitShift", note="uint8 (ember's only unsigned dtype)")
def bit_shift(r: Run, node: Node, a: Any, b: Any) -> Tensor:
    ta, tb = r.tensor(a), r.tensor(b)
    direction = node.attrs["direction"]
    if direction not in ("LEFT", "RIGHT"):
        raise ValueError(f"{node.where()}: direction must be LEFT or RIGHT, got {direction!r}")
    return E.left_shift(ta, tb) if direction == "LEFT" else E.right_shift(ta, tb)


@op("Shrink")
def shrink(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    lambd, bias = _attr(node, "lambd", 0.5), _attr(node, "bias", 0.0)
    zero = E.zeros_like(t)
    return E.where(t < -lambd, t + bias, E.where(t > lambd, t - bias, zero)).to(t.dtype)


@op("Swish")
def swish(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    return t * E.sigmoid(t * _attr(node, "alpha", 1.0))
