# Lambdas with default arguments bind loop variables; mypy cannot infer their types.
# mypy: disable-error-code="misc"
"""Composite ops of ``ember.functional``: activations, softmax family, norms, linear, losses."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

import ember
import ember.functional as F
import ember.nn.functional as NF

from ... import _dtype as dt
from .. import _reference as ref
from .._case import Arg, Case, register, rng_for, sample
from ._build import FLOATS, case


def _tol(d: dt.DType) -> dict[str, Any]:
    return {"atol": 3e-2, "rtol": 2e-2} if d in (dt.float16, dt.bfloat16) else {}


def _softplus(x: np.ndarray, beta: float = 1.0, threshold: float = 20.0) -> Any:
    bx = x * beta
    return np.where(bx > threshold, x, np.log1p(np.exp(np.minimum(bx, threshold))) / beta)


def _logsumexp(x: np.ndarray, axis: Any, keepdims: bool = False) -> Any:
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isinf(m), 0.0, m)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


def _reduce(x: np.ndarray, reduction: str) -> Any:
    if reduction == "mean":
        return np.mean(x)
    return np.sum(x) if reduction == "sum" else x


def _softmax(x: np.ndarray, axis: int) -> Any:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


_ACTIVATIONS: dict[str, tuple[Callable[[Any], Any], Callable[[np.ndarray], Any]]] = {
    "relu": (F.relu, lambda x: np.maximum(x, 0)),
    "leaky_relu": (lambda t: F.leaky_relu(t, 0.1), lambda x: np.where(x >= 0, x, 0.1 * x)),
    "elu": (lambda t: F.elu(t, 0.5), lambda x: np.where(x > 0, x, 0.5 * np.expm1(x))),
    "hardtanh": (F.hardtanh, lambda x: np.clip(x, -1, 1)),
    "softplus": (F.softplus, _softplus),
    "softplus-beta-threshold": (lambda t: F.softplus(t, 2.0, 1.0),
                                lambda x: _softplus(x, 2.0, 1.0)),
    "gelu": (F.gelu, lambda x: 0.5 * x * (1 + ref.erf(x / math.sqrt(2)))),
    "gelu-tanh": (lambda t: F.gelu(t, approximate="tanh"),
                  lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi)
                                                   * (x + 0.044715 * x ** 3)))),
    "silu": (F.silu, lambda x: x / (1 + np.exp(-x))),
    "mish": (F.mish, lambda x: x * np.tanh(np.log1p(np.exp(x)))),
    "softmax": (lambda t: F.softmax(t, -1), lambda x: _softmax(x, -1)),
    "softmax-dim0": (lambda t: F.softmax(t, 0), lambda x: _softmax(x, 0)),
    "log_softmax": (lambda t: F.log_softmax(t, -1), lambda x: np.log(_softmax(x, -1))),
    "log_softmax-dim0": (lambda t: F.log_softmax(t, 0), lambda x: np.log(_softmax(x, 0))),
    "selu": (NF.selu, lambda x: 1.0507009873554805 * np.where(
        x > 0, x, 1.6732632423543772 * np.expm1(np.minimum(x, 0)))),
    "softsign": (NF.softsign, lambda x: x / (1 + np.abs(x))),
    "logsigmoid": (NF.logsigmoid, lambda x: -np.logaddexp(0, -x)),
    "hardsigmoid": (NF.hardsigmoid, lambda x: np.clip(x / 6 + 0.5, 0, 1)),
    "relu6": (lambda t: NF.relu6(t * 3.0), lambda x: np.clip(x * 3, 0, 6)),
    "hardswish": (NF.hardswish, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "softmin": (lambda t: NF.softmin(t, -1), lambda x: _softmax(-x, -1)),
    "logsumexp": (lambda t: F.logsumexp(t, -1), lambda x: _logsumexp(x, -1)),
    "logsumexp-dims-keepdim": (lambda t: F.logsumexp(t, (0, 1), keepdim=True),
                               lambda x: _logsumexp(x, (0, 1), True)),
}

for _d in FLOATS:
    for _name, (_fn, _orc) in _ACTIVATIONS.items():
        for view, shape, scale in (("", (3, 5), 3.0), ("permuted", (2, 3, 4), 3.0),
                                   ("", (0, 4), 1.0)):
            if shape[0] == 0 and ("dim0" in _name or "dims" in _name):
                continue  # a reduction over an empty axis has no maximum to shift by
            tag = "empty" if shape[0] == 0 else (view or "basic")
            cid = f"{_name}-{tag}-{_d.name}"
            v = (np.asarray(sample(shape, dt.float64, rng_for(cid))) * scale).astype(
                np.asarray(sample((), _d, rng_for(cid))).dtype)
            case(cid, "functional", _fn, _orc, [Arg(v, view, (), _d)], _d, **_tol(_d))
    # a 0-d tensor has dims 0 and -1, as in PyTorch: softmax is 1, log_softmax 0
    for _name, _fn0, _val in (("softmax", F.softmax, 1.0), ("log_softmax", F.log_softmax, 0.0),
                              ("softmin", NF.softmin, 1.0)):
        for _dim in (0, -1):
            cid = f"{_name}-0d-dim{_dim}-{_d.name}"
            v = np.asarray(sample((), _d, rng_for(cid)))
            case(cid, "functional", lambda t, f=_fn0, dim=_dim: f(t, dim),
                 lambda x, val=_val: np.asarray(val, np.float64), [Arg(v, "", (), _d)], _d)
    # a row of -inf must give the limits, not nan (logsumexp's max trick)
    cid = f"logsumexp-neg-inf-row-{_d.name}"
    v = np.array([[-np.inf, -np.inf], [0.0, 1.0]]).astype(
        np.asarray(sample((), _d, rng_for(cid))).dtype)
    case(cid, "functional", lambda t: F.logsumexp(t, -1), lambda x: _logsumexp(x, -1),
         [Arg(v, "", (), _d)], _d, grad=())
    cid = f"softmax-large-logits-{_d.name}"
    big = 60000.0 if _d is not dt.float16 else 6000.0
    v = np.array([[big, big - 1, 0.0]]).astype(np.asarray(sample((), _d, rng_for(cid))).dtype)
    case(cid, "functional", lambda t: F.softmax(t, -1), lambda x: _softmax(x, -1),
         [Arg(v, "", (), _d)], _d, grad=(), **_tol(_d))

    # norms
    rng = rng_for(f"norms-{_d.name}")
    x = Arg(np.asarray(sample((2, 3, 4), _d, rng)), "", (), _d)
    xp = Arg(np.asarray(sample((2, 3, 4), _d, rng)), "permuted", (), _d)
    w4, b4 = (Arg(np.asarray(sample((4,), _d, rng)), "", (), _d) for _ in range(2))
    w34 = Arg(np.asarray(sample((3, 4), _d, rng)), "", (), _d)

    def _ln(x: np.ndarray, w: Any = None, b: Any = None, nd: int = 1) -> Any:
        axes = tuple(range(x.ndim - nd, x.ndim))
        mu = x.mean(axis=axes, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
        out = (x - mu) / np.sqrt(var + 1e-5)
        return out * (w if w is not None else 1) + (b if b is not None else 0)

    def _ln_one(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> Any:
        return np.zeros_like(x) * w + b  # a row of one element is its own mean

    eps = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -23,
           "float64": 2.0 ** -52}[_d.name]

    def _rms(x: np.ndarray, w: Any = None, nd: int = 1, eps: float = eps) -> Any:
        axes = tuple(range(x.ndim - nd, x.ndim))
        out = x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps)
        return out * w if w is not None else out

    t = _tol(_d)
    case(f"layer_norm-{_d.name}", "functional", lambda a: F.layer_norm(a, 4), _ln, [x], _d, **t)
    case(f"layer_norm-weight-bias-permuted-{_d.name}", "functional",
         lambda a, w, b: F.layer_norm(a, (4,), w, b), _ln, [xp, w4, b4], _d, **t)
    case(f"layer_norm-2d-weight-{_d.name}", "functional",
         lambda a, w: F.layer_norm(a, (3, 4), w), lambda a, w: _ln(a, w, None, 2), [x, w34],
         _d, **t)
    case(f"layer_norm-bias-{_d.name}", "functional",
         lambda a, b: F.layer_norm(a, 4, None, b), lambda a, b: _ln(a, None, b), [xp, b4], _d,
         **t)
    case(f"layer_norm-rows-of-one-{_d.name}", "functional",
         lambda a, w, b: F.layer_norm(a, 1, w, b, eps=0.5), _ln_one,
         [Arg(np.asarray(sample((3, 1), _d, rng)), "", (), _d),
          Arg(np.asarray(sample((1,), _d, rng)), "", (), _d),
          Arg(np.asarray(sample((1,), _d, rng)), "", (), _d)], _d, **t)
    case(f"rms_norm-{_d.name}", "functional", lambda a: F.rms_norm(a, 4), _rms, [x], _d, **t)
    case(f"rms_norm-weight-permuted-{_d.name}", "functional",
         lambda a, w: F.rms_norm(a, (4,), w), _rms, [xp, w4], _d, **t)
    case(f"rms_norm-2d-eps-{_d.name}", "functional",
         lambda a: F.rms_norm(a, (3, 4), eps=0.1), lambda a: _rms(a, None, 2, 0.1), [x], _d, **t)

    # linear
    rng = rng_for(f"linear-{_d.name}")
    xl = Arg(np.asarray(sample((2, 3, 4), _d, rng)), "", (), _d)
    wl = Arg(np.asarray(sample((5, 4), _d, rng)), "", (), _d)
    bl = Arg(np.asarray(sample((5,), _d, rng)), "", (), _d)
    case(f"linear-{_d.name}", "functional", F.linear, lambda a, w: a @ w.T, [xl, wl], _d, **t)
    case(f"linear-bias-{_d.name}", "functional", F.linear, lambda a, w, b: a @ w.T + b,
         [xl, wl, bl], _d, **t)
    case(f"linear-1d-permuted-weight-{_d.name}", "functional", F.linear,
         lambda a, w: a @ w.T, [Arg(np.asarray(sample((4,), _d, rng)), "", (), _d),
                                Arg(wl.value, "permuted", (), _d)], _d, **t)

    # losses
    rng = rng_for(f"losses-{_d.name}")
    logits = Arg(np.asarray(sample((4, 3), _d, rng)), "", (), _d)
    logits3 = Arg(np.asarray(sample((2, 3, 2), _d, rng)), "", (), _d)
    target = Arg(np.array([0, 2, 1, 2]), "", (), dt.int64)
    target_ign = Arg(np.array([0, -100, 1, 2]), "", (), dt.int64)
    target3 = Arg(np.array([[0, 2], [1, 1]]), "", (), dt.int64)
    weight = Arg(np.asarray(sample((3,), _d, rng, "positive")), "", (), _d)
    probs = Arg(np.asarray(_softmax(sample((4, 3), dt.float64, rng), -1)).astype(
        logits.value.dtype), "", (), _d)

    def _nll(lp: np.ndarray, tgt: np.ndarray, w: Any = None, reduction: str = "mean",
             ignore: int = -100) -> Any:
        lp = np.moveaxis(lp, 1, -1) if lp.ndim > 2 else lp
        valid = tgt != ignore
        safe = np.where(valid, tgt, 0)
        picked = np.take_along_axis(lp, safe[..., None], -1)[..., 0]
        ww = valid * (w[safe] if w is not None else 1.0)
        loss = -picked * ww
        if reduction == "mean":
            return loss.sum() / ww.sum()
        return loss.sum() if reduction == "sum" else loss

    def _logp(z: np.ndarray) -> Any:
        return np.log(_softmax(z, 1))

    for red in ("mean", "sum", "none"):
        case(f"cross_entropy-{red}-{_d.name}", "functional",
             lambda z, y, r=red: F.cross_entropy(z, y, reduction=r),
             lambda z, y, r=red: _nll(_logp(z), y, None, r), [logits, target], _d, **t)
        case(f"nll_loss-{red}-{_d.name}", "functional",
             lambda z, y, r=red: F.nll_loss(z, y, reduction=r),
             lambda z, y, r=red: _nll(z, y, None, r), [logits, target], _d, **t)
        case(f"mse_loss-{red}-{_d.name}", "functional",
             lambda a, b, r=red: F.mse_loss(a, b, reduction=r),
             lambda a, b, r=red: _reduce((a - b) ** 2, r),
             [logits, Arg(probs.value, "permuted", (), _d)], _d, **t)
    case(f"cross_entropy-weight-ignore_index-{_d.name}", "functional",
         lambda z, y, w: F.cross_entropy(z, y, w),
         lambda z, y, w: _nll(_logp(z), y, w), [logits, target_ign, weight], _d, grad=(0,), **t)
    case(f"cross_entropy-spatial-{_d.name}", "functional", F.cross_entropy,
         lambda z, y: _nll(_logp(z), y), [logits3, target3], _d, **t)
    case(f"cross_entropy-probabilities-{_d.name}", "functional", F.cross_entropy,
         lambda z, p: -(p * _logp(z)).sum(1).mean(), [logits, probs], _d, grad=(0,), **t)
    case(f"cross_entropy-label_smoothing-{_d.name}", "functional",
         lambda z, y: F.cross_entropy(z, y, label_smoothing=0.1),
         lambda z, y: 0.9 * _nll(_logp(z), y) - 0.1 * _logp(z).sum(1).mean() / 3,
         [logits, target], _d, **t)
    case(f"cross_entropy-ignore_index-label_smoothing-{_d.name}", "functional",
         lambda z, y: F.cross_entropy(z, y, label_smoothing=0.1),
         lambda z, y: 0.9 * _nll(_logp(z), y) - 0.1 * (
             _logp(z).sum(1) * (y != -100)).sum() / 3 / (y != -100).sum(),
         [logits, target_ign], _d, **t)
    case(f"cross_entropy-1d-{_d.name}", "functional", F.cross_entropy,
         lambda z, y: -np.log(_softmax(z, 0))[y], [Arg(logits.value[0], "", (), _d),
                                                   Arg(np.array(2), "", (), dt.int64)], _d, **t)
    case(f"nll_loss-weight-{_d.name}", "functional", lambda z, y, w: F.nll_loss(z, y, w),
         lambda z, y, w: _nll(z, y, w), [logits, target_ign, weight], _d, grad=(0,), **t)

# one_hot: integer classes in, int64 out
for _d in (dt.int64, dt.int32, dt.uint8):
    cid = f"one_hot-{_d.name}"
    y = Arg(np.array([[0, 2], [3, 1]]).astype(_d.numpy_name), "", (), _d)
    case(cid, "functional", lambda t: F.one_hot(t, 5), lambda v: np.eye(5, dtype=np.int64)[v],
         [y], dt.int64)
    case(f"one_hot-inferred-{_d.name}", "functional", lambda t: F.one_hot(t),
         lambda v: np.eye(4, dtype=np.int64)[v], [y], dt.int64)


# -- dropout: statistics and reproducibility ------------------------------------------------------

def _dropout_check(d: dt.DType) -> Callable[[Any], None]:
    def check(device: Any) -> None:
        x = ember.ones(64, 64, dtype=d, device=device) * 3.0
        out = F.dropout(x, 0.25, generator=ember.Generator(7)).numpy().astype(np.float64)
        kept = out != 0
        frac = kept.mean()
        assert 0.70 < frac < 0.80, f"dropout(p=0.25) kept {frac:.3f} of the elements"
        np.testing.assert_allclose(out[kept], 4.0, rtol=1e-2)
        again = F.dropout(x, 0.25, generator=ember.Generator(7)).numpy().astype(np.float64)
        np.testing.assert_array_equal(out, again)
        other = F.dropout(x, 0.25, generator=ember.Generator(8)).numpy().astype(np.float64)
        assert (other != out).any(), "dropout with another seed gave the same mask"
        np.testing.assert_array_equal(F.dropout(x, 0.25, training=False).numpy(), x.numpy())
        assert not F.dropout(x, 1.0).numpy().any(), "dropout(p=1) must zero everything"
    return check


for _d in FLOATS:
    register(Case(id=f"dropout-statistics-{_d.name}", group="functional",
                  check=_dropout_check(_d), dtypes=(_d,)))
