"""Shape rules of the neural-network ops and composites (see `ember.ops._shapes`): spatial ops
(convolutions, pools, interpolation) with PyTorch's bounds, norms, attention, recurrent cells
and layers, optimizer steps."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from . import composite as CO, nn as NN
from ._op import Op
from ._shapes import Rule, Shape, _arity, _checked, _error, _int, _ints, broadcast

__all__ = ["rules"]


def _spatial(op: str, name: str, params: dict[str, Any], nd: int, shapes: Sequence[Shape],
             low: int) -> tuple[int, ...]:
    return _ints(op, name, params[name], nd, shapes, low=low)


def _flag(op: str, name: str, params: dict[str, Any], shapes: Sequence[Shape]) -> bool:
    v = params.get(name, False)
    if type(v) is not bool:
        raise _error(op, f"{name} must be a bool, got {v!r}", shapes)
    return v


def _conv_geometry(op: str, shapes: Sequence[Shape], params: dict[str, Any], nd: int
                   ) -> tuple[Shape, Shape, tuple[int, ...], tuple[int, ...], tuple[int, ...],
                              int]:
    x, w = shapes[0], shapes[1]
    stride = _spatial(op, "stride", params, nd, shapes, 1)
    padding = _spatial(op, "padding", params, nd, shapes, 0)
    dilation = _spatial(op, "dilation", params, nd, shapes, 1)
    groups = _int(op, "groups", params["groups"], shapes, low=1)
    if len(x) != nd + 2 or len(w) != nd + 2:
        raise _error(op, f"expected input and weight of {nd + 2} dimensions", shapes)
    if min(w[2:], default=1) < 1:
        raise _error(op, f"kernel size {w[2:]} must be >= 1", shapes)
    return x, w, stride, padding, dilation, groups


def _conv(op: str, nd: int, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    x, w, stride, padding, dilation, groups = _conv_geometry(op, shapes, params, nd)
    if x[1] != w[1] * groups or w[0] % groups:
        raise _error(op, f"groups={groups}: input channels {x[1]} must be weight's "
                     f"{w[1]} x groups and out channels {w[0]} divisible by groups", shapes)
    out = []
    for i in range(nd):
        span = x[2 + i] + 2 * padding[i] - dilation[i] * (w[2 + i] - 1)
        if span < 1:
            raise _error(op, f"kernel size {w[2:]} with dilation={dilation} is larger than the "
                         f"input padded by padding={padding}", shapes)
        out.append((span - 1) // stride[i] + 1)
    return _checked(op, (x[0], w[0], *out), shapes)


def _conv_transpose(op: str, nd: int, shapes: Sequence[Shape], params: dict[str, Any]
                    ) -> Shape:
    x, w, stride, padding, dilation, groups = _conv_geometry(op, shapes, params, nd)
    extra = _spatial(op, "output_padding", params, nd, shapes, 0)
    if x[1] != w[0] or w[0] % groups:
        raise _error(op, f"groups={groups}: input channels {x[1]} must be the weight's "
                     f"{w[0]} and divisible by groups", shapes)
    out = []
    for i in range(nd):
        if extra[i] >= stride[i] and extra[i] >= dilation[i]:
            raise _error(op, f"output_padding={extra} must be smaller than either "
                         f"stride={stride} or dilation={dilation}", shapes)
        n = (x[2 + i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (w[2 + i] - 1) \
            + extra[i] + 1
        if n < 1:
            raise _error(op, f"padding={padding} leaves an output size of {n} (< 1)", shapes)
        out.append(n)
    return _checked(op, (x[0], w[1] * groups, *out), shapes)


def _window(op: str, shapes: Sequence[Shape], n: int, k: int, s: int, p: int, d: int,
            ceil_mode: bool) -> int:
    span = n + 2 * p - d * (k - 1) - 1
    if span < 0:
        raise _error(op, f"a window of {k} (dilation {d}) is larger than the input's size {n} "
                     f"padded by {p}: output size is too small", shapes)
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= n + p:  # the last window must start inside
        out -= 1
    return out


def _pool(op: str, shapes: Sequence[Shape], params: dict[str, Any], dilated: bool) -> Shape:
    x = shapes[0]
    if len(x) != 4:
        raise _error(op, "expected a 4-D input [N, C, H, W]", shapes)
    k = _spatial(op, "kernel_size", params, 2, shapes, 1)
    s = _spatial(op, "stride", params, 2, shapes, 1)
    p = _spatial(op, "padding", params, 2, shapes, 0)
    d = _spatial(op, "dilation", params, 2, shapes, 1) if dilated else (1, 1)
    ceil = _flag(op, "ceil_mode", params, shapes)
    if 2 * p[0] > k[0] or 2 * p[1] > k[1]:
        raise _error(op, f"padding={p} should be at most half of kernel_size={k}", shapes)
    if x[2] < 1 or x[3] < 1:
        raise _error(op, "expected an input with non-zero spatial sizes", shapes)
    hw = [_window(op, shapes, x[2 + i], k[i], s[i], p[i], d[i], ceil) for i in (0, 1)]
    return (x[0], x[1], *hw)


def _max_pool(shapes: Sequence[Shape], params: dict[str, Any]) -> list[Shape]:
    out = _pool("max_pool2d", shapes, params, True)
    return [out, out]


def _avg_pool(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    _flag("avg_pool2d", "count_include_pad", params, shapes)
    return _pool("avg_pool2d", shapes, params, False)


def _max_pool_values(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    _arity("max_pool2d_values", shapes, 1)
    return _pool("max_pool2d_values", shapes, params, True)


def _max_pool_backward(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    op = "max_pool2d_backward"
    _arity(op, shapes, 3)
    g, idx, x = shapes
    out = _pool(op, [x], params, True)
    if g != out or idx != out:
        raise _error(op, f"g and indices must have the pooled shape {out} of x", shapes)
    return x


def _adaptive(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    op = "adaptive_avg_pool2d"
    x = shapes[0]
    size = _spatial(op, "output_size", params, 2, shapes, 0)
    if len(x) != 4:
        raise _error(op, "expected a 4-D input [N, C, H, W]", shapes)
    if x[2] < 1 or x[3] < 1:
        raise _error(op, "expected an input with non-zero spatial sizes", shapes)
    return _checked(op, (x[0], x[1], *size), shapes)


_MODES = frozenset({"nearest", "linear", "bilinear", "bicubic", "trilinear", "nearest-exact",
                    "area"})


def _interpolate(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    op = "interpolate"
    x = shapes[0]
    if len(x) < 3:
        raise _error(op, "expected an input [N, C, *spatial]", shapes)
    size = _ints(op, "size", params["size"], len(x) - 2, shapes, low=1)
    if min(x[2:]) < 1:
        raise _error(op, "input sizes should be greater than 0", shapes)
    mode = params.get("mode", "nearest")
    if mode not in _MODES:
        raise _error(op, f"mode={mode!r} is unknown", shapes)
    return _checked(op, (x[0], x[1], *size), shapes)


def _weight_grad(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    op = "conv2d_weight_grad"
    _arity(op, shapes, 3)
    g, x, w = shapes
    out = _conv(op, 2, [x, w], params)
    if g != out:
        raise _error(op, f"g must have the convolution's output shape {out}", shapes)
    return w


def _fused_conv(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    op = "fused_conv2d"
    bias, norm, residual = (_flag(op, k, params, shapes) for k in ("bias", "norm", "residual"))
    _flag(op, "relu", params, shapes)
    _arity(op, shapes, 2 + bias + 4 * norm + residual)
    out = _conv(op, 2, shapes[:2], params)
    o = shapes[1][0]
    for s in shapes[2:2 + bias + 4 * norm]:
        if s != (o,):
            raise _error(op, f"bias and norm inputs must be ({o},)", shapes)
    if residual and shapes[-1] != out:
        raise _error(op, f"residual must have the output's shape {out}", shapes)
    return out


def _linear(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    x, w, b = shapes
    if len(w) != 2 or not x or x[-1] != w[1] or b != (w[0],):
        raise _error("linear", "expected x[..., in], weight[out, in], bias[out]", shapes)
    return (*x[:-1], w[0])


def _ce_check(op: str, logits: Shape, target: Shape, params: dict[str, Any],
              shapes: Sequence[Shape]) -> None:
    if len(logits) != 2 or target != logits[:1]:
        raise _error(op, "expected logits [M, C] and target [M]", shapes)
    if params["reduction"] not in ("mean", "sum", "none"):
        raise _error(op, f"reduction={params['reduction']!r} is unknown", shapes)


def _cross_entropy(shapes: Sequence[Shape], params: dict[str, Any]) -> list[Shape]:
    logits, target = shapes
    _ce_check("cross_entropy", logits, target, params, shapes)
    loss = logits[:1] if params["reduction"] == "none" else ()
    return [loss, logits[:1], ()]


def _cross_entropy_backward(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    op = "cross_entropy_backward"
    g, logits, target, lse, count = shapes
    _ce_check(op, logits, target, params, shapes)
    loss = logits[:1] if params["reduction"] == "none" else ()
    if g != loss or lse != logits[:1] or count != ():
        raise _error(op, f"g must be {loss}, lse {logits[:1]} and count ()", shapes)
    return logits


def _norm_axes(op: str, x: Shape, params: dict[str, Any], shapes: Sequence[Shape]
               ) -> tuple[Shape, Shape]:
    nd = _int(op, "ndim", params["ndim"], shapes, low=1)
    if nd > len(x):
        raise _error(op, f"ndim={nd} normalised axes of a {len(x)}-D input", shapes)
    return x[:len(x) - nd], x[len(x) - nd:]


def _layer_norm(shapes: Sequence[Shape], params: dict[str, Any]) -> list[Shape]:
    op = "layer_norm"
    weight, bias = _flag(op, "weight", params, shapes), _flag(op, "bias", params, shapes)
    _arity(op, shapes, 1 + weight + bias)
    lead, tail = _norm_axes(op, shapes[0], params, shapes)
    if any(s != tail for s in shapes[1:]):
        raise _error(op, f"weight and bias must have the normalised shape {tail}", shapes)
    return [shapes[0], lead, lead]


def _layer_norm_backward(shapes: Sequence[Shape], params: dict[str, Any]) -> list[Shape]:
    op = "layer_norm_backward"
    weight, affine = _flag(op, "weight", params, shapes), _flag(op, "affine", params, shapes)
    _arity(op, shapes, 4 + weight)
    g, x, mean, rstd = shapes[:4]
    lead, tail = _norm_axes(op, x, params, shapes)
    if g != x or mean != lead or rstd != lead or (weight and shapes[4] != tail):
        raise _error(op, f"g must be x's shape, mean and rstd {lead}, weight {tail}", shapes)
    stat = tail if affine else (0,)
    return [x, stat, stat]


def _rms_norm(shapes: Sequence[Shape], params: dict[str, Any]) -> list[Shape]:
    op = "rms_norm"
    weight = _flag(op, "weight", params, shapes)
    _arity(op, shapes, 1 + weight)
    lead, tail = _norm_axes(op, shapes[0], params, shapes)
    if weight and shapes[1] != tail:
        raise _error(op, f"weight must have the normalised shape {tail}", shapes)
    return [shapes[0], lead]


def _rms_norm_backward(shapes: Sequence[Shape], params: dict[str, Any]) -> list[Shape]:
    op = "rms_norm_backward"
    weight = _flag(op, "weight", params, shapes)
    _arity(op, shapes, 3 + weight)
    g, x, rstd = shapes[:3]
    lead, tail = _norm_axes(op, x, params, shapes)
    if g != x or rstd != lead or (weight and shapes[3] != tail):
        raise _error(op, f"g must be x's shape, rstd {lead}, weight {tail}", shapes)
    return [x, tail if weight else (0,)]


def _attention_inputs(op: str, q: Shape, k: Shape, v: Shape, shapes: Sequence[Shape],
                      params: dict[str, Any], mask: Shape | None) -> Shape:
    """The scores' shape ``[..., L, S]`` after checking q, k, v (and the mask)."""
    if (len(q) < 2 or len(k) != len(q) or len(v) != len(q) or q[:-2] != k[:-2] != v[:-2]
            or k[:-2] != v[:-2] or q[-1] != k[-1] or k[-2] != v[-2]):
        raise _error(op, "expected q[..., L, D], k[..., S, D], v[..., S, Dv]", shapes)
    scores = (*q[:-1], k[-2])
    if mask is not None and (len(mask) > len(scores)
                             or broadcast([scores, mask], {}) != scores):
        raise _error(op, f"the mask does not broadcast to the scores {scores}", shapes)
    _flag(op, "causal", params, shapes)
    return scores


