"""Backward composites: the gradients of softmax, the norms, cross entropy, GELU, attention and
the LSTM / GRU cells and layers.

Autodiff's rules for the composite ops call these.  Each runs the device's own kernel for its
op (`ember.ops.composite`) where ``device.implements(op)``, and its decomposition from ember
ops otherwise, so it works on any device and, under ``create_graph``, is itself
differentiable.  Row statistics (``mean``, ``rstd``, ``lse``, ``count``) are what the forward
composite op returned: float32 for half inputs, shaped like the input without its normalised
(or class) axes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from . import _dtype as dt
from ._apply import apply, cast, normalize_dim
from .ops import composite as cops

if TYPE_CHECKING:
    from ._tensor import Tensor

__all__ = ["cross_entropy_backward", "gelu_backward", "gru_cell_backward", "gru_layer_backward",
           "layer_norm_backward", "log_softmax_backward", "lstm_cell_backward",
           "lstm_layer_backward", "rms_norm_backward", "scaled_dot_product_attention_backward",
           "softmax_backward"]


def softmax_backward(y: Tensor, g: Tensor, dim: int = -1) -> Tensor:
    """The gradient of ``x`` given ``y = softmax(x, dim)`` and ``g``, the gradient of ``y``:
    ``y * (g - sum(g * y, dim))``.

    Examples
    --------
    >>> import ember
    >>> y = ember.tensor([0.5, 0.5])
    >>> ember.functional.softmax_backward(y, ember.tensor([1.0, 0.0])).tolist()
    [0.25, -0.25]
    """
    d = normalize_dim(dim, y.ndim)
    if y.ndim and g._dtype is y._dtype and y._device.implements(cops.softmax_backward):
        return apply(cops.softmax_backward, y, g, dim=d)  # type: ignore[no-any-return]
    return y * (g - (g * y).sum(dim=d, keepdim=True))


def log_softmax_backward(y: Tensor, g: Tensor, dim: int = -1) -> Tensor:
    """The gradient of ``x`` given ``y = log_softmax(x, dim)`` and ``g``, the gradient of
    ``y``: ``g - exp(y) * sum(g, dim)``."""
    d = normalize_dim(dim, y.ndim)
    if y.ndim and g._dtype is y._dtype and y._device.implements(cops.log_softmax_backward):
        return apply(cops.log_softmax_backward, y, g, dim=d)  # type: ignore[no-any-return]
    return g - y.exp() * g.sum(dim=d, keepdim=True)


def _keep(stat: Tensor, x: Tensor, ndim: int) -> Tensor:
    """A row statistic with the normalised axes back, as size-1 axes."""
    return stat.reshape(*x.shape[:x.ndim - ndim], *([1] * ndim))


def layer_norm_backward(g: Tensor, x: Tensor, mean: Tensor, rstd: Tensor,
                        weight: Tensor | None, ndim: int, affine: bool
                        ) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """Gradients of ``layer_norm``'s input, weight and bias (the last two when ``affine``).

    With ``xhat = (x - mean) * rstd`` and ``h = g * weight``:
    ``dx = rstd * (h - mean(h) - xhat * mean(h * xhat))``, ``dweight = sum(g * xhat)`` and
    ``dbias = sum(g)`` over the leading axes.
    """
    if g._dtype is x._dtype and x._device.implements(cops.layer_norm_backward):
        args = [g, x, mean, rstd] + ([weight] if weight is not None else [])
        dx, dw, db = apply(cops.layer_norm_backward, *args, ndim=ndim,
                           weight=weight is not None, affine=affine)
        if not affine:
            return dx, None, None
        shape = tuple(x.shape[x.ndim - ndim:])
        return dx, dw.reshape(shape), db.reshape(shape)
    dims = tuple(range(x.ndim - ndim, x.ndim))
    lead = tuple(range(x.ndim - ndim))
    r = _keep(rstd, x, ndim)
    xhat = (x - _keep(mean, x, ndim)) * r
    h = g if weight is None else g * weight
    dx = r * (h - h.mean(dim=dims, keepdim=True) - xhat * (h * xhat).mean(dim=dims, keepdim=True))
    dx = cast(dx, x._dtype)
    if not affine:
        return dx, None, None
    dw = cast((g * xhat).sum(dim=lead) if lead else g * xhat, x._dtype)
    db = g.sum(dim=lead) if lead else g
    return dx, dw, db


def rms_norm_backward(g: Tensor, x: Tensor, rstd: Tensor, weight: Tensor | None,
                      ndim: int) -> tuple[Tensor, Tensor | None]:
    """Gradients of ``rms_norm``'s input and weight (None without one).

    With ``h = g * weight``: ``dx = rstd * (h - x * rstd**2 * mean(h * x))`` and
    ``dweight = sum(g * x * rstd)`` over the leading axes.
    """
    if g._dtype is x._dtype and x._device.implements(cops.rms_norm_backward):
        args = [g, x, rstd] + ([weight] if weight is not None else [])
        dx, dw = apply(cops.rms_norm_backward, *args, ndim=ndim, weight=weight is not None)
        if weight is None:
            return dx, None
        return dx, dw.reshape(tuple(x.shape[x.ndim - ndim:]))
    dims = tuple(range(x.ndim - ndim, x.ndim))
    lead = tuple(range(x.ndim - ndim))
    r = _keep(rstd, x, ndim)
    h = g if weight is None else g * weight
    dx = cast(r * (h - x * (r * r) * (h * x).mean(dim=dims, keepdim=True)), x._dtype)
    if weight is None:
        return dx, None
    gx = g * x * r
    return dx, cast(gx.sum(dim=lead) if lead else gx, x._dtype)


def cross_entropy_backward(g: Tensor, logits: Tensor, target: Tensor, lse: Tensor,
                           count: Tensor, ignore_index: int, label_smoothing: float,
                           reduction: str) -> Tensor:
    """Gradient of ``cross_entropy``'s ``logits[M, C]`` (integer ``target[M]``).

    ``(softmax(logits) - (1 - s) onehot(target) - s / C)`` times ``g`` (divided by ``count``
    for ``mean``), zero on rows whose target is ``ignore_index``.
    """
    fits = g._dtype is logits._dtype or (g._dtype is dt.float32 and logits._dtype.itemsize < 4)
    if fits and logits._device.implements(cops.cross_entropy_backward):
        return apply(cops.cross_entropy_backward, g, logits,  # type: ignore[no-any-return]
                     target, lse, count, ignore_index=ignore_index,
                     label_smoothing=label_smoothing, reduction=reduction)
    from ._creation import arange

    c = logits.shape[1]
    p = (logits - lse.unsqueeze(1)).exp()
    valid = target != ignore_index
    safe = target * cast(valid, dt.int64)
    onehot = cast(safe.unsqueeze(1) == arange(c, device=logits.device), p._dtype)
    d = p - onehot * (1.0 - label_smoothing)
    if label_smoothing:
        d = d - label_smoothing / c
    scale = cast(valid, p._dtype)
    if reduction == "none":
        scale = scale * g
    else:
        scale = scale * (g / count if reduction == "mean" else g)
    return cast(d * scale.unsqueeze(1), logits._dtype)


def gelu_backward(g: Tensor, x: Tensor, approximate: str = "none",
                  y: Tensor | None = None) -> Tensor:
    """The gradient of ``x`` given ``g``, the gradient of ``y = gelu(x, approximate)``.

    A device's kernel (`ember.ops.composite.gelu_backward`) gets ``y`` when it is given (the
    CPU's reads ``Phi(x) = y / x`` from it instead of a second ``erf``); the decomposition
    recomputes.

    Exact form: ``g * (Phi(x) + x * phi(x))`` with ``Phi(x) = (1 + erf(x / sqrt 2)) / 2`` and
    ``phi(x) = exp(-x**2 / 2) / sqrt(2 pi)``.  ``tanh`` form, with ``k = sqrt(2 / pi)`` and
    ``t = tanh(k (x + 0.044715 x**3))``: ``g * ((1 + t) / 2 + x (1 - t**2) k (1 + 3 * 0.044715
    x**2) / 2)``.

    Examples
    --------
    >>> import ember
    >>> round(ember.functional.gelu_backward(ember.tensor([1.0]), ember.tensor([0.0])).item(), 4)
    0.5
    """
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu_backward: approximate must be 'none' or 'tanh', got "
                         f"{approximate!r}")
    if g._dtype is x._dtype and x._device.implements(cops.gelu_backward):
        if y is None or y._dtype is not x._dtype or tuple(y.shape) != tuple(x.shape):
            y = apply(cops.gelu, x, approximate=approximate) \
                if x._device.implements(cops.gelu) else None
        if y is not None:
            return apply(cops.gelu_backward, g, x, y,  # type: ignore[no-any-return]
                         approximate=approximate)
    if approximate == "tanh":
        k = math.sqrt(2.0 / math.pi)
        x2 = x * x
        t = ((x + x2 * x * 0.044715) * k).tanh()
        d = (t + 1.0) * 0.5 + x * (1.0 - t * t) * (x2 * (3 * 0.044715) + 1.0) * (0.5 * k)
        return g * d
    cdf = ((x * (1.0 / math.sqrt(2.0))).erf() + 1.0) * 0.5
    pdf = (x * x * -0.5).exp() * (1.0 / math.sqrt(2.0 * math.pi))
    return g * (cdf + x * pdf)


def scaled_dot_product_attention_backward(
        g: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
        mask: Tensor | None = None, *, scale: float, causal: bool = False
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients ``(dq, dk, dv)`` of ``out = softmax(q k^T scale + bias) v`` given ``g``, the
    gradient of ``out``, and the row logsumexp ``lse`` the forward returned.

    The weights come back as ``p = exp(s - lse)``; then ``dv = p^T g``,
    ``ds = p * (g v^T - rowsum(g * out))``, ``dq = ds k scale`` and ``dk = ds^T q scale``.
    ``mask`` is bool (True = may attend) or additive, as in the forward.
    """
    if (g._dtype is q._dtype and out._dtype is q._dtype
            and q._device.implements(cops.scaled_dot_product_attention_backward)):
        args = (g, q, k, v, out, lse) if mask is None else (g, q, k, v, out, lse, mask)
        dq, dk, dv = apply(cops.scaled_dot_product_attention_backward, *args,
                           scale=float(scale), causal=bool(causal), mask=mask is not None)
        return dq, dk, dv
    s = (q * scale) @ k.mT
    if causal:
        from ._creation import arange

        i = arange(q.shape[-2], device=q.device).unsqueeze(1)
        s = s.masked_fill(arange(k.shape[-2], device=q.device).unsqueeze(0) > i, float("-inf"))
    if mask is not None:
        s = s.masked_fill(mask.logical_not(), float("-inf")) if mask.dtype.is_bool else s + mask
    p = cast((s - lse.unsqueeze(-1)).exp(), q._dtype)
    dv = p.mT @ g
    ds = p * (g @ v.mT - (g * out).sum(dim=-1, keepdim=True)) * scale
    return ds @ k, ds.mT @ q, dv


