"""Backward (VJP) rules: one table, keyed by op.

A rule is called ``rule(g, out, *inputs, **params)`` with the gradient ``g`` of the op's
(first) output, the output ``out`` (a tuple for ops with several outputs) and the op's inputs,
all tensors of the inner device, and returns one gradient per input (None where none flows).
An entry may instead be a tuple of such functions, one per input, each returning that input's
gradient: the backward pass then skips the work for inputs that need none (``x @ w`` with a
constant ``x`` never computes ``g @ w.T``).
Rules use ember ops only, so they run on any inner device, and on an inner autodiff device
they are recorded themselves: that is how ``autodiff<autodiff<cpu>>`` gives second derivatives.
Gradients of broadcast inputs are summed back to the input's shape by the backward pass.

`READS` says which values a rule reads; the tape saves only those (see its section below).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import ember
import ember.functional as F
from ember.backend import Tensor, apply
from ember.ops import Op, composite, creation, elementwise, linalg, movement, nn, reduction

__all__ = ["READS", "RULES", "Reads", "sum_to"]

Grads = tuple[Tensor | None, ...]
Rule = Callable[..., Grads]
InputRule = Callable[..., Tensor]

RULES: dict[Op, Rule | tuple[InputRule, ...]] = {}


def rule(op: Op) -> Callable[[Rule], Rule]:
    def put(fn: Rule) -> Rule:
        RULES[op] = fn
        return fn
    return put


# -- helpers ----------------------------------------------------------------------------------


# The helpers below call primitives through `apply` directly: their arguments are valid by
# construction, so core's argument checks (a few microseconds an op) are skipped on the hot path.


def sum_to(g: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Sum a broadcast gradient back to ``shape``."""
    gshape = g.payload.shape
    lead = len(gshape) - len(shape)
    dims = (*range(lead), *(lead + i for i, n in enumerate(shape) if n == 1 and
                            gshape[lead + i] != 1))
    if dims:
        g = apply(reduction.sum, g, dims=dims, keepdim=True)
    if tuple(g.payload.shape) != tuple(shape):
        g = apply(movement.reshape, g, shape=tuple(shape))
    return g


def _keep(g: Tensor, dims: Sequence[int], keepdim: bool) -> Tensor:
    """``g`` of a reduction with its reduced axes back (size 1)."""
    if keepdim:
        return g
    shape = list(g.payload.shape)
    for d in dims:
        shape.insert(d, 1)
    return apply(movement.reshape, g, shape=tuple(shape))  # type: ignore[no-any-return]


def _broadcast(g: Tensor, shape: Sequence[int]) -> Tensor:
    """``g`` (same number of axes) broadcast to ``shape``."""
    if tuple(g.payload.shape) == tuple(shape):
        return g
    return apply(movement.expand, g, shape=tuple(shape))  # type: ignore[no-any-return]


def _mT(t: Tensor) -> Tensor:  # PyTorch's name
    n = t.ndim
    return apply(movement.permute, t,  # type: ignore[no-any-return]
                 dims=(*range(n - 2), n - 1, n - 2))