def _attention(shapes: Sequence[Shape], params: dict[str, Any]) -> list[Shape]:
    op = "scaled_dot_product_attention"
    mask = _flag(op, "mask", params, shapes)
    _arity(op, shapes, 3 + mask)
    q, k, v = shapes[:3]
    _attention_inputs(op, q, k, v, shapes, params, shapes[3] if mask else None)
    return [(*q[:-1], v[-1]), q[:-1]]


def _attention_backward(shapes: Sequence[Shape], params: dict[str, Any]) -> list[Shape]:
    op = "scaled_dot_product_attention_backward"
    mask = _flag(op, "mask", params, shapes)
    _arity(op, shapes, 6 + mask)
    g, q, k, v, out, lse = shapes[:6]
    _attention_inputs(op, q, k, v, shapes, params, shapes[6] if mask else None)
    o = (*q[:-1], v[-1])
    if g != o or out != o or lse != q[:-1]:
        raise _error(op, f"g and out must be {o}, lse {q[:-1]}", shapes)
    return [q, k, v]


def _cell(op: str, gates: int, width: int, layer: bool, shapes: Sequence[Shape],
          params: dict[str, Any]) -> int:
    """Check a recurrent cell's or layer's inputs; the hidden size."""
    bias = _flag(op, "bias", params, shapes)
    if layer:
        _flag(op, "reverse", params, shapes)
    _arity(op, shapes, 3 + bias)
    gx, state, w = shapes[:3]
    step = gx[1:] if layer and len(gx) == 3 else (gx if not layer else ())
    ok = len(w) == 2 and len(step) == 2
    hs = w[1] if ok else 0
    if not ok or w[0] != gates * hs or step[1] != gates * hs or state != (step[0], width * hs) \
            or (bias and shapes[3] != (gates * hs,)):
        t = "[T, N, " if layer else "[N, "
        raise _error(op, f"expected gates_x{t}{gates}H], state[N, {width}H], w_hh[{gates}H, H]"
                     f" and b_hh[{gates}H]", shapes)
    return hs


