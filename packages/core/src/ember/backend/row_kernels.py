"""The composite ops' row kernels, each written once as a row program (`ember.backend.rows`).

The row is the last axis (the backends move the softmax axis last and flatten the normalised
axes of the norms).  Outputs are stored in the input's dtype; row statistics (``mean``,
``rstd``, ``lse``) in float32 for half inputs, as `ember.ops.composite` says.  The parts that
are not row reductions stay with the callers: the column sums of the norms' weight gradients,
the loss reduction and target count of cross entropy, its per-row gradient scale.

=========================  =====================================  =============================
kernel                     inputs (layout)                        outputs
=========================  =====================================  =============================
softmax, log_softmax       x (elem)                               y
softmax_backward, log_...  y, g (elem)                            dx
layer_norm                 x (elem), [weight], [bias] (col)       y, mean, rstd
layer_norm_backward        g, x (elem), mean, rstd (row), [w]     dx
rms_norm                   x (elem), [weight] (col)               y, rstd
rms_norm_backward          g, x (elem), rstd (row), [w] (col)     dx
cross_entropy              logits (elem), target (row)            loss, lse (row)
cross_entropy_backward     logits (elem), target, lse, scale      dlogits
=========================  =====================================  =============================

They are defined with ``define(..., op=False)``: the composite ops take more than the programs
(a ``dim``, ``ndim``, a loss reduction), so each backend calls a program from its own kernel
for the op.  Params: ``eps`` (norms), ``weight`` / ``bias`` (bools: which optional inputs are
there), ``ignore_index`` and ``label_smoothing`` (cross entropy).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from . import ir
from .ir import Value
from .rows import RowBuilder, amax, define, sum_

__all__: list[str] = []


def _stat(dtype: str) -> str:
    return "float32" if dtype in ("float16", "bfloat16") else dtype


def _float(name: str, dtype: str) -> str:
    if not ir.is_float(dtype):
        raise TypeError(f"{name}: needs floating-point inputs, got {dtype}")
    return ir.compute_dtype(dtype)


@define("softmax", op=False)
def _softmax(b: RowBuilder, dt: Sequence[str], params: Mapping[str, Any]) -> list[Any]:
    _float("softmax", dt[0])
    x = b.elem(0, dt[0])
    e = (x - amax(x)).call("exp")
    return [(e * (1.0 / sum_(e)), dt[0])]


@define("log_softmax", op=False)
def _log_softmax(b: RowBuilder, dt: Sequence[str], params: Mapping[str, Any]) -> list[Any]:
    _float("log_softmax", dt[0])
    x = b.elem(0, dt[0])
    m = amax(x)
    s = sum_((x - m).call("exp"))
    return [(x - (m + s.call("log")), dt[0])]


@define("softmax_backward", op=False)
def _softmax_backward(b: RowBuilder, dt: Sequence[str],
                      params: Mapping[str, Any]) -> list[Any]:
    _float("softmax_backward", dt[0])
    y, g = b.elem(0, dt[0]), b.elem(1, dt[1])
    return [(y * (g - sum_(g * y)), dt[0])]


@define("log_softmax_backward", op=False)
def _log_softmax_backward(b: RowBuilder, dt: Sequence[str],
                          params: Mapping[str, Any]) -> list[Any]:
    _float("log_softmax_backward", dt[0])
    y, g = b.elem(0, dt[0]), b.elem(1, dt[1])
    return [(g - y.call("exp") * sum_(g), dt[0])]


def _rstd(var: Value, eps: float) -> Value:
    return 1.0 / (var + float(eps)).call("sqrt")


@define("layer_norm", op=False)
def _layer_norm(b: RowBuilder, dt: Sequence[str], params: Mapping[str, Any]) -> list[Any]:
    cd = _float("layer_norm", dt[0])
    x = b.elem(0, dt[0])
    n = b.length(cd)
    mean = sum_(x) / n
    c = x - mean
    rstd = _rstd(sum_(c * c) / n, params["eps"])
    y = c * rstd
    k = 1
    if params.get("weight"):
        y = y * b.col(k, dt[k])
        k += 1
    if params.get("bias"):
        y = y + b.col(k, dt[k])
    sd = _stat(dt[0])
    return [(y, dt[0]), (mean, sd), (rstd, sd)]


@define("layer_norm_backward", op=False)
def _layer_norm_backward(b: RowBuilder, dt: Sequence[str],
                         params: Mapping[str, Any]) -> list[Any]:
    cd = _float("layer_norm_backward", dt[0])
    g, x = b.elem(0, dt[0]), b.elem(1, dt[1])
    mean, rstd = b.row(2, dt[2]).to(cd), b.row(3, dt[3]).to(cd)
    n = b.length(cd)
    xhat = (x - mean) * rstd
    h = g * b.col(4, dt[4]) if params.get("weight") else g
    a = sum_(h) / n
    c = sum_(h * xhat) / n
    return [((h - a - xhat * c) * rstd, dt[0])]


@define("rms_norm", op=False)
def _rms_norm(b: RowBuilder, dt: Sequence[str], params: Mapping[str, Any]) -> list[Any]:
    cd = _float("rms_norm", dt[0])
    x = b.elem(0, dt[0])
    rstd = _rstd(sum_(x * x) / b.length(cd), params["eps"])
    y = x * rstd
    if params.get("weight"):
        y = y * b.col(1, dt[1])
    return [(y, dt[0]), (rstd, _stat(dt[0]))]


@define("rms_norm_backward", op=False)
def _rms_norm_backward(b: RowBuilder, dt: Sequence[str],
                       params: Mapping[str, Any]) -> list[Any]:
    cd = _float("rms_norm_backward", dt[0])
    g, x = b.elem(0, dt[0]), b.elem(1, dt[1])
    rstd = b.row(2, dt[2]).to(cd)
    xs = x * rstd
    h = g * b.col(3, dt[3]) if params.get("weight") else g
    c = sum_(h * xs) / b.length(cd)
    return [((h - xs * c) * rstd, dt[0])]


def _targets(b: RowBuilder, dt: str) -> Value:
    if not ir.is_int(dt):
        raise TypeError(f"cross_entropy: target must be integer class indices, got {dt}")
    return b.row(1, dt).to("int64")


@define("cross_entropy", op=False)
def _cross_entropy(b: RowBuilder, dt: Sequence[str], params: Mapping[str, Any]) -> list[Any]:
    """Each row's loss ``(1 - s) (lse - z[t]) + s (lse - mean(z))``, exactly 0 on a row whose
    target is ``ignore_index`` (whatever its logits), and its logsumexp."""
    cd = _float("cross_entropy", dt[0])
    z = b.elem(0, dt[0])
    t = _targets(b, dt[1])
    m = amax(z)
    lse = m + sum_((z - m).call("exp")).call("log")
    picked = sum_(ir.where(b.column().eq(t), z, 0.0))
    loss = lse - picked
    s = float(params.get("label_smoothing", 0.0))
    if s:
        loss = loss * (1.0 - s) + (lse - sum_(z) / b.length(cd)) * s
    loss = ir.where(t.ne(int(params["ignore_index"])), loss, 0.0)
    sd = _stat(dt[0])
    return [(loss, sd), (lse, sd)]


@define("cross_entropy_backward", op=False)
def _cross_entropy_backward(b: RowBuilder, dt: Sequence[str],
                            params: Mapping[str, Any]) -> list[Any]:
    """``(softmax(z) - (1 - s) onehot(t) - s / C) * scale``, 0 on ignored rows; ``scale`` is
    each row's factor (``g / count``, ``g`` or ``g[row]``: the caller's)."""
    cd = _float("cross_entropy_backward", dt[0])
    z = b.elem(0, dt[0])
    t = _targets(b, dt[1])
    lse, scale = b.row(2, dt[2]).to(cd), b.row(3, dt[3]).to(cd)
    s = float(params.get("label_smoothing", 0.0))
    d = (z - lse).call("exp")
    if s:
        d = d - s / b.length(cd)
    d = d - ir.where(b.column().eq(t), 1.0 - s, 0.0, cd)
    d = ir.where(t.ne(int(params["ignore_index"])), d * scale, 0.0)
    return [(d, dt[0])]