def _mm(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b`` for operands of one batch shape (what the matmul primitive receives)."""
    return apply(linalg.matmul, a, b)  # type: ignore[no-any-return]


def _zeros(x: Tensor) -> Tensor:
    return ember.zeros(x.shape, dtype=x.dtype, device=x.device)


def _mask(cond: Tensor, g: Tensor) -> Tensor:
    """``g`` where ``cond``, else 0."""
    # Note: a product with the 0/1 mask, not ``where``: numpy's ``where`` is ~10x slower than a
    # multiply here, and relu's backward is on every MLP's path.  An inf or nan gradient thus
    # leaks into masked-out positions as nan, where PyTorch would give 0.
    return apply(elementwise.mul, g, apply(creation.cast, cond,  # type: ignore[no-any-return]
                                           dtype=g.dtype))


# -- elementwise: unary -----------------------------------------------------------------------

RULES[elementwise.exp] = lambda g, out, x: (g * out,)
RULES[elementwise.expm1] = lambda g, out, x: (g * (out + 1.0),)
RULES[elementwise.log] = lambda g, out, x: (g / x,)
RULES[elementwise.log1p] = lambda g, out, x: (g / (x + 1.0),)
RULES[elementwise.sqrt] = lambda g, out, x: (g * 0.5 / out,)
RULES[elementwise.rsqrt] = lambda g, out, x: (g * -0.5 * out * out * out,)
RULES[elementwise.sin] = lambda g, out, x: (g * x.cos(),)
RULES[elementwise.cos] = lambda g, out, x: (-(g * x.sin()),)
RULES[elementwise.tan] = lambda g, out, x: (g * (out * out + 1.0),)
RULES[elementwise.tanh] = lambda g, out, x: (g * (1.0 - out * out),)
RULES[elementwise.asin] = lambda g, out, x: (g * (1.0 - x * x).rsqrt(),)
RULES[elementwise.acos] = lambda g, out, x: (-(g * (1.0 - x * x).rsqrt()),)
RULES[elementwise.atan] = lambda g, out, x: (g / (x * x + 1.0),)
RULES[elementwise.sinh] = lambda g, out, x: (g * x.cosh(),)
RULES[elementwise.cosh] = lambda g, out, x: (g * x.sinh(),)
RULES[elementwise.erf] = lambda g, out, x: (g * (2.0 / math.sqrt(math.pi)) * (-(x * x)).exp(),)
RULES[elementwise.sigmoid] = lambda g, out, x: (g * out * (1.0 - out),)
RULES[elementwise.reciprocal] = lambda g, out, x: (-(g * out * out),)
RULES[elementwise.neg] = lambda g, out, x: (-g,)
RULES[elementwise.abs] = lambda g, out, x: (g * x.sign(),)


def _asinh(g: Tensor, out: Tensor, x: Tensor) -> Grads:
    # 1 / sqrt(x^2 + 1) scaled by m = max(|x|, 1), so that x^2 never overflows
    u = x.abs().clamp(min=1.0).reciprocal()
    xu = x * u
    return (g * u * (xu * xu + u * u).rsqrt(),)


def _acosh(g: Tensor, out: Tensor, x: Tensor) -> Grads:
    # 1 / sqrt((x - 1)(x + 1)), scaled likewise (and exact near 1, where x - 1 is)
    u = x.abs().clamp(min=1.0).reciprocal()
    return (g * u * (((x - 1.0) * u) * ((x + 1.0) * u)).rsqrt(),)


RULES[elementwise.asinh] = _asinh
RULES[elementwise.acosh] = _acosh
RULES[elementwise.atanh] = lambda g, out, x: (g / (1.0 - x * x),)
# piecewise constant: a gradient of 0 everywhere (PyTorch's), so that a loss through them
# still has a backward pass
for _op in (elementwise.sign, elementwise.floor, elementwise.ceil, elementwise.round,
            elementwise.trunc):
    RULES[_op] = lambda g, out, x: (_zeros(x),)


@rule(elementwise.clamp)
def _clamp(g: Tensor, out: Tensor, x: Tensor, min: Any = None, max: Any = None) -> Grads:
    # the gradient passes where min <= x <= max (PyTorch's rule)
    if (g.dtype is x.dtype and g.payload.shape == x.payload.shape
            and g.device.implements(composite.clamp_backward)):
        return (apply(composite.clamp_backward, g, x, min=min, max=max),)
    inside = None
    if min is not None:
        inside = x >= min
    if max is not None:
        below = x <= max
        inside = below if inside is None else ember.logical_and(inside, below)
    assert inside is not None
    return (_mask(inside, g),)


# -- elementwise: binary ----------------------------------------------------------------------

RULES[elementwise.add] = lambda g, out, x, y: (g, g)
RULES[elementwise.sub] = lambda g, out, x, y: (g, -g)
RULES[elementwise.mul] = (lambda g, out, x, y: g * y, lambda g, out, x, y: g * x)
RULES[elementwise.div] = (lambda g, out, x, y: g / y, lambda g, out, x, y: -(g * out / y))
RULES[elementwise.remainder] = lambda g, out, x, y: (g, -(g * ember.floordiv(x, y)))
RULES[elementwise.floordiv] = lambda g, out, x, y: (_zeros(x), _zeros(y))
# d/da is sign(a) * sign(out) (0 where a is 0, as PyTorch); b only chooses a sign
RULES[elementwise.copysign] = lambda g, out, a, b: (g * a.sign() * out.sign(), _zeros(b))
RULES[elementwise.atan2] = lambda g, out, y, x: (g * x / (x * x + y * y),
                                                 -(g * y / (x * x + y * y)))


def _pow_x(g: Tensor, out: Tensor, x: Tensor, y: Tensor) -> Tensor:
    # Note: PyTorch's rule: 0 where y == 0, whatever x (at x == 0, x ** -1 is inf: there the
    # exponent is replaced by 1 before, and the result by 0 after, so no 0 * inf is computed)
    zero = y == 0
    ys = ember.where(zero, 1.0, y)
    return ember.where(zero, 0.0, g * ys * x ** (ys - 1.0))


def _pow_y(g: Tensor, out: Tensor, x: Tensor, y: Tensor) -> Tensor:
    # PyTorch's rule: 0 where x == 0 and y >= 0 (log(0) is -inf there: log(1) is taken)
    zero = ember.logical_and(x == 0, y >= 0)
    return ember.where(zero, 0.0, g * out * ember.where(zero, 1.0, x).log())


# One function per input: ``x ** 2`` with a constant exponent computes no ``log(x)``.
RULES[elementwise.pow] = (_pow_x, _pow_y)


def _minmax(g: Tensor, x: Tensor, y: Tensor, first: Tensor) -> Grads:
    # ties split the gradient evenly, as PyTorch
    tie = x == y
    half = g * 0.5
    gx = ember.where(tie, half, _mask(first, g))
    gy = ember.where(tie, half, _mask(ember.logical_not(first), g))
    return gx, gy


RULES[elementwise.maximum] = lambda g, out, x, y: _minmax(g, x, y, x > y)
RULES[elementwise.minimum] = lambda g, out, x, y: _minmax(g, x, y, x < y)
RULES[elementwise.where] = lambda g, out, c, x, y: (None, _mask(c, g),
                                                    _mask(ember.logical_not(c), g))
RULES[creation.cast] = lambda g, out, x, dtype: (g.to(dtype=x.dtype),)


# -- reductions -------------------------------------------------------------------------------


@rule(reduction.sum)
def _sum(g: Tensor, out: Tensor, x: Tensor, dims: Sequence[int], keepdim: bool) -> Grads:
    return (_broadcast(_keep(g, dims, keepdim), x.shape),)


@rule(reduction.mean)
def _mean(g: Tensor, out: Tensor, x: Tensor, dims: Sequence[int], keepdim: bool) -> Grads:
    n = math.prod(x.shape[d] for d in dims)
    # an empty reduction's gradient has no element (PyTorch: nan of the empty shape)
    return (_broadcast(_keep(g, dims, keepdim) * (1.0 / n if n else math.nan), x.shape),)


def _extreme(g: Tensor, out: Tensor, x: Tensor, dims: Sequence[int], keepdim: bool) -> Grads:
    # every element equal to the extreme gets an equal share (PyTorch's amax/amin rule)
    hit = (x == _keep(out, dims, keepdim)).to(dtype=x.dtype)
    share = _keep(g, dims, keepdim) / hit.sum(dim=dims, keepdim=True)
    return (hit * share,)


RULES[reduction.max] = _extreme
RULES[reduction.min] = _extreme


@rule(reduction.var)
def _var(g: Tensor, out: Tensor, x: Tensor, dims: Sequence[int], keepdim: bool,
         correction: int) -> Grads:
    n = math.prod(x.shape[d] for d in dims)
    centred = x - x.mean(dim=dims, keepdim=True)
    # no degrees of freedom left: nan gradients, as PyTorch
    scale = 2.0 / (n - correction) if n > correction else math.nan
    return (_keep(g, dims, keepdim) * centred * scale,)


def _to_last(x: Tensor, dims: Sequence[int]) -> tuple[Tensor, list[int], tuple[int, ...]]:
    """``x`` with ``dims`` moved to the end and merged: ``[..., n]``, and how to undo it."""
    rest = [d for d in range(x.ndim) if d not in dims]
    order = [*rest, *dims]
    moved = x.permute(order) if order != list(range(x.ndim)) else x
    shape = tuple(moved.shape)
    return moved.reshape(*shape[:len(rest)], -1), order, shape


def _from_last(y: Tensor, order: list[int], shape: tuple[int, ...]) -> Tensor:
    y = y.reshape(shape)
    inverse = sorted(range(len(order)), key=order.__getitem__)
    return y.permute(inverse) if order != list(range(len(order))) else y


def _exclusive_products(x: Tensor) -> Tensor:
    """``p[..., i] = prod_{j != i} x[..., j]`` without dividing (exact with zeros)."""
    n = x.shape[-1]
    before = ember.pad(x, (1, 0), value=1.0)[..., :n].cumprod(-1)
    after = ember.pad(x, (0, 1), value=1.0)[..., 1:].flip(-1).cumprod(-1).flip(-1)
    return before * after


@rule(reduction.prod)
def _prod(g: Tensor, out: Tensor, x: Tensor, dims: Sequence[int], keepdim: bool) -> Grads:
    flat, order, shape = _to_last(x, dims)
    others = _from_last(_exclusive_products(flat), order, shape)
    return (_keep(g, dims, keepdim) * others,)


@rule(reduction.cumsum)
def _cumsum(g: Tensor, out: Tensor, x: Tensor, dim: int) -> Grads:
    if g.ndim == 0:  # the running sum of a 0-d tensor is itself
        return (g,)
    return (g.flip(dim).cumsum(dim).flip(dim),)


@rule(reduction.cumprod)
def _cumprod(g: Tensor, out: Tensor, x: Tensor, dim: int) -> Grads:
    # d out_j / d x_k = prod_{i <= j, i != k} x_i for j >= k: build that [n(k), n(j)] table per
    # row by replacing x_k with 1, so zeros need no special case
    if g.ndim == 0:
        return (g,)
    xl = x.transpose(dim, -1)
    gl = g.transpose(dim, -1)
    n = xl.shape[-1]
    eye = ember.eye(n, dtype=ember.bool_, device=x.device)
    table = ember.where(eye, 1.0, xl.unsqueeze(-2).expand(*xl.shape[:-1], n, n)).cumprod(-1)
    table = table.triu()  # only j >= k contribute
    gx = (table * gl.unsqueeze(-2)).sum(dim=-1)
    return (gx.transpose(dim, -1),)


# -- movement ---------------------------------------------------------------------------------

RULES[movement.reshape] = lambda g, out, x, shape: (apply(movement.reshape, g,
                                                          shape=tuple(x.payload.shape)),)
RULES[movement.contiguous] = lambda g, out, x: (g,)
RULES[movement.flip] = lambda g, out, x, dims: (g.flip(dims),)
RULES[movement.tril] = lambda g, out, x, k: (g.tril(k),)
RULES[movement.triu] = lambda g, out, x, k: (g.triu(k),)
RULES[movement.masked_fill] = lambda g, out, x, mask, value: (g.masked_fill(mask, 0.0), None)


@rule(movement.permute)
def _permute(g: Tensor, out: Tensor, x: Tensor, dims: Sequence[int]) -> Grads:
    inverse = tuple(sorted(range(len(dims)), key=list(dims).__getitem__))
    return (apply(movement.permute, g, dims=inverse),)


@rule(movement.expand)
def _expand(g: Tensor, out: Tensor, x: Tensor, shape: Sequence[int]) -> Grads:
    return (sum_to(g, tuple(x.shape)),)


@rule(movement.slice)
def _slice(g: Tensor, out: Tensor, x: Tensor, starts: Sequence[int], stops: Sequence[int],
           steps: Sequence[int]) -> Grads:
    if all(s == 1 for s in steps):  # a contiguous window: pad back
        widths = tuple((a, n - a - m) for a, m, n in zip(starts, g.shape, x.shape, strict=True))
        return (apply(movement.pad, g, pad=widths, value=0.0),)
    key = tuple(slice(a, None if (b < 0 and c < 0) else b, c)
                for a, b, c in zip(starts, stops, steps, strict=True))
    full = _zeros(x)
    full[key] = g  # a functional scatter, differentiable in g
    return (full,)


@rule(movement.pad)
def _pad(g: Tensor, out: Tensor, x: Tensor, pad: Sequence[tuple[int, int]],
         value: float) -> Grads:
    key = tuple(slice(a, a + n) for (a, _), n in zip(pad, x.shape, strict=True))
    return (g[key],)


@rule(movement.cat)
def _cat(g: Tensor, out: Tensor, *xs: Tensor, dim: int) -> Grads:
    return tuple(g.split([x.shape[dim] for x in xs], dim))


@rule(movement.gather)
def _gather(g: Tensor, out: Tensor, x: Tensor, index: Tensor, dim: int) -> Grads:
    return (apply(movement.scatter_add, _zeros(x), index, g, dim=dim), None)


def _fit_to(g: Tensor, shape: Sequence[int]) -> Tensor:
    """``g`` (index-shaped) padded with zeros to ``shape`` (a larger src of scatter)."""
    if tuple(g.shape) == tuple(shape):
        return g
    widths = tuple((0, n - m) for m, n in zip(g.shape, shape, strict=True))
    return apply(movement.pad, g, pad=widths, value=0.0)  # type: ignore[no-any-return]


@rule(movement.scatter_add)
def _scatter_add(g: Tensor, out: Tensor, x: Tensor, index: Tensor, src: Tensor,
                 dim: int) -> Grads:
    return g, None, _fit_to(apply(movement.gather, g, index, dim=dim), src.shape)


@rule(movement.scatter)
def _scatter(g: Tensor, out: Tensor, x: Tensor, index: Tensor, src: Tensor, dim: int) -> Grads:
    zeros = ember.zeros(index.shape, dtype=g.dtype, device=g.device)
    gx = apply(movement.scatter, g, index, zeros, dim=dim)
    return gx, None, _fit_to(apply(movement.gather, g, index, dim=dim), src.shape)


def _index_add(x: Tensor, dim: int, index: Tensor, g: Tensor) -> Tensor:
    """``zeros_like(x)`` with the slices of ``g`` added at ``index`` along ``dim``."""
    shape = [1] * g.ndim
    shape[dim] = index.shape[0]
    full_index = index.reshape(shape).expand(g.shape)
    return apply(movement.scatter_add, _zeros(x), full_index, g, dim=dim)  # type: ignore[no-any-return]


RULES[movement.index_select] = lambda g, out, x, index, dim: (_index_add(x, dim, index, g), None)


def _scatter_back(g: Tensor, out: tuple[Tensor, Tensor], x: Tensor, dim: int) -> Grads:
    return (apply(movement.scatter_add, _zeros(x), out[1], g, dim=dim),)


RULES[movement.sort] = lambda g, out, x, dim, descending, stable: _scatter_back(g, out, x, dim)
RULES[movement.topk] = lambda g, out, x, k, dim, largest: _scatter_back(g, out, x, dim)


# -- linear algebra ---------------------------------------------------------------------------

RULES[linalg.matmul] = (lambda g, out, a, b: _mm(g, _mT(b)), lambda g, out, a, b: _mm(_mT(a), g))


# -- nn ---------------------------------------------------------------------------------------

_CONV = {nn.conv1d: nn.conv1d, nn.conv2d: nn.conv2d,
         nn.conv_transpose1d: nn.conv1d, nn.conv_transpose2d: nn.conv2d}
_CONV_T = {nn.conv1d: nn.conv_transpose1d, nn.conv2d: nn.conv_transpose2d}


def _batch_as_channels(t: Tensor, groups: int, front: bool) -> Tensor:
    """``[N, G*C, *s]`` as ``[C, G*N, *s]`` (front) or ``[G*C, N, *s]`` (not front)."""
    n, gc, *s = t.shape
    c = gc // groups
    t = t.reshape(n, groups, c, *s)
    spatial = list(range(3, 3 + len(s)))
    if front:
        return t.permute(2, 1, 0, *spatial).reshape(c, groups * n, *s)
    return t.permute(1, 2, 0, *spatial).reshape(groups * c, n, *s)


def _crop(t: Tensor, sizes: Sequence[int]) -> Tensor:
    if tuple(t.shape[2:]) == tuple(sizes):
        return t
    return t[(slice(None), slice(None), *(slice(0, k) for k in sizes))]


def _conv_rules(op: Op) -> tuple[InputRule, InputRule]:
    conv, conv_t = op, _CONV_T[op]

    def grad_x(g: Tensor, out: Tensor, x: Tensor, w: Tensor, stride: tuple[int, ...],
               padding: tuple[int, ...], dilation: tuple[int, ...], groups: int) -> Tensor:
        # output_padding makes the transpose land exactly on x's size
        extra = tuple(n - ((o - 1) * s - 2 * p + d * (k - 1) + 1) for n, o, s, p, d, k in
                      zip(x.shape[2:], g.shape[2:], stride, padding, dilation, w.shape[2:],
                          strict=True))
        return apply(conv_t, g, w, stride=stride, padding=padding,  # type: ignore[no-any-return]
                     output_padding=extra, dilation=dilation, groups=groups)

    def grad_w(g: Tensor, out: Tensor, x: Tensor, w: Tensor, stride: tuple[int, ...],
               padding: tuple[int, ...], dilation: tuple[int, ...], groups: int) -> Tensor:
        if (op is nn.conv2d and g.dtype is x.dtype is w.dtype
                and g.device.implements(composite.conv2d_weight_grad)):
            return apply(composite.conv2d_weight_grad, g, x, w,  # type: ignore[no-any-return]
                         stride=stride, padding=padding, dilation=dilation, groups=groups)
        # a convolution of x with g, batch and channel axes swapped; stride and dilation too
        gw = apply(conv, _batch_as_channels(x, groups, True),
                   _batch_as_channels(g, groups, False), stride=dilation, padding=padding,
                   dilation=stride, groups=groups)
        return _crop(gw.transpose(0, 1), w.shape[2:])

    return grad_x, grad_w


def _conv_t_rules(op: Op) -> tuple[InputRule, InputRule]:
    conv = _CONV[op]

    def grad_x(g: Tensor, out: Tensor, x: Tensor, w: Tensor, stride: tuple[int, ...],
               padding: tuple[int, ...], output_padding: tuple[int, ...],
               dilation: tuple[int, ...], groups: int) -> Tensor:
        return apply(conv, g, w, stride=stride, padding=padding,  # type: ignore[no-any-return]
                     dilation=dilation, groups=groups)

    def grad_w(g: Tensor, out: Tensor, x: Tensor, w: Tensor, stride: tuple[int, ...],
               padding: tuple[int, ...], output_padding: tuple[int, ...],
               dilation: tuple[int, ...], groups: int) -> Tensor:
        gw = apply(conv, _batch_as_channels(g, groups, True),
                   _batch_as_channels(x, groups, False), stride=dilation, padding=padding,
                   dilation=stride, groups=groups)
        return _crop(gw.transpose(0, 1), w.shape[2:])

    return grad_x, grad_w


for _op in (nn.conv1d, nn.conv2d):
    RULES[_op] = _conv_rules(_op)
for _op in (nn.conv_transpose1d, nn.conv_transpose2d):
    RULES[_op] = _conv_t_rules(_op)


@rule(nn.max_pool2d)
def _max_pool2d(g: Tensor, out: tuple[Tensor, Tensor], x: Tensor, **params: Any) -> Grads:
    if (g.dtype is x.dtype and x.dtype.kind == "f"
            and g.device.implements(composite.max_pool2d_backward)):
        return (apply(composite.max_pool2d_backward, g, out[1], x, **params),)
    n, c, h, w = x.shape
    flat = apply(movement.scatter_add, _zeros(x).reshape(n, c, h * w),
                 out[1].reshape(n, c, -1), g.reshape(n, c, -1), dim=2)
    return (flat.reshape(x.shape),)


def _window_divisor(n: int, o: int, k: int, s: int, p: int, include_pad: bool) -> list[int]:
    # PyTorch's (and the cpu backend's) avg_pool2d divisor per output position
    out = []
    for i in range(o):
        start = i * s - p
        end = min(start + k, n + p)
        out.append(end - start if include_pad else min(end, n) - max(start, 0))
    return out


@rule(nn.avg_pool2d)
def _avg_pool2d(g: Tensor, out: Tensor, x: Tensor, kernel_size: tuple[int, int],
                stride: tuple[int, int], padding: tuple[int, int], ceil_mode: bool,
                count_include_pad: bool) -> Grads:
    c, (h, w), (oh, ow) = x.shape[1], x.shape[2:], g.shape[2:]
    dh = _window_divisor(h, oh, kernel_size[0], stride[0], padding[0], count_include_pad)
    dw = _window_divisor(w, ow, kernel_size[1], stride[1], padding[1], count_include_pad)
    div = ember.tensor([[1.0 / (a * b) for b in dw] for a in dh], dtype=g.dtype,
                       device=g.device)
    ones = ember.ones(c, 1, *kernel_size, dtype=g.dtype, device=g.device)
    # spread each window's share over the padded input, then cut the padding off
    spread = apply(nn.conv_transpose2d, g * div, ones, stride=stride, padding=(0, 0),
                   output_padding=(0, 0), dilation=(1, 1), groups=c)
    need = (padding[0] + h, padding[1] + w)
    grow = tuple((0, max(n - m, 0)) for m, n in zip(spread.shape[2:], need, strict=True))
    if any(b for _, b in grow):
        spread = apply(movement.pad, spread, pad=((0, 0), (0, 0), *grow), value=0.0)
    return (spread[:, :, padding[0]:padding[0] + h, padding[1]:padding[1] + w],)


def _adaptive_matrix(n: int, o: int, like: Tensor) -> Tensor:
    """``A[o, n]`` with ``out = A @ x`` along one axis of adaptive average pooling."""
    rows = []
    for i in range(o):
        lo, hi = (i * n) // o, -((-(i + 1) * n) // o)
        rows.append([1.0 / (hi - lo) if lo <= j < hi else 0.0 for j in range(n)])
    return ember.tensor(rows, dtype=like.dtype, device=like.device)


@rule(nn.adaptive_avg_pool2d)
def _adaptive_avg_pool2d(g: Tensor, out: Tensor, x: Tensor,
                         output_size: tuple[int, int]) -> Grads:
    ah = _adaptive_matrix(x.shape[2], output_size[0], g)
    aw = _adaptive_matrix(x.shape[3], output_size[1], g)
    return (ah.mT @ g @ aw,)


def _interp_matrix(n: int, o: int, mode: str, align_corners: bool, like: Tensor) -> Tensor:
    """``M[n, o]`` with ``out = x @ M`` along one axis: the backend's own 1-D interpolation of
    the identity, so the weights match the forward pass exactly."""
    eye = ember.eye(n, dtype=like.dtype, device=like.device).reshape(1, n, n)
    one_d = "linear" if mode in ("linear", "bilinear") else mode
    m = apply(nn.interpolate, eye, size=(o,), mode=one_d, align_corners=align_corners)
    return m.reshape(n, o)  # type: ignore[no-any-return]


@rule(nn.interpolate)
def _interpolate(g: Tensor, out: Tensor, x: Tensor, size: tuple[int, ...], mode: str,
                 align_corners: bool) -> Grads:
    ms = [_interp_matrix(n, o, mode, align_corners, g)
          for n, o in zip(x.shape[2:], size, strict=True)]
    if len(ms) == 1:
        return (g @ ms[0].mT,)
    if len(ms) == 2:
        return (ms[0] @ g @ ms[1].mT,)
    raise NotImplementedError(f"interpolate backward for {len(ms)} spatial axes")


@rule(nn.embedding)
def _embedding(g: Tensor, out: Tensor, weight: Tensor, indices: Tensor) -> Grads:
    d = weight.shape[1]
    rows = g.reshape(-1, d)
    index = indices.reshape(-1, 1).expand(rows.shape[0], d)
    return apply(movement.scatter_add, _zeros(weight), index, rows, dim=0), None



# -- composites (ember.ops.composite) ---------------------------------------------------------
# Recorded only where the inner device runs the composite as its own kernel (see
# `AutodiffBackend.implements`); elsewhere the composite decomposes and its primitives are
# recorded.  The backward composites fall back to decompositions the same way.


RULES[composite.softmax] = lambda g, out, x, dim: (F.softmax_backward(out, g, dim),)
RULES[composite.log_softmax] = lambda g, out, x, dim: (F.log_softmax_backward(out, g, dim),)


RULES[composite.gelu] = lambda g, out, x, approximate: (F.gelu_backward(g, x, approximate,
                                                                        out),)



@rule(composite.scaled_dot_product_attention)
def _sdpa(g: Tensor, out: tuple[Tensor, Tensor], q: Tensor, k: Tensor, v: Tensor, *m: Tensor,
          scale: float, causal: bool, mask: bool) -> Grads:
    # Note: a float mask gets no gradient; core sends masks that require one to the
    # decomposition instead.
    grads = F.scaled_dot_product_attention_backward(g, q, k, v, out[0], out[1],
                                                    m[0] if mask else None, scale=scale,
                                                    causal=causal)
    return (*grads, None) if mask else grads



@rule(composite.lstm_cell)
def _lstm_cell(g: Tensor, out: tuple[Tensor, Tensor], gates_x: Tensor, hc: Tensor,
               w_hh: Tensor, *b: Tensor, bias: bool) -> Grads:
    dgx, dhc, dw, db = F.lstm_cell_backward(g, hc, w_hh, out[0], out[1], bias)
    return (dgx, dhc, dw, db) if bias else (dgx, dhc, dw)


@rule(composite.gru_cell)
def _gru_cell(g: Tensor, out: tuple[Tensor, Tensor], gates_x: Tensor, h: Tensor, w_hh: Tensor,
              *b: Tensor, bias: bool) -> Grads:
    dgx, dh, dw, db = F.gru_cell_backward(g, h, w_hh, out[1], bias)
    return (dgx, dh, dw, db) if bias else (dgx, dh, dw)


@rule(composite.lstm_layer)
def _lstm_layer(g: Tensor, out: tuple[Tensor, Tensor], gates_x: Tensor, hc: Tensor,
                w_hh: Tensor, *b: Tensor, bias: bool, reverse: bool) -> Grads:
    dgx, dhc, dw, db = F.lstm_layer_backward(g, hc, w_hh, out[0], out[1], bias, reverse)
    return (dgx, dhc, dw, db) if bias else (dgx, dhc, dw)


@rule(composite.gru_layer)
def _gru_layer(g: Tensor, out: tuple[Tensor, Tensor], gates_x: Tensor, h: Tensor,
               w_hh: Tensor, *b: Tensor, bias: bool, reverse: bool) -> Grads:
    dgx, dh, dw, db = F.gru_layer_backward(g, h, w_hh, out[0], out[1], bias, reverse)
    return (dgx, dh, dw, db) if bias else (dgx, dh, dw)


RULES[composite.linear] = (lambda g, out, x, w, b: _mm(g, w),
                           lambda g, out, x, w, b: _mm(_mT(g), x),
                           lambda g, out, x, w, b: apply(reduction.sum, g, dims=(0,)))


def _recorded(x: Tensor) -> bool:
    """Whether this rule's own ops are being recorded (``create_graph``, or an inner autodiff
    device) with ``x`` needing a gradient: then a forward composite's row statistics must be
    recomputed from ``x``, since the backward pass treats outputs after the first as
    constants and would drop their share of the second derivative."""
    return ember.is_grad_enabled() and x.requires_grad


def _wide(x: Tensor) -> Tensor:
    """``x`` in its row statistics' dtype (float32 for half types)."""
    return x.to(dtype=ember.float32) if x.dtype in (ember.float16, ember.bfloat16) else x


