"""Composite ops built from primitives: activations, normalisation, losses, layers' maths.

A backend need not implement any of these.  The softmax family, the norms and cross entropy
are also ops (`ember.ops.composite`): where ``x.device.implements(op)`` (a kernel for the op in
the backend's table, see `docs/writing-a-backend.md`) the op runs as that kernel, otherwise
the decomposition below runs on the device.  Their backward composites live in
`ember._backward` and are re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from . import _dtype as dt
from ._apply import apply, cast, normalize_dim, normalize_dims, to_float
from ._backward import (
    cross_entropy_backward,
    gelu_backward,
    gru_cell_backward,
    gru_layer_backward,
    layer_norm_backward,
    log_softmax_backward,
    lstm_cell_backward,
    lstm_layer_backward,
    rms_norm_backward,
    scaled_dot_product_attention_backward,
    softmax_backward,
)
from ._checks import check_range
from ._errors import DTypeError, ShapeError
from .amp._state import AUTOCAST, autocast_inputs, setting
from .ops import check_shapes, composite as cops, nn as nnops
from .ops._op import Op

if TYPE_CHECKING:
    from ._random import Generator
    from ._tensor import Tensor

__all__ = [
    "adaptive_avg_pool2d", "avg_pool2d", "conv1d", "conv2d", "conv_transpose1d",
    "conv_transpose2d", "cross_entropy", "cross_entropy_backward", "dropout", "elu", "embedding",
    "gelu", "gelu_backward", "gru_cell_backward", "gru_layer_backward", "hardtanh", "interpolate",
    "layer_norm", "layer_norm_backward", "leaky_relu", "linear", "log_softmax",
    "log_softmax_backward", "logsumexp", "lstm_cell_backward", "lstm_layer_backward", "max_pool2d",
    "mish", "mse_loss", "nll_loss", "one_hot", "relu", "rms_norm", "rms_norm_backward",
    "scaled_dot_product_attention_backward", "silu", "softmax", "softmax_backward", "softplus",
]

IntPair = int | Sequence[int]


def _tuple(v: IntPair, n: int, name: str) -> tuple[int, ...]:
    out = (int(v),) * n if isinstance(v, int) else tuple(int(i) for i in v)
    if len(out) != n:
        raise ValueError(f"{name} needs {n} value(s), got {v!r}")
    return out


# -- activations --------------------------------------------------------------------------------


def relu(x: Tensor) -> Tensor:
    """``max(x, 0)``; its gradient is 0 at 0, as PyTorch's."""
    out = x.clamp(min=0)
    if x.requires_grad:  # clamp passes the gradient at its bound: relu passes it above 0 only
        out = out.detach().where(x <= 0, x)
    return out


