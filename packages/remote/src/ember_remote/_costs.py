"""What an op allocates beyond its results, estimated from shapes before it runs.

The server admits an op only if its results *and* its work buffers fit the limits: an im2col
matrix, the broadcast copies of a batched matmul, a softmax's temporaries, a sort's indices.
The figures are upper bounds in bytes, with every temporary counted at 8 bytes an element
(kernels may widen to float64 or int64), so they over-estimate rather than under-estimate.

`scratch` serves ops with a shape rule (their results' shapes are known); `unruled` bounds the
results and work buffers of the few ops without a rule from their inputs' shapes and params.
An op with neither is refused: the server cannot bound what it would allocate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ember import ops

from ._shapes import RULES, Shape

__all__ = ["scratch", "unruled"]

W = 8  # bytes counted per temporary element
#: (largest single buffer, total) in bytes
Cost = tuple[int, int]


def _n(shape: Sequence[int]) -> int:
    # shapes reaching here have at most 64 dims of < 2**64 each: a bounded product
    out = 1
    for d in shape:
        out *= d
    return out


def _largest_copy(ins: Sequence[Shape], outs: Sequence[Shape], k: int) -> Cost:
    """``k`` temporaries the size of the largest input or result."""
    big = max([_n(s) for s in (*ins, *outs)], default=0) * W
    return big, k * big


def _matmul(ins: Sequence[Shape], outs: Sequence[Shape], p: dict[str, Any]) -> Cost:
    (a, b), r = ins, outs[0]
    batch = _n(r[:-2])
    # casts of both operands and of the result (half precision accumulates in float32);
    # where *both* batches are broadcast (an outer product of batches) a kernel may copy each
    # out to the result's batch, which can dwarf the inputs and the result alike
    ca, cb, res = _n(a) * W, _n(b) * W, _n(r) * W
    if _n(a[:-2]) != batch and _n(b[:-2]) != batch:
        ca, cb = batch * a[-2] * a[-1] * W, batch * b[-2] * b[-1] * W
    return max(ca, cb, res), ca + cb + res


def _conv(ins: Sequence[Shape], outs: Sequence[Shape], p: dict[str, Any]) -> Cost:
    (x, w), r = ins[:2], outs[0]
    cols = x[0] * x[1] * _n(w[2:]) * _n(r[2:]) * W  # im2col: every receptive field
    pad = p.get("padding") or ()
    padded = x[0] * x[1] * _n([n + 2 * q for n, q in zip(x[2:], pad, strict=False)]) * W
    res = _n(r) * W
    return max(cols, padded, res), cols + padded + res


def _conv_transpose(ins: Sequence[Shape], outs: Sequence[Shape], p: dict[str, Any]) -> Cost:
    (x, w), r = ins, outs[0]
    cols = x[0] * r[1] * _n(w[2:]) * _n(x[2:]) * W  # columns scattered back (col2im)
    res = _n(r) * W
    return max(cols, res), cols + 2 * res


def _weight_grad(ins: Sequence[Shape], outs: Sequence[Shape], p: dict[str, Any]) -> Cost:
    g, x, w = ins
    cols = x[0] * x[1] * _n(w[2:]) * _n(g[2:]) * W
    return cols, cols + 2 * _n(x) * W


def _pool(ins: Sequence[Shape], outs: Sequence[Shape], p: dict[str, Any]) -> Cost:
    x, r = ins[0], outs[0]
    k = p.get("kernel_size") or ()
    windows = x[0] * x[1] * _n(k) * _n(r[2:]) * W if len(x) == 4 else 0
    big = max(windows, _n(x) * W, _n(r) * W)
    return big, windows + 2 * _n(x) * W + 2 * _n(r) * W


def _pool_backward(ins: Sequence[Shape], outs: Sequence[Shape], p: dict[str, Any]) -> Cost:
    g, x = ins[0], ins[-1]
    k = p.get("kernel_size") or ()
    windows = g[0] * g[1] * _n(k) * _n(g[2:]) * W if len(g) == 4 else 0
    big = max(windows, _n(x) * W)
    return big, windows + 3 * _n(x) * W


def _times(k: int) -> Callable[[Sequence[Shape], Sequence[Shape], dict[str, Any]], Cost]:
    def cost(ins: Sequence[Shape], outs: Sequence[Shape], p: dict[str, Any]) -> Cost:
        return _largest_copy(ins, outs, k)
    return cost


def scratch(op: Any, ins: Sequence[Shape], outs: Sequence[Shape], params: dict[str, Any]) -> Cost:
    """Work buffers of ``op`` (which has a shape rule) beyond its results ``outs``: by default
    one copy of its largest input or result (a cast, a broadcast, a contiguous copy)."""
    cost = _SCRATCH.get(op)
    if cost is None:
        return _largest_copy(ins, outs, 1)
    try:
        return cost(ins, outs, params)
    except (IndexError, TypeError, ValueError):  # shapes the kernel will refuse anyway
        return _largest_copy(ins, outs, 4)


# -- ops without a shape rule: results and work buffers together -----------------------------

def _inputs(k: int) -> Callable[[Sequence[Shape], dict[str, Any]], Cost]:
    """Results and temporaries no larger than the inputs (norm backwards, fused optimizers)."""
    def cost(ins: Sequence[Shape], p: dict[str, Any]) -> Cost:
        big = max([_n(s) for s in ins], default=0) * W
        return big, k * sum(_n(s) for s in ins) * W
    return cost


def _nonzero(ins: Sequence[Shape], p: dict[str, Any]) -> Cost:
    x = ins[0]
    idx = _n(x) * max(len(x), 1) * W  # at most every element, one int64 per axis
    return idx, 2 * idx + _n(x) * W


def _attention(ins: Sequence[Shape], p: dict[str, Any], first: int = 0) -> Cost:
    q, k, v = ins[first:first + 3]
    batch = max(_n(q[:-2]), _n(k[:-2]), _n(v[:-2]))
    scores = batch * q[-2] * k[-2] * W  # the [..., L, S] weights
    res = sum(_n(s) for s in ins) * W
    return max(scores, res), 3 * scores + 3 * res


def _recurrent(ins: Sequence[Shape], p: dict[str, Any]) -> Cost:
    x, w = ins[0], ins[2]
    steps = _n(x[:-1])  # T * N (or N for a cell)
    hidden = w[-1] if w else 0
    per = steps * 8 * hidden * W  # states and gates of every step
    res = per + 2 * _n(w) * W + sum(_n(s) for s in ins) * W
    return res, 3 * res


def _fused_conv(ins: Sequence[Shape], p: dict[str, Any]) -> Cost:
    out = RULES[NN.conv2d](list(ins[:2]), p)
    assert not isinstance(out, list)
    big, total = _conv(ins[:2], [out], p)
    res = _n(out) * W
    return max(big, res), total + 2 * res


def _pool_values(ins: Sequence[Shape], p: dict[str, Any]) -> Cost:
    out = RULES[NN.max_pool2d](list(ins), p)
    r = out[0] if isinstance(out, list) else out
    big, total = _pool(ins, [r], p)
    return big, total + _n(r) * W


EW, RD, MV, NN, CO = ops.elementwise, ops.reduction, ops.movement, ops.nn, ops.composite
_SCRATCH: dict[Any, Callable[[Sequence[Shape], Sequence[Shape], dict[str, Any]], Cost]] = {
    ops.linalg.matmul: _matmul, NN.conv1d: _conv, NN.conv2d: _conv,
    NN.conv_transpose1d: _conv_transpose, NN.conv_transpose2d: _conv_transpose,
    CO.conv2d_weight_grad: _weight_grad, NN.max_pool2d: _pool, NN.avg_pool2d: _pool,
    CO.max_pool2d_backward: _pool_backward, NN.interpolate: _times(4), MV.sort: _times(3),
    MV.topk: _times(3), CO.softmax: _times(3), CO.log_softmax: _times(3),
    CO.softmax_backward: _times(3), CO.log_softmax_backward: _times(3), CO.gelu: _times(3),
    CO.gelu_backward: _times(4), CO.layer_norm: _times(4), CO.cross_entropy: _times(4),
    CO.cross_entropy_backward: _times(4), CO.linear: _times(2), CO.adam_step: _times(4),
    CO.adam_steps: _times(4), CO.adam_step_capturable: _times(4),
    CO.scaled_dot_product_attention: lambda i, o, p: _attention(i, p),
    CO.scaled_dot_product_attention_backward: lambda i, o, p: _attention(i, p, 1),
    CO.fused_conv2d: lambda i, o, p: _conv(i[:2], o, p), NN.embedding: _times(1),
    CO.max_pool2d_values: _pool, CO.layer_norm_backward: _times(6), CO.rms_norm: _times(4),
    CO.rms_norm_backward: _times(6), CO.adam_steps_capturable: _times(4),
    **{op: lambda i, o, p: _recurrent(i, p) for op in (
        CO.lstm_cell, CO.lstm_cell_backward, CO.gru_cell, CO.gru_cell_backward,
        CO.lstm_layer, CO.lstm_layer_backward, CO.gru_layer, CO.gru_layer_backward)},
}


_UNRULED: dict[Any, Callable[[Sequence[Shape], dict[str, Any]], Cost]] = {
    MV.nonzero: _nonzero, CO.scaled_dot_product_attention: _attention,
    CO.scaled_dot_product_attention_backward: lambda s, p: _attention(s, p, 1),
    CO.layer_norm_backward: _inputs(6), CO.rms_norm: _inputs(4),
    CO.rms_norm_backward: _inputs(6), CO.adam_steps_capturable: _inputs(6),
    CO.lstm_cell: _recurrent, CO.lstm_cell_backward: _recurrent, CO.gru_cell: _recurrent,
    CO.gru_cell_backward: _recurrent, CO.lstm_layer: _recurrent,
    CO.lstm_layer_backward: _recurrent, CO.gru_layer: _recurrent,
    CO.gru_layer_backward: _recurrent, CO.fused_conv2d: _fused_conv,
    CO.max_pool2d_values: _pool_values,
}


def unruled(op: Any, ins: Sequence[Shape], params: dict[str, Any]) -> Cost | None:
    """An upper bound on what ``op`` (which has no shape rule) allocates, results included;
    ``None`` where the server knows no bound (the op is refused)."""
    cost = _UNRULED.get(op)
    if cost is None:
        return None
    try:
        return cost(ins, params)
    except (IndexError, TypeError, ValueError, KeyError):  # malformed: bounded by the inputs,
        return _inputs(8)(ins, params)  # the kernel says what is wrong