def _norm_stats(x: Tensor, ndim: int, eps: float) -> tuple[Tensor, Tensor]:
    """``layer_norm``'s ``(mean, rstd)`` over the last ``ndim`` axes, differentiably."""
    x = _wide(x)
    dims = tuple(range(x.ndim - ndim, x.ndim))
    mean = x.mean(dim=dims, keepdim=True)
    c = x - mean
    rstd = ((c * c).mean(dim=dims) + eps).rsqrt()
    return mean.reshape(rstd.shape), rstd


def _rms_stat(x: Tensor, ndim: int, eps: float) -> Tensor:
    """``rms_norm``'s ``rstd`` over the last ``ndim`` axes, differentiably."""
    x = _wide(x)
    return ((x * x).mean(dim=tuple(range(x.ndim - ndim, x.ndim))) + eps).rsqrt()


@rule(composite.layer_norm)
def _layer_norm(g: Tensor, out: tuple[Tensor, Tensor, Tensor], x: Tensor, *wb: Tensor,
                ndim: int, eps: float, weight: bool, bias: bool) -> Grads:
    _, mean, rstd = out
    if _recorded(x):
        mean, rstd = _norm_stats(x, ndim, eps)
    dx, dw, db = F.layer_norm_backward(g, x, mean, rstd, wb[0] if weight else None, ndim,
                                       affine=weight or bias)
    return (dx, *((dw,) if weight else ()), *((db,) if bias else ()))