def leaky_relu(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    from ._elementwise import where

    return where(x >= 0, x, x * negative_slope)


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    from ._elementwise import where

    return where(x > 0, x, (x.clamp(max=0).expm1()) * alpha)


def hardtanh(x: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    return x.clamp(min_val, max_val)


def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta x)) / beta``, linear above ``threshold`` as PyTorch."""
    from ._elementwise import where

    if AUTOCAST:  # `ember.autocast`: float32 (ember.amp._policy)
        (x,) = autocast_inputs("softplus", (x,))
    bx = x * beta
    soft = (bx.clamp(max=threshold).exp().log1p()) / beta
    return where(bx > threshold, x, soft)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """Gaussian error linear unit, exact (``erf``) or ``approximate="tanh"``.

    One op (`ember.ops.composite.gelu`) where the device implements it, else its
    decomposition into elementwise primitives.

    Examples
    --------
    >>> import ember
    >>> round(ember.functional.gelu(ember.tensor([1.0])).item(), 4)
    0.8413
    """
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    if x.dtype.is_floating_point and x._device.implements(cops.gelu):
        return apply(cops.gelu, x, approximate=approximate)  # type: ignore[no-any-return]
    if approximate == "tanh":
        inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
        return x * 0.5 * (inner.tanh() + 1.0)
    return x * 0.5 * ((x * (1.0 / math.sqrt(2.0))).erf() + 1.0)


def silu(x: Tensor) -> Tensor:
    """``x * sigmoid(x)``."""
    return x * x.sigmoid()


def mish(x: Tensor) -> Tensor:
    return x * softplus(x).tanh()


def logsumexp(x: Tensor, dim: int | Sequence[int], keepdim: bool = False) -> Tensor:
    """``log(sum(exp(x)))`` over ``dim``, computed stably."""
    from ._elementwise import where

    x = to_float(x)
    if AUTOCAST:
        (x,) = autocast_inputs("logsumexp", (x,))
    if 0 in x.shape and any(x.shape[d] == 0 for d in normalize_dims(dim, x.ndim)):
        return x.exp().sum(dim=dim, keepdim=keepdim).log()  # log(0): -inf, as in PyTorch
    m = x.amax(dim=dim, keepdim=True).detach()
    m = where(m.isinf(), 0.0, m)
    out = (x - m).exp().sum(dim=dim, keepdim=True).log() + m
    return out if keepdim else out.squeeze(dim)


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """``exp(x) / sum(exp(x))`` along ``dim``.

    Examples
    --------
    >>> import ember
    >>> round(ember.tensor([1., 1.]).softmax(-1)[0].item(), 3)
    0.5
    """
    x = to_float(x)
    if AUTOCAST:  # the decomposition below must see the cast input too
        (x,) = autocast_inputs(cops.softmax, (x,))
    if x.ndim and x._device.implements(cops.softmax):
        return apply(cops.softmax, x, dim=normalize_dim(dim, x.ndim))  # type: ignore[no-any-return]
    if 0 in x.shape:  # nothing to normalise (and no max to shift by): an empty result
        return x * 0.0
    e = (x - x.amax(dim=dim, keepdim=True).detach()).exp()
    return e / e.sum(dim=dim, keepdim=True)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """``log(softmax(x))`` computed stably."""
    x = to_float(x)
    if AUTOCAST:
        (x,) = autocast_inputs(cops.log_softmax, (x,))
    if x.ndim and x._device.implements(cops.log_softmax):
        return apply(cops.log_softmax, x,  # type: ignore[no-any-return]
                     dim=normalize_dim(dim, x.ndim))
    if 0 in x.shape:
        return x * 0.0
    shifted = x - x.amax(dim=dim, keepdim=True).detach()
    return shifted - shifted.exp().sum(dim=dim, keepdim=True).log()


# -- normalisation ------------------------------------------------------------------------------


def layer_norm(x: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalise over the last ``len(normalized_shape)`` axes (biased variance, as PyTorch)."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(x.shape[x.ndim - len(shape):]) != shape:
        raise ShapeError(f"layer_norm: normalized_shape {shape} does not match the last axes "
                         f"of input {x.shape}")
    if AUTOCAST:
        x, weight, bias = autocast_inputs(cops.layer_norm, (x, weight, bias))
    if (shape and x.dtype.is_floating_point and _fits(weight, x, shape) and _fits(bias, x, shape)
            and x._device.implements(cops.layer_norm)):
        args = [t for t in (x, weight, bias) if t is not None]
        out = apply(cops.layer_norm, *args, ndim=len(shape), eps=float(eps),
                    weight=weight is not None, bias=bias is not None)
        return out[0]  # type: ignore[no-any-return]
    dims = tuple(range(x.ndim - len(shape), x.ndim))
    mu = x.mean(dim=dims, keepdim=True)
    centred = x - mu
    var = (centred * centred).mean(dim=dims, keepdim=True)
    out = centred * (var + eps).rsqrt()
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


def rms_norm(x: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
             eps: float | None = None) -> Tensor:
    """Scale by the root mean square over the last axes."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if AUTOCAST:
        x, weight = autocast_inputs(cops.rms_norm, (x, weight))
    dims = tuple(range(x.ndim - len(shape), x.ndim))
    eps = eps if eps is not None else float(_finfo_eps(x.dtype))
    if (shape and x.dtype.is_floating_point and tuple(x.shape[x.ndim - len(shape):]) == shape
            and _fits(weight, x, shape) and x._device.implements(cops.rms_norm)):
        args = [x] if weight is None else [x, weight]
        out = apply(cops.rms_norm, *args, ndim=len(shape), eps=float(eps),
                    weight=weight is not None)
        return out[0]  # type: ignore[no-any-return]
    out = x * ((x * x).mean(dim=dims, keepdim=True) + eps).rsqrt()
    return out * weight if weight is not None else out