CellGrads = tuple["Tensor", "Tensor", "Tensor", "Tensor | None"]


def lstm_cell_backward(g: Tensor, hc: Tensor, w_hh: Tensor, hc_new: Tensor, gates: Tensor,
                       bias: bool) -> CellGrads:
    """Gradients ``(dgates_x, dhc, dw_hh, db_hh)`` of `ember.ops.composite.lstm_cell` given
    ``g``, the gradient of the new state ``hc_new`` (``h`` and ``c`` side by side), the old
    state ``hc`` and the activated ``gates`` (``i, f, g, o``) the forward returned.

    With ``dc = g_c + g_h * o * (1 - tanh(c')**2)``: ``di = dc * g * i (1 - i)``,
    ``df = dc * c * f (1 - f)``, ``dg = dc * i * (1 - g**2)``, ``do = g_h * tanh(c') * o (1 - o)``;
    then ``dh = dgates @ w_hh``, ``dc_prev = dc * f``, ``dw_hh = dgates^T h`` and
    ``db_hh = sum(dgates)`` (None without a bias).
    """
    if (g._dtype is hc._dtype and gates._dtype is hc._dtype
            and hc._device.implements(cops.lstm_cell_backward)):
        dgx, dhc, dw, db = apply(cops.lstm_cell_backward, g, hc, w_hh, hc_new, gates,
                                 bias=bias)
        return dgx, dhc, dw, db if bias else None
    from ._manipulation import cat

    h, c = hc.chunk(2, -1)
    gh, gc = g.chunk(2, -1)
    i, f, gg, o = gates.chunk(4, -1)
    tc = hc_new.chunk(2, -1)[1].tanh()
    dc = gc + gh * o * (1.0 - tc * tc)
    dgates = cat([dc * gg * i * (1.0 - i), dc * c * f * (1.0 - f), dc * i * (1.0 - gg * gg),
                  gh * tc * o * (1.0 - o)], -1)
    dhc = cat([dgates @ w_hh, dc * f], -1)
    return dgates, dhc, dgates.mT @ h, dgates.sum(dim=0) if bias else None