@rule(composite.rms_norm)
def _rms_norm(g: Tensor, out: tuple[Tensor, Tensor], x: Tensor, *w: Tensor, ndim: int,
              eps: float, weight: bool) -> Grads:
    rstd = _rms_stat(x, ndim, eps) if _recorded(x) else out[1]
    dx, dw = F.rms_norm_backward(g, x, rstd, w[0] if weight else None, ndim)
    return (dx, dw) if weight else (dx,)


@rule(composite.cross_entropy)
def _cross_entropy(g: Tensor, out: tuple[Tensor, Tensor, Tensor], logits: Tensor,
                   target: Tensor, **params: Any) -> Grads:
    lse = out[1]
    if _recorded(logits):  # the row logsumexp, differentiably (see `_recorded`)
        lse = F.logsumexp(logits.to(dtype=lse.dtype), dim=1)
    return F.cross_entropy_backward(g, logits, target, lse, out[2], params["ignore_index"],
                                    params["label_smoothing"], params["reduction"]), None



# -- what each rule reads ---------------------------------------------------------------------
# A node saves for its backward only the values its rule reads, as PyTorch's functions pick what
# they ``save_for_backward``: an activation stays alive only while some rule still needs it.  A
# residual ``x + f(x)``, a cast, a reshape or a Linear's output is read by no rule of its own, so
# under mixed precision a float32 copy and its bfloat16 twin are not both kept.  An op without an
# entry saves all its inputs and outputs.  A rule may read the shape, dtype and device of every
# input and output: for the values not kept it gets an `Unsaved` that has just those.