def _cell_rule(op: str, gates: int, width: int, layer: bool, shapes: Sequence[Shape],
               params: dict[str, Any]) -> list[Shape]:
    _cell(op, gates, width, layer, shapes, params)
    gx, state = shapes[0], shapes[1]
    lead = gx[:1] if layer else ()
    # LSTM keeps its activated gates (4H); GRU its r, z, n and W_hn h + b_hn (4H)
    return [(*lead, *state), (*lead, state[0], gx[-1] if gates == 4 else 4 * gx[-1] // 3)]


def _cell_backward(op: str, gates: int, width: int, layer: bool, shapes: Sequence[Shape],
                   params: dict[str, Any]) -> list[Shape]:
    bias = _flag(op, "bias", params, shapes)
    if layer:
        _flag(op, "reverse", params, shapes)
    lstm = width == 2
    _arity(op, shapes, 5 if lstm or layer else 4)
    g, state, w = shapes[:3]
    if len(w) != 2 or len(state) != 2 or state[1] != width * w[1] or w[0] != gates * w[1]:
        raise _error(op, f"expected state[N, {width}H] and w_hh[{gates}H, H]", shapes)
    hs, n = w[1], state[0]
    lead = g[:1] if layer else ()
    if len(g) != len(lead) + 2 or g[len(lead):] != state:
        raise _error(op, f"g must be [{'T, ' if layer else ''}N, {width}H]", shapes)
    if lstm:
        new, work = shapes[3], shapes[4]
        if new != g or work != (*lead, n, 4 * hs):
            raise _error(op, "the new state must be g's shape and the gates [.., N, 4H]",
                         shapes)
    else:
        work = shapes[-1]
        if layer and shapes[3] != g:
            raise _error(op, "the states must have g's shape", shapes)
        if work != (*lead, n, 4 * hs):
            raise _error(op, "work must be [.., N, 4H]", shapes)
    return [(*lead, n, gates * hs), state, w, (gates * hs,) if bias else (0,)]


def _adam_step(op: str, tensors: int, shapes: Sequence[Shape], params: dict[str, Any]
               ) -> list[Shape]:
    _arity(op, shapes, tensors)
    if any(s != shapes[0] for s in shapes[1:4]):
        raise _error(op, "the parameter, its gradient and both moments must share a shape",
                     shapes)
    if tensors == 5 and shapes[4] != ():
        raise _error(op, "step must be 0-d", shapes)
    return [shapes[0]] * 3


def _adam_steps(op: str, step: bool, shapes: Sequence[Shape], params: dict[str, Any]
                ) -> list[Shape]:
    m = len(shapes) - step
    n, r = divmod(m, 4)
    if r or not n:
        raise _error(op, f"takes four lists of n tensors{' and a step' if step else ''}, got "
                     f"{len(shapes)} tensors", shapes)
    for i in range(n):
        if not shapes[i] == shapes[n + i] == shapes[2 * n + i] == shapes[3 * n + i]:
            raise _error(op, f"parameter {i}'s four tensors must share a shape", shapes)
    if step and shapes[-1] != ():
        raise _error(op, "step must be 0-d", shapes)
    return [*shapes[:n], *shapes[:n], *shapes[:n]]


def rules() -> dict[Op, Rule]:
    """The rules of this module, by op."""
    out: dict[Op, Rule] = {
        NN.conv1d: partial(_conv, "conv1d", 1), NN.conv2d: partial(_conv, "conv2d", 2),
        NN.conv_transpose1d: partial(_conv_transpose, "conv_transpose1d", 1),
        NN.conv_transpose2d: partial(_conv_transpose, "conv_transpose2d", 2),
        NN.max_pool2d: _max_pool, NN.avg_pool2d: _avg_pool, NN.adaptive_avg_pool2d: _adaptive,
        NN.interpolate: _interpolate,
        CO.max_pool2d_values: _max_pool_values, CO.max_pool2d_backward: _max_pool_backward,
        CO.conv2d_weight_grad: _weight_grad, CO.fused_conv2d: _fused_conv,
        CO.linear: _linear, CO.cross_entropy: _cross_entropy,
        CO.cross_entropy_backward: _cross_entropy_backward,
        CO.layer_norm: _layer_norm, CO.layer_norm_backward: _layer_norm_backward,
        CO.rms_norm: _rms_norm, CO.rms_norm_backward: _rms_norm_backward,
        CO.scaled_dot_product_attention: _attention,
        CO.scaled_dot_product_attention_backward: _attention_backward,
        CO.adam_step: partial(_adam_step, "adam_step", 4),
        CO.adam_step_capturable: partial(_adam_step, "adam_step_capturable", 5),
        CO.adam_steps: partial(_adam_steps, "adam_steps", False),
        CO.adam_steps_capturable: partial(_adam_steps, "adam_steps_capturable", True),
    }
    for op, gates, width, layer in ((CO.lstm_cell, 4, 2, False), (CO.gru_cell, 3, 1, False),
                                    (CO.lstm_layer, 4, 2, True), (CO.gru_layer, 3, 1, True)):
        out[op] = partial(_cell_rule, op.name, gates, width, layer)
    for op, gates, width, layer in ((CO.lstm_cell_backward, 4, 2, False),
                                    (CO.gru_cell_backward, 3, 1, False),
                                    (CO.lstm_layer_backward, 4, 2, True),
                                    (CO.gru_layer_backward, 3, 1, True)):
        out[op] = partial(_cell_backward, op.name, gates, width, layer)
    return out