def _fits(t: Tensor | None, x: Tensor, shape: tuple[int, ...]) -> bool:
    """Whether an optional weight or bias can go to a fused norm kernel as it is."""
    return t is None or (t._dtype is x._dtype and tuple(t.shape) == shape)


def _finfo_eps(dtype: dt.DType) -> float:
    return {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -23,
            "float64": 2.0 ** -52}.get(dtype.name, 2.0 ** -23)


# -- layers' maths ------------------------------------------------------------------------------


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T + bias`` with PyTorch's ``[out, in]`` weight layout."""
    if AUTOCAST:  # `ember.autocast`: the autocast dtype, bias included (ember.amp._policy)
        x, weight, bias = autocast_inputs(cops.linear, (x, weight, bias))
    xs, ws = x._data.shape, weight._data.shape  # payload shapes: no property calls per check
    if len(xs) > 2 and len(ws) == 2 and xs[-1] == ws[1]:
        # one [rows, in] @ [in, out] product (and one for each gradient) instead of a batch
        # of small ones against a broadcast weight, as PyTorch does
        lead = tuple(xs[:-1])
        return linear(x.reshape(-1, xs[-1]), weight, bias).reshape(*lead, ws[0])
    if bias is not None and len(xs) == 2 and len(ws) == 2:
        bs, dtype, dev = bias._data.shape, x._dtype, x._device
        if (len(bs) == 1 and weight._dtype is dtype and bias._dtype is dtype
                and dtype.kind == "f" and xs[1] == ws[1] and bs[0] == ws[0]
                and weight._device is dev and bias._device is dev
                and dev.implements(cops.linear)):
            return dev.dispatch(cops.linear, (x, weight, bias),  # type: ignore[no-any-return]
                                {})
    out = x @ weight.transpose(-1, -2)
    return out + bias if bias is not None else out


def _conv(op: Op, n: int, x: Tensor, weight: Tensor, bias: Tensor | None,
          stride: IntPair, padding: IntPair, dilation: IntPair, groups: int,
          output_padding: IntPair | None = None) -> Tensor:
    if x.ndim != n + 2 or weight.ndim != n + 2:
        raise ShapeError(f"{op.name}: expected input and weight of {n + 2} axes, got "
                         f"{x.shape} and {weight.shape}")
    if AUTOCAST:  # the bias too, so that the output stays in the autocast dtype
        x, weight, bias = autocast_inputs(op, (x, weight, bias))
    transposed = output_padding is not None
    cin = weight.shape[0] if transposed else weight.shape[1] * groups
    if x.shape[1] != cin or (weight.shape[0] % groups if not transposed else cin % groups):
        raise ShapeError(f"{op.name}: input {x.shape} has {x.shape[1]} channels but weight "
                         f"{weight.shape} with groups={groups} expects {cin}")
    params = dict(stride=_tuple(stride, n, "stride"), padding=_tuple(padding, n, "padding"),
                  dilation=_tuple(dilation, n, "dilation"), groups=groups)
    if transposed:
        assert output_padding is not None
        params["output_padding"] = _tuple(output_padding, n, "output_padding")
    check_shapes(op, [x.shape, weight.shape], params)  # the clear error, before any cast
    out: Tensor = apply(op, x, cast(weight, x.dtype), **params)
    if bias is not None:
        out = out + bias.reshape(-1, *([1] * n))
    return out