class Reads(NamedTuple):
    """The positions of the inputs and of the outputs whose *values* a rule reads."""

    inputs: frozenset[int] = frozenset()
    outputs: frozenset[int] = frozenset()


def _reads(inputs: Sequence[int] = (), outputs: Sequence[int] = ()) -> Reads:
    return Reads(frozenset(inputs), frozenset(outputs))


#: ``READS[op]``: what ``RULES[op]`` reads; for a rule given per input (a tuple), one `Reads`
#: per input, of which the tape keeps the union over the inputs that need a gradient
READS: dict[Op, Reads | tuple[Reads, ...]] = {}

_NOTHING = _reads()
_X, _Y, _OUT = _reads((0,)), _reads((1,)), _reads((), (0,))
for _op in (elementwise.log, elementwise.log1p, elementwise.sin, elementwise.cos,
            elementwise.asin, elementwise.acos, elementwise.atan, elementwise.sinh,
            elementwise.cosh, elementwise.erf, elementwise.abs, elementwise.clamp,
            elementwise.asinh, elementwise.acosh, elementwise.atanh,
            reduction.var, reduction.prod, reduction.cumprod):
    READS[_op] = _X
for _op in (elementwise.exp, elementwise.expm1, elementwise.sqrt, elementwise.rsqrt,
            elementwise.tan, elementwise.tanh, elementwise.sigmoid, elementwise.reciprocal,
            composite.softmax, composite.log_softmax):
    READS[_op] = _OUT
