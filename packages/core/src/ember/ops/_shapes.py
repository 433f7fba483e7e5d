"""Shape rules: each op's result shape(s) from its input shapes and params, and the check that
params and shapes fit together before any kernel runs.

A rule is ``rule(shapes, params) -> shape | list of shapes`` (a list for a multi-output op) and
raises `ShapeError` (a `ValueError`) naming the op, the offending parameter, its value and the
input shape(s) where they cannot go together.  Bounds follow PyTorch: strides and dilations
>= 1, paddings >= 0 (pools: at most half the kernel), windows that fit the padded input,
``output_padding`` below the stride or the dilation, interpolation sizes >= 1.

Rules serve every path: `Backend.dispatch` calls ``op.check`` (the rule, for ops whose
params or shapes a kernel indexes with; ``None`` for elementwise ops, which pay nothing),
``ember.functional`` calls them for an early error, and Remote uses them to pipeline (the
client) and to refuse a hostile message (the server).  Every rule runs in time linear in the
length of its inputs: sizes are checked against int64 as they are multiplied (`numel`), never
formed as huge integers.

``nonzero`` has no rule: its result's length is the number of non-zero elements, known only
after it ran (`DATA_DEPENDENT`); its kernels size their output from that count.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Final

from .._errors import ShapeError
from . import (
    composite as CO,
    creation as CR,
    elementwise as EW,
    linalg as LA,
    movement as MV,
    nn as NN,
    reduction as RD,
)
from ._op import ON_NEW, Op, registry

__all__ = ["DATA_DEPENDENT", "MAX_NDIM", "RULES", "Rule", "Shape", "check_shapes", "numel"]

Shape = tuple[int, ...]
Rule = Callable[[Sequence[Shape], dict[str, Any]], "Shape | list[Shape]"]

#: the most axes a tensor may have (numpy's limit)
MAX_NDIM: Final = 64
#: one past the largest element count or size (int64)
_LIMIT: Final = 2**63

_show = reprlib.Repr()
_show.maxstring = _show.maxother = 80
_show.maxlist = _show.maxtuple = 12


def _shapes_text(shapes: Sequence[Shape]) -> str:
    return ", ".join(_show.repr(tuple(s)) for s in shapes[:8]) + (
        f" and {len(shapes) - 8} more" if len(shapes) > 8 else "")


def _error(op: str, what: str, shapes: Sequence[Shape]) -> ShapeError:
    return ShapeError(f"{op}: {what} (input shape(s) {_shapes_text(shapes)})")


def numel(shape: Sequence[int]) -> int:
    """The number of elements of ``shape``, in time linear in its length: a `ShapeError` for
    more than `MAX_NDIM` axes, a size that is no int >= 0, or a product of 2**63 or more.

    >>> numel((2, 3, 4))
    24
    """
    if len(shape) > MAX_NDIM:
        raise ShapeError(f"a shape of {len(shape)} dimensions (at most {MAX_NDIM})")
    n = 1
    for d in shape:
        if type(d) is not int:
            i = _index(d)
            if i is None:
                raise ShapeError(f"shape {_show.repr(shape)} holds a size that is no int")
            d = i
        if not 0 <= d < _LIMIT:
            raise ShapeError(f"shape {_show.repr(shape)} holds a size out of [0, 2**63)")
        n *= d
        if n >= _LIMIT:
            raise ShapeError(f"shape {_show.repr(shape)} has 2**63 elements or more")
    return n


def _index(v: Any) -> int | None:
    """``v`` as an int where it is an integer other than a bool (numpy ints too)."""
    if isinstance(v, bool) or not hasattr(type(v), "__index__"):
        return None
    i: int = v.__index__()
    return int(i)


def _int(op: str, name: str, v: Any, shapes: Sequence[Shape], low: int = -_LIMIT) -> int:
    if type(v) is not int:
        i = _index(v)
        if i is None:
            raise _error(op, f"{name} must be an int, got {_show.repr(v)}", shapes)
        v = i
    if not low <= v < _LIMIT:
        bound = f">= {low}" if low > -_LIMIT else "in the int64 range"
        raise _error(op, f"{name} must be {bound}, got {v}", shapes)
    out: int = v
    return out


def _ints(op: str, name: str, value: Any, n: int, shapes: Sequence[Shape],
          low: int = -_LIMIT) -> tuple[int, ...]:
    """``value``: a tuple or list of ``n`` ints >= ``low`` (``n`` < 0: any length)."""
    if not isinstance(value, tuple | list) or (n >= 0 and len(value) != n):
        want = f"{n} int(s)" if n >= 0 else "ints"
        raise _error(op, f"{name} must be a tuple of {want}, got {_show.repr(value)}", shapes)
    if len(value) > MAX_NDIM:
        raise _error(op, f"{name} has {len(value)} entries (at most {MAX_NDIM})", shapes)
    out = []
    for v in value:
        if type(v) is not int:
            i = _index(v)
            if i is None:
                raise _error(op, f"{name} must be a tuple of ints, got {_show.repr(value)}",
                             shapes)
            v = i
        if not low <= v < _LIMIT:
            bound = f">= {low}" if low > -_LIMIT else "in the int64 range"
            raise _error(op, f"{name} must be {bound}, got {_show.repr(value)}", shapes)
        out.append(v)
    return tuple(out)


def _shape_param(op: str, name: str, value: Any, shapes: Sequence[Shape]) -> Shape:
    shape = _ints(op, name, value, -1, shapes, low=0)
    try:
        numel(shape)
    except ShapeError as exc:
        raise _error(op, f"{name}: {exc}", shapes) from None
    return shape


def _axis(op: str, name: str, v: Any, ndim: int, shapes: Sequence[Shape]) -> int:
    lim = max(ndim, 1)
    d = _int(op, name, v, shapes)
    if not -lim <= d < lim:
        raise _error(op, f"{name}={d} is out of range for {ndim} dimension(s)", shapes)
    return d % lim


def _arity(op: str, shapes: Sequence[Shape], low: int, high: int | None = None) -> None:
    high = low if high is None else high
    if not low <= len(shapes) <= high:
        raise _error(op, f"takes {low}{'' if high == low else f' to {high}'} tensor(s), got "
                     f"{len(shapes)}", shapes)


# -- elementwise, reductions, linalg -------------------------------------------------------


def broadcast(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    """The broadcast of every input shape (elementwise ops)."""
    first = shapes[0] if shapes else ()
    if len(shapes) == 1 or (len(shapes) == 2 and shapes[1] == first):  # the common case
        return tuple(first)
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, n in enumerate(s, ndim - len(s)):
            if n == out[i] or n == 1:
                continue
            if out[i] != 1:
                raise ShapeError(f"shapes {_shapes_text(shapes)} cannot be broadcast together")
            out[i] = n
    return tuple(out)


def _first(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    return shapes[0]


def _reduce(op: str, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    s = shapes[0]
    dims = params.get("dims")
    keep = params.get("keepdim", False)
    if type(dims) is tuple and len(dims) == 1 and keep is False:  # fast path: one plain axis
        d = dims[0]
        n = len(s)
        if type(d) is int and -n <= d < n:
            d %= n
            return (*s[:d], *s[d + 1:])
    if dims is None:
        axes = set(range(len(s)))
    else:
        if not isinstance(dims, tuple | list) or len(dims) > max(len(s), 1):
            raise _error(op, f"dims={_show.repr(dims)} for {len(s)} dimension(s)", shapes)
        axes = {_axis(op, "dims", d, len(s), shapes) for d in dims}
    if params.get("keepdim", False):
        return tuple(1 if i in axes else n for i, n in enumerate(s))
    return tuple(n for i, n in enumerate(s) if i not in axes)


def _arg_reduce(op: str, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    s = shapes[0]
    if params["dim"] is None:
        return (1,) * len(s) if params["keepdim"] else ()
    d = _axis(op, "dim", params["dim"], len(s), shapes)
    if not s:
        return ()
    if params["keepdim"]:
        return (*s[:d], 1, *s[d + 1:])
    return (*s[:d], *s[d + 1:])


def _along(op: str, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    """An op along axis ``dim`` that keeps the shape (cumsum, softmax...)."""
    _axis(op, "dim", params["dim"], len(shapes[0]), shapes)
    return shapes[0]


def _same_shapes(op: str, n: int, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    """``n`` inputs of one shape (a backward of an elementwise op...)."""
    _arity(op, shapes, n)
    if any(s != shapes[0] for s in shapes):
        raise _error(op, "inputs must share one shape", shapes)
    if "dim" in params:
        _axis(op, "dim", params["dim"], len(shapes[0]), shapes)
    return shapes[0]


def _matmul(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    a, b = shapes
    if len(a) == 2 and len(b) == 2 and a[1] == b[0]:  # fast path: two matrices
        return (a[0], b[1])
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        raise _error("matmul", "operands do not fit (need [..., n, k] @ [..., k, m])", shapes)
    return (*broadcast([a[:-2], b[:-2]], {}), a[-2], b[-1])


# -- creation ----------------------------------------------------------------------------------


def _creation(op: str, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    return _shape_param(op, "shape", params["shape"], shapes)


def _arange(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    start, stop, step = params["start"], params["stop"], params["step"]
    if not all(type(v) in (int, float) for v in (start, stop, step)) or step == 0:
        raise _error("arange", f"start, stop, step = {_show.repr((start, stop, step))} must "
                     "be numbers with a step other than 0", shapes)
    span = (stop - start) / step
    if span != span or span >= _LIMIT:  # nan or too many
        raise _error("arange", f"{_show.repr((start, stop, step))} has too many elements",
                     shapes)
    n = max(0, int(-(-span // 1)))
    return (n,)


# -- movement -----------------------------------------------------------------------------------


def _plain_numel(shape: Any) -> int:
    """The element count of a tuple of at most `MAX_NDIM` plain ints in [0, 2**63) whose
    product stays below 2**63; -1 for anything else (the caller then takes the full check)."""
    if type(shape) is not tuple or len(shape) > MAX_NDIM:
        return -1
    n = 1
    for d in shape:
        if type(d) is not int or not 0 <= d < _LIMIT:
            return -1
        n *= d
        if n >= _LIMIT:
            return -1
    return n


def _reshape(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    shape = params["shape"]
    n = _plain_numel(shape)
    if n >= 0 and n == _plain_numel(shapes[0]):  # fast path: plain sizes, same count
        out: Shape = shape
        return out
    shape = _shape_param("reshape", "shape", params["shape"], shapes)
    if numel(shape) != numel(shapes[0]):
        raise _error("reshape", f"cannot reshape to shape={shape}: it does not hold "
                     f"{numel(shapes[0])} elements", shapes)
    return shape


def _permute(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    s = shapes[0]
    dims = params["dims"]
    if type(dims) is tuple and len(dims) == len(s):
        # fast path: plain ints (bools and numpy ints compare equal to ints: the type test
        # keeps them on the full path), each an axis, none twice
        n = len(s)
        seen = 0
        out = []
        for d in dims:
            if type(d) is not int or not 0 <= d < n or seen >> d & 1:
                break
            seen |= 1 << d
            out.append(s[d])
        else:
            return tuple(out)
    dims = _ints("permute", "dims", params["dims"], len(s), shapes, low=0)
    if sorted(dims) != list(range(len(s))):
        raise _error("permute", f"dims={dims} is no permutation of {len(s)} axes", shapes)
    return tuple(s[d] for d in dims)


def _expand(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    s = shapes[0]
    shape = params["shape"]
    if type(shape) is tuple and len(shape) == len(s):
        # fast path: plain ints, each the input's size or any size in [0, 2**63) over a 1
        total = 1
        for n, m in zip(s, shape):  # noqa: B905  # lengths checked above
            if type(m) is not int or (m != n and (n != 1 or not 0 <= m < _LIMIT)):
                break
            total *= m
        else:
            if total < _LIMIT:
                out: Shape = shape
                return out
    shape = _shape_param("expand", "shape", params["shape"], shapes)
    if len(shape) != len(s) or any(n != m and n != 1 for n, m in zip(s, shape, strict=True)):
        raise _error("expand", f"shape={shape} is no broadcast of the input", shapes)
    return shape


def _slice(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    s = shapes[0]
    nd = len(s)
    starts, stops, steps = params["starts"], params["stops"], params["steps"]
    if (type(starts) is tuple is type(stops) is type(steps)
            and len(starts) == nd == len(stops) == len(steps)):
        # fast path: forward steps of plain ints with 0 <= start and stop <= size, which keeps
        # every index read in [0, size) (anything else takes the full check below)
        fast = []
        for n, a, b, c in zip(s, starts, stops, steps):  # noqa: B905  # lengths checked above
            if type(a) is type(b) is type(c) is int and 0 <= a <= b <= n and 0 < c < _LIMIT:
                fast.append((b - a + c - 1) // c)
            else:
                break
        else:
            return tuple(fast)
    starts, stops, steps = (_ints("slice", k, params[k], nd, shapes)
                            for k in ("starts", "stops", "steps"))
    out = []
    for i, (n, a, b, c) in enumerate(zip(s, starts, stops, steps, strict=True)):
        if c == 0:
            raise _error("slice", f"steps={steps}: step 0 on axis {i}", shapes)
        r = range(a, b, c)
        if r and not (0 <= r[0] < n and 0 <= r[-1] < n):  # an empty range reads nothing
            raise _error("slice", f"starts={starts}, stops={stops}: bounds {a}:{b}:{c} out of "
                         f"range for axis {i} of size {n}", shapes)
        out.append(len(r))
    return tuple(out)


def _pad(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    s = shapes[0]
    pad = params["pad"]
    if not isinstance(pad, tuple | list) or len(pad) != len(s):
        raise _error("pad", f"pad={_show.repr(pad)} needs (before, after) per axis", shapes)
    out = []
    for i, (n, p) in enumerate(zip(s, pad, strict=True)):
        lo, hi = _ints("pad", "pad", p, 2, shapes)
        m = n + lo + hi
        if m < 0 or n + lo < 0 or n + hi < 0:  # Note: negative pads crop, as PyTorch's
            raise _error("pad", f"pad={_show.repr(pad)} crops axis {i} of size {n} below 0 "
                         "elements", shapes)
        out.append(m)
    return _checked("pad", tuple(out), shapes)


def _checked(op: str, shape: Shape, shapes: Sequence[Shape]) -> Shape:
    try:
        numel(shape)
    except ShapeError as exc:
        raise _error(op, f"result {exc}", shapes) from None
    return shape


def _flip(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    s = shapes[0]
    dims = params["dims"]
    if not isinstance(dims, tuple | list) or len(dims) > max(len(s), 1):
        raise _error("flip", f"dims={_show.repr(dims)} for {len(s)} dimension(s)", shapes)
    for d in dims:
        _axis("flip", "dims", d, len(s), shapes)
    return s


def _cat(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    if not shapes:
        raise _error("cat", "no tensors to concatenate", shapes)
    first = shapes[0]
    if not first:
        raise _error("cat", "zero-dimensional tensors cannot be concatenated", shapes)
    d = params["dim"]
    if len(shapes) == 2 and shapes[1] == first and type(d) is int and 0 <= d < len(first):
        # fast path: two tensors of one shape (a real tensor's: its sizes are in range)
        out = (*first[:d], 2 * first[d], *first[d + 1:])
        return out if _plain_numel(out) >= 0 else _checked("cat", out, shapes)
    if type(d) is not int or not 0 <= d < len(first):
        d = _axis("cat", "dim", d, len(first), shapes)
    total = 0
    for s in shapes:
        if len(s) != len(first) or s[:d] != first[:d] or s[d + 1:] != first[d + 1:]:
            raise _error("cat", f"sizes differ off dim={d}", shapes)
        total += s[d]
    return _checked("cat", (*first[:d], total, *first[d + 1:]), shapes)


def _gather(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    x, index = shapes
    d = _axis("gather", "dim", params["dim"], len(x), shapes)
    if len(index) != len(x) or any(i > n for a, (i, n) in enumerate(zip(index, x, strict=True))
                                   if a != d):
        raise _error("gather", f"index of shape {index} does not fit the input along "
                     f"dim={d}", shapes)
    return index


def _scatter(op: str, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    x, index, src = shapes
    d = _axis(op, "dim", params["dim"], len(x), shapes)
    if (len(index) != len(x) or len(src) != len(x)
            or any(i > n for a, (i, n) in enumerate(zip(index, x, strict=True)) if a != d)
            or any(i > n for i, n in zip(index, src, strict=True))):
        raise _error(op, f"index {index} must fit the input off dim={d} and the source "
                     "everywhere", shapes)
    return x


def _index_select(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    x, index = shapes
    d = _axis("index_select", "dim", params["dim"], len(x), shapes)
    if len(index) > 1:
        raise _error("index_select", f"index must be 1-D, got shape {index}", shapes)
    k = index[0] if index else 1
    return (*x[:d], k, *x[d + 1:]) if x else ((k,) if index else ())


def _masked_fill(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    x, mask = shapes
    if broadcast([x, mask], {}) != x:
        raise _error("masked_fill", "the mask does not broadcast to the input", shapes)
    return x


def _triangle(op: str, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    if len(shapes[0]) < 2:
        raise _error(op, "input must have at least 2 dimensions", shapes)
    _int(op, "k", params["k"], shapes)
    return shapes[0]


def _sort(shapes: Sequence[Shape], params: dict[str, Any]) -> list[Shape]:
    _axis("sort", "dim", params["dim"], len(shapes[0]), shapes)
    return [shapes[0], shapes[0]]


def _topk(shapes: Sequence[Shape], params: dict[str, Any]) -> list[Shape]:
    s = shapes[0]
    d = _axis("topk", "dim", params["dim"], len(s), shapes)
    k = _int("topk", "k", params["k"], shapes, low=0)
    if k > (s[d] if s else 1):
        raise _error("topk", f"k={k} is larger than the size of dim={d}", shapes)
    out = (*s[:d], k, *s[d + 1:]) if s else ()
    return [out, out]


def _embedding(shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    w, idx = shapes
    if len(w) != 2:
        raise _error("embedding", "weight must be 2-D [rows, dim]", shapes)
    return _checked("embedding", (*idx, w[1]), shapes)


# -- the table ------------------------------------------------------------------------------------

RULES: dict[Op, Rule] = {}


def _register(op: Op, rule: Rule) -> None:
    RULES[op] = rule
    op.shape_rule = rule
    # elementwise ops index nothing with their params: dispatch skips their rule
    op.check = rule if op.group != "elementwise" else None


def _named(fn: Callable[..., Any], op: Op, *more: Any) -> Rule:
    return partial(fn, op.name, *more)


#: ops whose result shape depends on the data (``nonzero``: one row per non-zero element)
DATA_DEPENDENT: Final[frozenset[Op]] = frozenset({MV.nonzero})


def check_shapes(op: Op, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape | list[Shape]:
    """Run ``op``'s rule: its result shape(s), or a `ShapeError` naming the op, the parameter
    and the input shapes.  An op without a rule (a plugin's custom op) passes.

    >>> from ember import ops
    >>> check_shapes(ops.conv2d, [(1, 2, 8, 8), (3, 2, 3, 3)],
    ...              dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1))
    (1, 3, 6, 6)
    """
    rule = op.shape_rule
    if rule is None:
        return list(shapes[:1]) if op.outputs != 1 else (shapes[0] if shapes else ())
    try:
        out: Shape | list[Shape] = rule(shapes, params)
        return out
    except KeyError as exc:
        raise _error(op.name, f"missing parameter {exc}", shapes) from None


def _build() -> None:
    from . import _nn_shapes as NS

    for op in registry.values():
        if op.group == "elementwise":
            _register(op, _first if op.arity == 1 else broadcast)
    _register(EW.clamp, _first)
    for op in (RD.sum, RD.prod, RD.mean, RD.max, RD.min, RD.var, RD.any, RD.all):
        _register(op, _named(_reduce, op))
    for op in (RD.argmax, RD.argmin):
        _register(op, _named(_arg_reduce, op))
    for op in (RD.cumsum, RD.cumprod, CO.softmax, CO.log_softmax):
        _register(op, _named(_along, op))
    for op in (CR.full, CR.rand, CR.randn, CR.randint):
        _register(op, _named(_creation, op))
    for op in (MV.tril, MV.triu):
        _register(op, _named(_triangle, op))
    for op in (MV.scatter, MV.scatter_add):
        _register(op, _named(_scatter, op))
    for op in (CO.softmax_backward, CO.log_softmax_backward, CO.clamp_backward):
        _register(op, _named(_same_shapes, op, 2))
    _register(CO.gelu, _first)
    _register(CO.gelu_backward, _named(_same_shapes, CO.gelu_backward, 3))
    table: dict[Op, Rule] = {
        CR.cast: _first, CR.arange: _arange, LA.matmul: _matmul,
        MV.reshape: _reshape, MV.permute: _permute, MV.expand: _expand, MV.slice: _slice,
        MV.pad: _pad, MV.flip: _flip, MV.cat: _cat, MV.gather: _gather,
        MV.index_select: _index_select, MV.masked_fill: _masked_fill, MV.contiguous: _first,
        MV.sort: _sort, MV.topk: _topk, NN.embedding: _embedding,
    }
    table.update(NS.rules())
    for op, rule in table.items():
        _register(op, rule)


def _adopt(op: Op) -> None:
    """An op made later (a plugin's custom op, an elementwise op defined in the kernel IR):
    its own rule if it brought one, the broadcast if it is elementwise."""
    if op.shape_rule is not None:
        RULES[op] = op.shape_rule
    elif op.group == "elementwise":
        _register(op, _first if op.arity == 1 else broadcast)


_build()
ON_NEW.append(_adopt)