def gru_cell_backward(g: Tensor, h: Tensor, w_hh: Tensor, work: Tensor,
                      bias: bool) -> CellGrads:
    """Gradients ``(dgates_x, dh, dw_hh, db_hh)`` of `ember.ops.composite.gru_cell` given
    ``g``, the gradient of the new state, the old state ``h`` and ``work`` (``r, z, n`` and
    ``hn = W_hn h + b_hn``) the forward returned.

    ``dn = g (1 - z) (1 - n**2)``, ``dz = g (h - n) z (1 - z)``, ``dr = dn * hn * r (1 - r)``;
    the hidden side's gate gradients are ``dr, dz, dn * r``, which give
    ``dh = g z + dgates_h @ w_hh``, ``dw_hh = dgates_h^T h`` and ``db_hh = sum(dgates_h)``.
    """
    if (g._dtype is h._dtype and work._dtype is h._dtype
            and h._device.implements(cops.gru_cell_backward)):
        dgx, dh, dw, db = apply(cops.gru_cell_backward, g, h, w_hh, work, bias=bias)
        return dgx, dh, dw, db if bias else None
    from ._manipulation import cat

    r, z, n, hn = work.chunk(4, -1)
    dn = g * (1.0 - z) * (1.0 - n * n)
    dz = g * (h - n) * z * (1.0 - z)
    dr = dn * hn * r * (1.0 - r)
    dgh = cat([dr, dz, dn * r], -1)
    return (cat([dr, dz, dn], -1), g * z + dgh @ w_hh, dgh.mT @ h,
            dgh.sum(dim=0) if bias else None)