for _op in (elementwise.sign, elementwise.floor, elementwise.ceil, elementwise.round,
            elementwise.trunc, elementwise.floordiv):
    READS[_op] = _reads()  # a gradient of 0: only the shapes
READS[elementwise.copysign] = _reads((0,), (0,))
for _op in (elementwise.neg, elementwise.add, elementwise.sub, creation.cast, reduction.sum,
            reduction.mean, reduction.cumsum, movement.reshape, movement.contiguous,
            movement.flip, movement.tril, movement.triu, movement.permute, movement.expand,
            movement.slice, movement.pad, movement.cat, nn.avg_pool2d,
            nn.adaptive_avg_pool2d, nn.interpolate):
    READS[_op] = _NOTHING
for _op in (elementwise.remainder, elementwise.atan2, elementwise.maximum,
            elementwise.minimum):
    READS[_op] = _reads((0, 1))
for _op in (movement.masked_fill, movement.gather, movement.scatter_add, movement.scatter,
            movement.index_select, nn.embedding):
    READS[_op] = _Y  # the mask or the indices
READS[elementwise.where] = _X  # the condition
for _op in (reduction.max, reduction.min):
    READS[_op] = _reads((0,), (0,))
for _op in (movement.sort, movement.topk):
    READS[_op] = _reads((), (1,))  # the indices
READS[nn.max_pool2d] = _reads((0,), (1,))
# one entry per input: ``a @ w`` with a constant ``a`` keeps ``w`` only
READS[elementwise.mul] = (_Y, _X)
READS[elementwise.div] = (_Y, _reads((1,), (0,)))
READS[elementwise.pow] = (_reads((0, 1)), _reads((0, 1), (0,)))
READS[linalg.matmul] = (_Y, _X)
READS[composite.linear] = (_Y, _X, _NOTHING)
READS[nn.conv1d] = READS[nn.conv2d] = (_Y, _reads((0, 1)))  # conv2d's kernel takes w
READS[nn.conv_transpose1d] = READS[nn.conv_transpose2d] = (_Y, _X)
# the norms and the loss read their input and row statistics, not their (full-size) output
READS[composite.layer_norm] = _reads((0, 1), (1, 2))
READS[composite.rms_norm] = _reads((0, 1), (1,))
READS[composite.cross_entropy] = _reads((0, 1), (1, 2))
