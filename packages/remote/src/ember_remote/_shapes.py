"""Result shapes from input shapes and params, without running anything.

The client uses them to pipeline: it makes a result tensor (with its shape) before the server
has run the op.  The server uses the same rules to check an op before running it (a hostile
message with inconsistent params is refused, and a result over the size limits is refused
before it is allocated) and after (a kernel whose result differs from the rule is an error,
never a silently wrong shape).  An op without a rule still runs: its result's shape is asked
of the server when someone reads it (a round trip).

A rule returns one shape for a one-output op, a list of shapes for a multi-output one, and
raises `ValueError` where the shapes and params cannot go together.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ember import ops

__all__ = ["RULES", "Shape", "numel"]

Shape = tuple[int, ...]
Rule = Callable[[Sequence[Shape], dict[str, Any]], "Shape | list[Shape]"]


def numel(shape: Shape) -> int:
    return math.prod(shape)


def _ints(value: Any, what: str, *, low: int | None = None) -> tuple[int, ...]:
    if not isinstance(value, tuple | list) or not all(type(v) is int for v in value):
        raise ValueError(f"{what} must be a tuple of ints, got {value!r}")
    if low is not None and any(v < low for v in value):
        raise ValueError(f"{what} must be >= {low}, got {value!r}")
    return tuple(value)


def _broadcast(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    first = shapes[0] if shapes else ()
    if (len(shapes) == 2 and shapes[1] == first) or len(shapes) == 1:  # the common case
        return tuple(first)
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, n in enumerate(s, ndim - len(s)):
            if n == out[i] or n == 1:
                continue
            if out[i] != 1:
                raise ValueError(f"shapes {list(shapes)} cannot be broadcast together")
            out[i] = n
    return tuple(out)


def _first(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    return shapes[0]


def _axis(params: dict[str, Any], key: str, ndim: int) -> int:
    d = params[key]
    if type(d) is not int or not -max(ndim, 1) <= d < max(ndim, 1):
        raise ValueError(f"{key}={d!r} is out of range for {ndim} dimension(s)")
    return d % max(ndim, 1)


def _reduce(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    s = shapes[0]
    dims = params.get("dims")
    axes = set(range(len(s))) if dims is None else {
        d % max(len(s), 1) for d in _ints(dims, "dims")}
    if params.get("keepdim", False):
        return tuple(1 if i in axes else n for i, n in enumerate(s))
    return tuple(n for i, n in enumerate(s) if i not in axes)


def _arg_reduce(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    s = shapes[0]
    if params["dim"] is None:
        return (1,) * len(s) if params["keepdim"] else ()
    d = _axis(params, "dim", len(s))
    if params["keepdim"]:
        return (*s[:d], 1, *s[d + 1:])
    return (*s[:d], *s[d + 1:])


def _matmul(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    a, b = shapes
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        raise ValueError(f"matmul of shapes {a} and {b}")
    return (*_broadcast([a[:-2], b[:-2]], {}), a[-2], b[-1])


def _reshape(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    shape = _ints(params["shape"], "shape", low=0)
    if numel(shape) != numel(shapes[0]):
        raise ValueError(f"cannot reshape {shapes[0]} to {shape}")
    return shape


def _permute(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    dims = _ints(params["dims"], "dims")
    if sorted(dims) != list(range(len(shapes[0]))):
        raise ValueError(f"permute dims {dims} for {len(shapes[0])} dimension(s)")
    return tuple(shapes[0][d] for d in dims)


def _expand(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    shape = _ints(params["shape"], "shape", low=0)
    s = shapes[0]
    if len(shape) != len(s) or any(n != m and n != 1 for n, m in zip(s, shape, strict=True)):
        raise ValueError(f"cannot expand {s} to {shape}")
    return shape


def _slice(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    s = shapes[0]
    starts, stops, steps = (_ints(params[k], k) for k in ("starts", "stops", "steps"))
    if not len(starts) == len(stops) == len(steps) == len(s) or 0 in steps:
        raise ValueError(f"slice params {starts, stops, steps} for shape {s}")
    out = []
    for n, a, b, c in zip(s, starts, stops, steps, strict=True):
        if not (0 <= a <= n and -1 <= b <= n):
            raise ValueError(f"slice bounds {a}:{b} for an axis of {n}")
        out.append(len(range(a, b, c)))
    return tuple(out)


def _pad(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    pad = params["pad"]
    s = shapes[0]
    if not isinstance(pad, tuple | list) or len(pad) != len(s):
        raise ValueError(f"pad {pad!r} for shape {s}")
    return tuple(n + sum(_ints(p, "pad", low=0)) for n, p in zip(s, pad, strict=True))


def _cat(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    if not shapes:
        raise ValueError("cat of no tensors")
    d = _axis(params, "dim", len(shapes[0]))
    first = shapes[0]
    for s in shapes[1:]:
        if len(s) != len(first) or any(a != b for i, (a, b) in enumerate(zip(s, first,
                                                                             strict=True))
                                       if i != d):
            raise ValueError(f"cat of shapes {list(shapes)} along {d}")
    return (*first[:d], sum(s[d] for s in shapes), *first[d + 1:])


def _index_select(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    s, index = shapes
    d = _axis(params, "dim", len(s))
    if len(index) != 1:
        raise ValueError(f"index_select needs a 1-D index, got shape {index}")
    return (*s[:d], index[0], *s[d + 1:])


def _topk(shapes: Sequence[Shape], params: dict[str, Any]) -> list[Shape]:
    s = shapes[0]
    d = _axis(params, "dim", len(s))
    k = params["k"]
    if type(k) is not int or not 0 <= k <= (s[d] if s else 1):
        raise ValueError(f"topk k={k!r} for shape {s}")
    out = (*s[:d], k, *s[d + 1:]) if s else ()
    return [out, out]


def _creation(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    return _ints(params["shape"], "shape", low=0)


def _arange(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    start, stop, step = params["start"], params["stop"], params["step"]
    if not all(isinstance(v, int | float) for v in (start, stop, step)) or step == 0:
        raise ValueError(f"arange({start!r}, {stop!r}, {step!r})")
    return (max(0, math.ceil((stop - start) / step)),)


def _window(n: int, k: int, s: int, p: int, d: int, ceil_mode: bool = False) -> int:
    span = n + 2 * p - d * (k - 1) - 1
    if span < 0:
        raise ValueError(f"a window of {k} (dilation {d}) is larger than the padded input {n}")
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def _conv(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    x, w = shapes
    nd = len(x) - 2
    stride, dilation = (_ints(params[k], k, low=1) for k in ("stride", "dilation"))
    padding = _ints(params["padding"], "padding", low=0)
    g = params["groups"]
    if (len(w) != nd + 2 or nd < 1 or type(g) is not int or g < 1 or x[1] != w[1] * g
            or w[0] % g or not len(stride) == len(padding) == len(dilation) == nd):
        raise ValueError(f"convolution of {x} with weight {w}, groups={g!r}")
    spatial = (_window(n, k, s, p, d) for n, k, s, p, d in
               zip(x[2:], w[2:], stride, padding, dilation, strict=True))
    return (x[0], w[0], *spatial)


def _conv_transpose(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    x, w = shapes
    nd = len(x) - 2
    stride, dilation = (_ints(params[k], k, low=1) for k in ("stride", "dilation"))
    padding, extra = (_ints(params[k], k, low=0) for k in ("padding", "output_padding"))
    g = params["groups"]
    if (len(w) != nd + 2 or nd < 1 or type(g) is not int or g < 1 or x[1] != w[0] or w[0] % g
            or not len(stride) == len(padding) == len(dilation) == len(extra) == nd):
        raise ValueError(f"transposed convolution of {x} with weight {w}, groups={g!r}")
    spatial = ((n - 1) * s - 2 * p + d * (k - 1) + e + 1 for n, k, s, p, d, e in
               zip(x[2:], w[2:], stride, padding, dilation, extra, strict=True))
    out = (x[0], w[1] * g, *spatial)
    if min(out) < 0:
        raise ValueError(f"transposed convolution of {x} with weight {w} has no output")
    return out


def _pool(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    x = shapes[0]
    k, s = _ints(params["kernel_size"], "kernel_size", low=1), _ints(params["stride"],
                                                                      "stride", low=1)
    p = _ints(params["padding"], "padding", low=0)
    d = _ints(params.get("dilation", (1,) * len(k)), "dilation", low=1)
    if len(x) != 4 or not len(k) == len(s) == len(p) == len(d) == 2:
        raise ValueError(f"2-d pooling of {x} with kernel {k}")
    if any(2 * pi > ki for pi, ki in zip(p, k, strict=True)):
        raise ValueError(f"padding {p} must be at most half the kernel {k}")
    ceil = bool(params["ceil_mode"])
    hw = (_window(n, ki, si, pi, di, ceil) for n, ki, si, pi, di in zip(x[2:], k, s, p, d,
                                                                         strict=True))
    return (*x[:2], *hw)


def _max_pool(shapes: Sequence[Shape], params: dict[str, Any]) -> list[Shape]:
    out = _pool(shapes, params)
    return [out, out]


def _adaptive(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    x = shapes[0]
    size = _ints(params["output_size"], "output_size", low=0)
    if len(x) != 4 or len(size) != 2:
        raise ValueError(f"adaptive_avg_pool2d of {x} to {size}")
    return (*x[:2], *size)


def _interpolate(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    x = shapes[0]
    size = _ints(params["size"], "size", low=0)
    if len(size) != len(x) - 2:
        raise ValueError(f"interpolate of {x} to {size}")
    return (*x[:2], *size)


def _embedding(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    w, idx = shapes
    if len(w) != 2:
        raise ValueError(f"embedding weight must be 2-D, got {w}")
    return (*idx, w[1])


def _linear(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    x, w, b = shapes
    if len(w) != 2 or not x or x[-1] != w[1] or b != (w[0],):
        raise ValueError(f"linear of {x} with weight {w} and bias {b}")
    return (*x[:-1], w[0])


def _cross_entropy(shapes: Sequence[Shape], params: dict[str, Any]) -> list[Shape]:
    logits, target = shapes
    if len(logits) != 2 or target != logits[:1]:
        raise ValueError(f"cross_entropy of logits {logits} and target {target}")
    loss = logits[:1] if params["reduction"] == "none" else ()
    return [loss, logits[:1], ()]


def _layer_norm(shapes: Sequence[Shape], params: dict[str, Any]) -> list[Shape]:
    x, nd = shapes[0], params["ndim"]
    if type(nd) is not int or not 1 <= nd <= len(x):
        raise ValueError(f"layer_norm over {nd!r} axes of {x}")
    return [x, x[:-nd], x[:-nd]]


def _same_times(n: int) -> Rule:
    def rule(shapes: Sequence[Shape], params: dict[str, Any]) -> list[Shape]:
        return [shapes[0]] * n
    return rule


def _adam_steps(shapes: Sequence[Shape], params: dict[str, Any]) -> list[Shape]:
    n, r = divmod(len(shapes), 4)
    if r or not n:
        raise ValueError(f"adam_steps takes four lists of n tensors, got {len(shapes)}")
    return [*shapes[:n], *shapes[:n], *shapes[:n]]


def _arg(i: int) -> Rule:
    def rule(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
        return shapes[i]
    return rule


EW, RD, MV, NN, CO = ops.elementwise, ops.reduction, ops.movement, ops.nn, ops.composite

RULES: dict[Any, Rule] = {}
for _name in dir(EW):
    _op = getattr(EW, _name)
    if isinstance(_op, ops.Op) and _op.group == "elementwise":
        RULES[_op] = _first if _op.arity == 1 else _broadcast
RULES[EW.clamp] = _first
for _op in (RD.sum, RD.prod, RD.mean, RD.max, RD.min, RD.var, RD.any, RD.all):
    RULES[_op] = _reduce
RULES.update({
    RD.argmax: _arg_reduce, RD.argmin: _arg_reduce, RD.cumsum: _first, RD.cumprod: _first,
    ops.creation.cast: _first, ops.creation.full: _creation, ops.creation.rand: _creation,
    ops.creation.randn: _creation, ops.creation.randint: _creation,
    ops.creation.arange: _arange, ops.linalg.matmul: _matmul,
    MV.reshape: _reshape, MV.permute: _permute, MV.expand: _expand, MV.slice: _slice,
    MV.pad: _pad, MV.flip: _first, MV.cat: _cat, MV.gather: _arg(1), MV.scatter_add: _first,
    MV.scatter: _first, MV.index_select: _index_select, MV.masked_fill: _first,
    MV.tril: _first, MV.triu: _first, MV.contiguous: _first,
    MV.sort: _same_times(2), MV.topk: _topk,
    NN.conv1d: _conv, NN.conv2d: _conv, NN.conv_transpose1d: _conv_transpose,
    NN.conv_transpose2d: _conv_transpose, NN.max_pool2d: _max_pool, NN.avg_pool2d: _pool,
    NN.adaptive_avg_pool2d: _adaptive, NN.embedding: _embedding, NN.interpolate: _interpolate,
    CO.softmax: _first, CO.log_softmax: _first, CO.softmax_backward: _first,
    CO.log_softmax_backward: _first, CO.linear: _linear, CO.clamp_backward: _first,
    CO.max_pool2d_backward: _arg(2), CO.conv2d_weight_grad: _arg(2), CO.gelu: _first,
    CO.gelu_backward: _first, CO.cross_entropy: _cross_entropy,
    CO.cross_entropy_backward: _arg(1), CO.adam_step: _same_times(3),
    CO.adam_steps: _adam_steps, CO.adam_step_capturable: _same_times(3),
    CO.layer_norm: _layer_norm,
})