def _previous(states: Tensor, first: Tensor, reverse: bool) -> Tensor:
    """The state before each step, ``[T, N, S]``: ``first`` then ``states`` but the last (the
    other way round with ``reverse``)."""
    from ._manipulation import cat

    t = states.shape[0]
    if reverse:
        return cat([states[1:], first.unsqueeze(0)], 0) if t > 1 else first.unsqueeze(0)
    return cat([first.unsqueeze(0), states[:t - 1]], 0) if t > 1 else first.unsqueeze(0)


def _layer_backward(cell: object, g: Tensor, state: Tensor, w_hh: Tensor, states: Tensor,
                    saved: Tensor, bias: bool, reverse: bool) -> CellGrads:
    """`lstm_layer_backward` / `gru_layer_backward` from the cell's backward, step by step
    (for devices without the layer's kernel, and under ``create_graph``)."""
    from ._manipulation import stack

    prev = _previous(states, state, reverse)
    steps = range(g.shape[0]) if reverse else range(g.shape[0] - 1, -1, -1)
    carry: Tensor | None = None
    dgx: list[Tensor] = []
    dw: Tensor | None = None
    db: Tensor | None = None
    for t in steps:
        gt = g[t] if carry is None else g[t] + carry
        if cell is lstm_cell_backward:
            d, carry, dwt, dbt = lstm_cell_backward(gt, prev[t], w_hh, states[t], saved[t], bias)
        else:
            d, carry, dwt, dbt = gru_cell_backward(gt, prev[t], w_hh, saved[t], bias)
        dgx.append(d)
        dw = dwt if dw is None else dw + dwt
        if dbt is not None:
            db = dbt if db is None else db + dbt
    assert carry is not None and dw is not None
    if not reverse:
        dgx.reverse()
    return stack(dgx, 0), carry, dw, db


def lstm_layer_backward(g: Tensor, hc: Tensor, w_hh: Tensor, hcs: Tensor, gates: Tensor,
                        bias: bool, reverse: bool) -> CellGrads:
    """Gradients ``(dgates_x, dhc, dw_hh, db_hh)`` of `ember.ops.composite.lstm_layer` given
    ``g``, the gradient of every step's state ``hcs`` from outside the layer, the first state
    ``hc`` and the ``gates`` the forward returned: `lstm_cell_backward` from the last step
    back, each step's ``dhc`` carried into the step before."""
    if (g._dtype is hc._dtype and gates._dtype is hc._dtype and hcs._dtype is hc._dtype
            and hc._device.implements(cops.lstm_layer_backward)):
        dgx, dhc, dw, db = apply(cops.lstm_layer_backward, g, hc, w_hh, hcs, gates,
                                 bias=bias, reverse=reverse)
        return dgx, dhc, dw, db if bias else None
    return _layer_backward(lstm_cell_backward, g, hc, w_hh, hcs, gates, bias, reverse)


def gru_layer_backward(g: Tensor, h: Tensor, w_hh: Tensor, hs: Tensor, work: Tensor,
                       bias: bool, reverse: bool) -> CellGrads:
    """Gradients ``(dgates_x, dh, dw_hh, db_hh)`` of `ember.ops.composite.gru_layer`, as
    `lstm_layer_backward` through `gru_cell_backward`."""
    if (g._dtype is h._dtype and work._dtype is h._dtype and hs._dtype is h._dtype
            and h._device.implements(cops.gru_layer_backward)):
        dgx, dh, dw, db = apply(cops.gru_layer_backward, g, h, w_hh, hs, work, bias=bias,
                                reverse=reverse)
        return dgx, dh, dw, db if bias else None
    return _layer_backward(gru_cell_backward, g, h, w_hh, hs, work, bias, reverse)