def conv1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntPair = 1,
           padding: IntPair = 0, dilation: IntPair = 1, groups: int = 1) -> Tensor:
    return _conv(nnops.conv1d, 1, x, weight, bias, stride, padding, dilation, groups)


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntPair = 1,
           padding: IntPair = 0, dilation: IntPair = 1, groups: int = 1) -> Tensor:
    """2-D convolution of ``x[N, C, H, W]`` with ``weight[O, C/groups, kH, kW]``."""
    return _conv(nnops.conv2d, 2, x, weight, bias, stride, padding, dilation, groups)


def conv_transpose1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntPair = 1,
                     padding: IntPair = 0, output_padding: IntPair = 0, groups: int = 1,
                     dilation: IntPair = 1) -> Tensor:
    return _conv(nnops.conv_transpose1d, 1, x, weight, bias, stride, padding, dilation, groups,
                 output_padding)


def conv_transpose2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntPair = 1,
                     padding: IntPair = 0, output_padding: IntPair = 0, groups: int = 1,
                     dilation: IntPair = 1) -> Tensor:
    return _conv(nnops.conv_transpose2d, 2, x, weight, bias, stride, padding, dilation, groups,
                 output_padding)


def max_pool2d(x: Tensor, kernel_size: IntPair, stride: IntPair | None = None,
               padding: IntPair = 0, dilation: IntPair = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    k = _tuple(kernel_size, 2, "kernel_size")
    params = dict(kernel_size=k, stride=_tuple(stride if stride is not None else k, 2, "stride"),
                  padding=_tuple(padding, 2, "padding"), dilation=_tuple(dilation, 2, "dilation"),
                  ceil_mode=ceil_mode)
    check_shapes(nnops.max_pool2d, [x.shape], params)
    if not return_indices and x._device.implements(cops.max_pool2d_values):
        # no indices to compute (Autodiff, which needs them for the backward, says no here)
        return apply(cops.max_pool2d_values, x, **params)  # type: ignore[no-any-return]
    values, indices = apply(nnops.max_pool2d, x, **params)
    return (values, indices) if return_indices else values


def avg_pool2d(x: Tensor, kernel_size: IntPair, stride: IntPair | None = None,
               padding: IntPair = 0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    k = _tuple(kernel_size, 2, "kernel_size")
    params = dict(kernel_size=k, stride=_tuple(stride if stride is not None else k, 2, "stride"),
                  padding=_tuple(padding, 2, "padding"), ceil_mode=bool(ceil_mode),
                  count_include_pad=bool(count_include_pad))
    check_shapes(nnops.avg_pool2d, [x.shape], params)
    return apply(nnops.avg_pool2d, to_float(x), **params)  # type: ignore[no-any-return]


def adaptive_avg_pool2d(x: Tensor, output_size: IntPair) -> Tensor:
    size = _tuple(output_size, 2, "output_size")
    check_shapes(nnops.adaptive_avg_pool2d, [x.shape], dict(output_size=size))
    return apply(nnops.adaptive_avg_pool2d, to_float(x),  # type: ignore[no-any-return]
                 output_size=size)


def embedding(indices: Tensor, weight: Tensor) -> Tensor:
    """Rows of ``weight`` picked by integer ``indices`` (PyTorch's argument order); an index
    outside ``[0, rows)`` is an `IndexError` (no negative indices, as in PyTorch)."""
    if indices._dtype.kind not in "iu":
        raise DTypeError(f"embedding: indices must be an integer tensor, got {indices._dtype.name}")
    n = weight.shape[0]
    check_range("embedding", indices, 0, n, lambda v: f"index{v} out of range in self (a weight "
                f"of {n} rows: indices must lie in [0, {n}))")
    return apply(nnops.embedding, weight, cast(indices, dt.int64))  # type: ignore[no-any-return]


def interpolate(x: Tensor, size: IntPair | None = None,
                scale_factor: float | Sequence[float] | None = None, mode: str = "nearest",
                align_corners: bool | None = None) -> Tensor:
    n = x.ndim - 2
    if size is None:
        if scale_factor is None:
            raise ValueError("interpolate needs size or scale_factor")
        sf = (scale_factor,) * n if isinstance(scale_factor, (int, float)) else tuple(scale_factor)
        if len(sf) != n or not all(isinstance(f, (int, float)) and 0 < f < math.inf
                                   for f in sf):
            raise ShapeError(f"interpolate: scale_factor={scale_factor!r} must be {n} positive "
                             f"finite number(s) (input shape {x.shape})")
        size = tuple(math.floor(s * f) for s, f in zip(x.shape[2:], sf, strict=True))
    params = dict(size=_tuple(size, n, "size"), mode=mode, align_corners=bool(align_corners))
    check_shapes(nnops.interpolate, [x.shape], params)
    return apply(nnops.interpolate, to_float(x), **params)  # type: ignore[no-any-return]


def dropout(x: Tensor, p: float = 0.5, training: bool = True,
            generator: Generator | None = None) -> Tensor:
    """Zero elements with probability ``p`` and scale the rest by ``1 / (1 - p)``."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    from ._creation import rand

    keep = rand(x.shape, generator=generator, dtype=x.dtype, device=x.device) >= p
    return x * cast(keep, x.dtype) * (1.0 / (1.0 - p))


# -- losses -------------------------------------------------------------------------------------


def one_hot(indices: Tensor, num_classes: int = -1) -> Tensor:
    """int64 one-hot encoding along a new last axis."""
    from ._creation import arange

    if indices._dtype.kind not in "iu":
        raise DTypeError(f"one_hot: indices must be an integer tensor, got {indices._dtype.name}")
    if num_classes < 0:
        if indices.numel() == 0:
            raise RuntimeError("one_hot: cannot infer num_classes of an empty tensor")
        num_classes = int(indices.amax().item()) + 1
    check_range("one_hot", indices, 0, num_classes, lambda v: f"class value{v} must lie in "
                f"[0, num_classes) with num_classes {num_classes} (class values must be smaller "
                "than num_classes and non-negative)", RuntimeError)
    classes = arange(num_classes, device=indices.device)
    return cast(indices.unsqueeze(-1) == classes, dt.int64)


def _reduce_loss(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _check_targets(op: str, target: Tensor, c: int, ignore_index: int,
                   ignored: bool = True) -> None:
    """Class targets lie in ``[0, c)`` or are ``ignore_index`` (``ignored``: may still be)."""
    check_range(op, target, 0, c, lambda v: f"Target{v} is out of bounds: class indices must "
                f"lie in [0, {c}) (or be ignore_index {ignore_index})",
                skip=ignore_index if ignored else None)


def nll_loss(log_probs: Tensor, target: Tensor, weight: Tensor | None = None,
             ignore_index: int = -100, reduction: str = "mean") -> Tensor:
    """Negative log likelihood of integer ``target`` classes under ``log_probs[N, C, ...]``."""
    if AUTOCAST:
        log_probs, target, weight = autocast_inputs("nll_loss", (log_probs, target, weight))
    cdim = 1 if log_probs.ndim > 1 else 0
    if log_probs.ndim > 1 and (target.shape != log_probs.shape[:1] + log_probs.shape[2:]):
        raise ShapeError(f"nll_loss: target {target.shape} does not match input "
                         f"{log_probs.shape} without its class axis")
    target = cast(target, dt.int64)
    valid = target != ignore_index
    safe = target * cast(valid, dt.int64)
    _check_targets("nll_loss", safe, log_probs.shape[cdim], ignore_index, ignored=False)
    picked = log_probs.gather(cdim, safe.unsqueeze(cdim)).squeeze(cdim)
    w = cast(valid, log_probs.dtype)
    if weight is not None:
        w = w * weight[safe]
    loss = -picked * w
    if reduction == "mean":
        return loss.sum() / w.sum()
    return _reduce_loss(loss, reduction)


def cross_entropy(logits: Tensor, target: Tensor, weight: Tensor | None = None,
                  ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """Cross entropy of ``logits[N, C, ...]`` against integer classes or class probabilities.

    Examples
    --------
    >>> import ember
    >>> loss = ember.functional.cross_entropy(ember.zeros(1, 4), ember.tensor([2]))
    >>> round(loss.item(), 4)
    1.3863
    """
    cdim = 1 if logits.ndim > 1 else 0
    fused = (weight is None and not target.dtype.is_floating_point and logits.ndim
             and logits.dtype.is_floating_point and reduction in ("mean", "sum", "none")
             and tuple(target.shape) == tuple(logits.shape[:cdim] + logits.shape[cdim + 1:])
             and logits._device.implements(cops.cross_entropy))
    if AUTOCAST:
        if fused and logits._dtype.itemsize < 4 and setting(logits._device) is not None:
            # autocast's float32 loss: the kernel reads the half logits and computes in
            # float32 (what widening them first gives, without the float32 copy); the
            # gradient comes back in the logits' dtype, as the widening's backward rounds it
            return _fused_cross_entropy(logits, target, ignore_index, reduction,
                                        label_smoothing, float32_loss=True)
        logits, target, weight = autocast_inputs(cops.cross_entropy, (logits, target, weight))
    if fused:
        return _fused_cross_entropy(logits, target, ignore_index, reduction, label_smoothing)
    logp = log_softmax(logits, dim=cdim)
    if target.dtype.is_floating_point:  # class probabilities
        c = logits.shape[cdim]
        probs = target * (1 - label_smoothing) + label_smoothing / c
        wl = logp * weight.reshape(-1, *([1] * (logits.ndim - 2))) if weight is not None else logp
        return _reduce_loss(-(probs * wl).sum(dim=cdim), reduction)
    nll = nll_loss(logp, target, weight, ignore_index, reduction)
    if label_smoothing == 0.0:
        return nll
    c = logits.shape[cdim]
    valid = cast(cast(target, dt.int64) != ignore_index, logp.dtype)
    wl = logp * weight.reshape(-1, *([1] * (logits.ndim - 2))) if weight is not None else logp
    smooth = -wl.sum(dim=cdim) * valid / c
    if reduction == "mean":
        denom = valid.sum() if weight is None else (
            valid * weight[cast(target, dt.int64) * cast(valid, dt.int64)]).sum()
        smooth_r = smooth.sum() / denom
    else:
        smooth_r = _reduce_loss(smooth, reduction)
    return nll * (1 - label_smoothing) + smooth_r * label_smoothing


def _fused_cross_entropy(logits: Tensor, target: Tensor, ignore_index: int, reduction: str,
                         label_smoothing: float, float32_loss: bool = False) -> Tensor:
    """The composite op over ``[M, C]`` rows: the class axis moved last, other axes flattened."""
    c = logits.shape[1] if logits.ndim > 1 else logits.shape[0]
    if logits.ndim > 2:
        logits = logits.permute(0, *range(2, logits.ndim), 1)
    rows = logits.reshape(-1, c)
    _check_targets("cross_entropy", target, c, ignore_index)
    tgt = cast(target, dt.int64).reshape(-1)
    params = {"ignore_index": int(ignore_index), "label_smoothing": float(label_smoothing),
              "reduction": reduction, "float32_loss": float32_loss}
    if float32_loss and tgt._device is rows._device:
        # autocast's float32 is the kernel's own arithmetic here: past `apply`, whose policy
        # would widen the logits first
        out = rows._device.dispatch(cops.cross_entropy, (rows, tgt), params)
    else:
        out = apply(cops.cross_entropy, rows, tgt, **params)
    loss: Tensor = out[0]
    return loss.reshape(target.shape) if reduction == "none" else loss


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """Mean squared error."""
    if AUTOCAST:
        input, target = autocast_inputs("mse_loss", (input, target))
    d = input - target
    return _reduce_loss(d * d, reduction)


def normalize_dim_arg(dim: int, ndim: int) -> int:
    return normalize_dim(dim, ndim)
