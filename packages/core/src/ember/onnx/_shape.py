"""Shape and movement operators: Shape, Reshape, Slice, Gather, Concat, Expand, Pad, ...

Most have a host form on numpy arrays: shape arithmetic runs on the host (see `_registry`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

import ember as E
from ember import Tensor

from ._registry import Node, Run, op

M = R = E  # ember's tensor functions, by family: movement, reductions


def _axis(a: int, ndim: int, node: Node) -> int:
    if not -max(ndim, 1) <= a < max(ndim, 1):
        raise ValueError(f"{node.where()}: axis {a} is out of range for rank {ndim}")
    return a % max(ndim, 1)


def _ints(v: Any) -> list[int]:
    return [int(i) for i in np.asarray(v).reshape(-1)]


# -- Shape, Size -------------------------------------------------------------------------------

def _shape_of(node: Node, shape: Sequence[int]) -> np.ndarray:
    n = len(shape)
    start = node.attrs.get("start", 0)
    end = node.attrs.get("end", n)
    # a negative bound counts from the end; then both are clamped to [0, rank]
    start, end = max(0, min(n, start + n if start < 0 else start)), \
        max(0, min(n, end + n if end < 0 else end))
    return np.array(list(shape)[start:end], dtype=np.int64)


@op("Shape", host=lambda node, x: _shape_of(node, x.shape))
def shape(r: Run, node: Node, x: Any) -> np.ndarray:
    return _shape_of(node, x.shape)


@op("Size", host=lambda node, x: np.array(x.size, np.int64))
def size(r: Run, node: Node, x: Any) -> np.ndarray:
    return np.array(math.prod(x.shape), np.int64)


# -- reshaping -----------------------------------------------------------------------------------

def _reshape_target(node: Node, shape: Sequence[int], target: list[int]) -> tuple[int, ...]:
    allowzero = node.attrs.get("allowzero", 0)
    out = [shape[i] if (t == 0 and not allowzero) else t for i, t in enumerate(target)]
    if out.count(-1) > 1:
        raise ValueError(f"{node.where()}: shape {target} has more than one -1")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        total = math.prod(shape)
        if known == 0 or total % known:
            raise ValueError(f"{node.where()}: cannot reshape {tuple(shape)} to {target}")
        out[out.index(-1)] = total // known
    if math.prod(out) != math.prod(shape):
        raise ValueError(f"{node.where()}: cannot reshape {tuple(shape)} to {target}")
    return tuple(out)


@op("Reshape", host=lambda node, x, s: x.reshape(_reshape_target(node, x.shape, _ints(s))),
    host_inputs=(1,))
def reshape(r: Run, node: Node, x: Any, s: Any) -> Tensor:
    t = r.tensor(x)
    return t.reshape(_reshape_target(node, t.shape, r.ints(s)))


def _flatten_shape(node: Node, shape: Sequence[int]) -> tuple[int, int]:
    a = node.attrs.get("axis", 1)
    a = a + len(shape) if a < 0 else a
    return math.prod(shape[:a]), math.prod(shape[a:])


@op("Flatten", host=lambda node, x: x.reshape(_flatten_shape(node, x.shape)))
def flatten(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    return t.reshape(_flatten_shape(node, t.shape))


def _squeezed(node: Node, shape: Sequence[int], axes: list[int] | None) -> tuple[int, ...]:
    if axes is None:
        return tuple(d for d in shape if d != 1)
    axes_n = {_axis(a, len(shape), node) for a in axes}
    for a in axes_n:
        if shape[a] != 1:
            raise ValueError(f"{node.where()}: cannot squeeze axis {a} of size {shape[a]} "
                             f"(shape {tuple(shape)})")
    return tuple(d for i, d in enumerate(shape) if i not in axes_n)


def _squeeze_axes(node: Node, axes: Any) -> list[int] | None:
    if axes is not None:
        return _ints(axes)
    a = node.attrs.get("axes")
    return list(a) if a is not None else None


@op("Squeeze", host=lambda node, x, axes=None: x.reshape(
    _squeezed(node, x.shape, _squeeze_axes(node, axes))), host_inputs=(1,))
def squeeze(r: Run, node: Node, x: Any, axes: Any = None) -> Tensor:
    t = r.tensor(x)
    ax = _squeeze_axes(node, r.host(axes) if axes is not None else None)
    return t.reshape(_squeezed(node, t.shape, ax))


def _unsqueezed(node: Node, shape: Sequence[int], axes: list[int]) -> tuple[int, ...]:
    n = len(shape) + len(axes)
    axes_n = sorted(_axis(a, n, node) for a in axes)
    out = list(shape)
    for a in axes_n:
        out.insert(a, 1)
    return tuple(out)


@op("Unsqueeze", host=lambda node, x, axes=None: x.reshape(
    _unsqueezed(node, x.shape, _squeeze_axes(node, axes) or [])), host_inputs=(1,))
def unsqueeze(r: Run, node: Node, x: Any, axes: Any = None) -> Tensor:
    t = r.tensor(x)
    ax = _squeeze_axes(node, r.host(axes) if axes is not None else None) or []
    return t.reshape(_unsqueezed(node, t.shape, ax))


def _perm(node: Node, ndim: int) -> list[int]:
    p = node.attrs.get("perm")
    return list(p) if p is not None else list(range(ndim))[::-1]


@op("Transpose", host=lambda node, x: np.transpose(x, _perm(node, x.ndim)))
def transpose(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    return t.permute(*_perm(node, t.ndim))


# -- joining and splitting -------------------------------------------------------------------

@op("Concat", host=lambda node, *xs: np.concatenate(xs, axis=node.attrs["axis"]))
def concat(r: Run, node: Node, *xs: Any) -> Tensor:
    ts = [r.tensor(x) for x in xs]
    ts = [t for t in ts if t.numel() or len(ts) == 1]
    return M.cat(ts, dim=_axis(node.attrs["axis"], ts[0].ndim, node))


def _split_sizes(node: Node, n: int, split: Any) -> list[int]:
    if split is not None:
        sizes = _ints(split)
    elif "split" in node.attrs:
        sizes = list(node.attrs["split"])
    else:
        k = node.attrs.get("num_outputs", len(node.outputs))
        step = -(-n // k)
        sizes = [min(step, n - i * step) for i in range(k)]
    if sum(sizes) != n:
        raise ValueError(f"{node.where()}: split sizes {sizes} do not add up to {n}")
    return sizes


def _host_split(node: Node, x: np.ndarray, split: Any = None) -> tuple[np.ndarray, ...]:
    a = _axis(node.attrs.get("axis", 0), x.ndim, node)
    sizes = _split_sizes(node, x.shape[a], split)
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=a))


@op("Split", host=_host_split, host_inputs=(1,))
def split(r: Run, node: Node, x: Any, s: Any = None) -> tuple[Tensor, ...]:
    t = r.tensor(x)
    a = _axis(node.attrs.get("axis", 0), t.ndim, node)
    sizes = _split_sizes(node, t.shape[a], r.host(s) if s is not None else None)
    return tuple(M.split(t, sizes, dim=a))


# -- slicing and gathering -----------------------------------------------------------------------

def _slices(node: Node, shape: Sequence[int], starts: list[int], ends: list[int],
            axes: list[int] | None, steps: list[int] | None) -> tuple[slice, ...]:
    nd = len(shape)
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(starts)
    out = [slice(None)] * nd
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        a = _axis(a, nd, node)
        n = shape[a]
        if st == 0:
            raise ValueError(f"{node.where()}: a slice step is 0")
        s = s + n if s < 0 else s
        e = e + n if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), n), min(max(e, 0), n)
            out[a] = slice(s, e, st)
        else:
            s, e = min(max(s, 0), n - 1), min(max(e, -1), n - 1)
            out[a] = slice(s, e if e >= 0 else None, st)
    return tuple(out)


def _slice_args(xs: Sequence[Any]) -> tuple[list[int], list[int], list[int] | None,
                                             list[int] | None]:
    starts, ends, axes, steps = [*xs, None, None][:4]
    return (_ints(starts), _ints(ends), _ints(axes) if axes is not None else None,
            _ints(steps) if steps is not None else None)


def _slice_attrs(node: Node) -> list[Any]:
    """Slice-1 (before opset 10): starts, ends and axes are attributes."""
    at = node.attrs
    return [np.asarray(at["starts"]), np.asarray(at["ends"]),
            np.asarray(at["axes"]) if "axes" in at else None]


@op("Slice", host=lambda node, x, *a: x[_slices(node, x.shape, *_slice_args(
    _slice_attrs(node) if node.opset < 10 else a))], host_inputs=(1, 2, 3, 4),
    note="starts, ends, axes as attributes before opset 10")
def slice_(r: Run, node: Node, x: Any, *a: Any) -> Tensor:
    t = r.tensor(x)
    if node.opset < 10:
        a = tuple(_slice_attrs(node))
    return t[_slices(node, t.shape, *_slice_args([r.host(v) if v is not None else None
                                                   for v in a]))]


def _host_gather(node: Node, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    a = _axis(node.attrs.get("axis", 0), x.ndim, node)
    idx = np.where(idx < 0, idx + x.shape[a], idx)
    return np.take(x, idx, axis=a)


@op("Gather", host=_host_gather)
def gather(r: Run, node: Node, x: Any, idx: Any) -> Tensor:
    t = r.tensor(x)
    a = _axis(node.attrs.get("axis", 0), t.ndim, node)
    n = t.shape[a]
    if isinstance(idx, np.ndarray):
        h = np.where(idx < 0, idx + n, idx).astype(np.int64)
        i = r.tensor(np.ascontiguousarray(h.reshape(-1)))
        ishape = h.shape
    else:
        i = E.where(idx < 0, idx + n, idx)
        ishape = i.shape
        i = i.reshape(-1)
    out = M.index_select(t, a, i)
    return out.reshape(t.shape[:a] + tuple(ishape) + t.shape[a + 1:])


@op("GatherElements", host=lambda node, x, i: np.take_along_axis(
    x, np.where(i < 0, i + x.shape[node.attrs.get("axis", 0)], i), node.attrs.get("axis", 0)))
def gather_elements(r: Run, node: Node, x: Any, idx: Any) -> Tensor:
    t = r.tensor(x)
    a = _axis(node.attrs.get("axis", 0), t.ndim, node)
    i = r.tensor(idx)
    i = E.where(i < 0, i + t.shape[a], i)
    return M.gather(t, a, i)


# -- broadcasting, tiling, padding -----------------------------------------------------------------

@op("Expand", host=lambda node, x, s: np.broadcast_to(
    x, np.broadcast_shapes(x.shape, tuple(_ints(s)))).copy(), host_inputs=(1,))
def expand(r: Run, node: Node, x: Any, s: Any) -> Tensor:
    t = r.tensor(x)
    target = np.broadcast_shapes(t.shape, tuple(r.ints(s)))
    if tuple(target) == t.shape:
        return t
    return M.broadcast_to(t, tuple(target))


@op("Tile", host=lambda node, x, reps: np.tile(x, _ints(reps)), host_inputs=(1,))
def tile(r: Run, node: Node, x: Any, reps: Any) -> Tensor:
    return M.repeat(r.tensor(x), *r.ints(reps))


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate",
              "wrap": "circular"}


@op("Pad", host_inputs=(1, 2, 3), note="modes constant, reflect, edge, wrap")
def pad(r: Run, node: Node, x: Any, pads: Any = None, value: Any = None,
        axes: Any = None) -> Tensor:
    t = r.tensor(x)
    mode = node.attrs.get("mode", "constant")
    if mode not in _PAD_MODES:
        raise ValueError(f"{node.where()}: pad mode {mode!r} is not supported "
                         f"({', '.join(_PAD_MODES)})")
    p = r.ints(pads) if pads is not None else list(node.attrs.get("pads", []))
    nd = t.ndim
    ax = [_axis(a, nd, node) for a in r.ints(axes)] if axes is not None else list(range(nd))
    k = len(ax)
    if len(p) != 2 * k:
        raise ValueError(f"{node.where()}: pads has {len(p)} values for {k} axes")
    begin, end = [0] * nd, [0] * nd
    for j, a in enumerate(ax):
        begin[a], end[a] = p[j], p[j + k]
    widths: list[int] = []
    for a in reversed(range(nd)):
        widths += [begin[a], end[a]]
    while widths[-2:] == [0, 0] and len(widths) > 2:
        widths = widths[:-2]
    fill = None
    if mode == "constant":
        fill = float(r.host(value).reshape(-1)[0]) if value is not None and \
            r.host(value).size else float(node.attrs.get("value", 0.0))
        return M.pad(t, widths, mode="constant", value=fill)
    return M.pad(t, widths, mode=_PAD_MODES[mode])


# -- making tensors -------------------------------------------------------------------------------

def _constant_of_shape(node: Node, s: Any) -> np.ndarray:
    v = node.attrs.get("value")
    value = np.asarray(v).reshape(-1)[0] if v is not None else np.float32(0)
    return np.full(tuple(_ints(s)), value, dtype=np.asarray(value).dtype)


@op("ConstantOfShape", host=_constant_of_shape, host_inputs=(0,))
def constant_of_shape(r: Run, node: Node, s: Any) -> np.ndarray:
    return _constant_of_shape(node, r.host(s))


def _range(node: Node, start: Any, limit: Any, delta: Any) -> np.ndarray:
    s, lim, d = (np.asarray(v).reshape(-1)[0] for v in (start, limit, delta))
    n = max(int(np.ceil((lim - s) / d)), 0)
    out: np.ndarray = (s + np.arange(n, dtype=np.asarray(s).dtype) * d).astype(
        np.asarray(s).dtype)
    return out


@op("Range", host=_range, host_inputs=(0, 1, 2))
def range_(r: Run, node: Node, start: Any, limit: Any, delta: Any) -> np.ndarray:
    return _range(node, r.host(start), r.host(limit), r.host(delta))


@op("Trilu", host=lambda node, x, k=None: (np.triu if node.attrs.get("upper", 1) else np.tril)(
    x, int(np.asarray(k).reshape(-1)[0]) if k is not None else 0), host_inputs=(1,))
def trilu(r: Run, node: Node, x: Any, k: Any = None) -> Tensor:
    t = r.tensor(x)
    d = r.ints(k)[0] if k is not None else 0
    return M.triu(t, d) if node.attrs.get("upper", 1) else M.tril(t, d)


@op("CumSum", host_inputs=(1,))
def cumsum(r: Run, node: Node, x: Any, axis: Any) -> Tensor:
    t = r.tensor(x)
    a = _axis(r.ints(axis)[0], t.ndim, node)
    rev, excl = node.attrs.get("reverse", 0), node.attrs.get("exclusive", 0)
    if rev:
        t = M.flip(t, a)
    out = R.cumsum(t, a).to(t.dtype)  # Note: ember sums integers in int64, ONNX keeps the type
    if excl:
        out = out - t
    return M.flip(out, a) if rev else out


@op("CumProd", host_inputs=(1,))
def cumprod(r: Run, node: Node, x: Any, axis: Any) -> Tensor:
    t = r.tensor(x)
    a = _axis(r.ints(axis)[0], t.ndim, node)
    rev, excl = node.attrs.get("reverse", 0), node.attrs.get("exclusive", 0)
    if rev:
        t = M.flip(t, a)
    if excl:  # shift by one along the axis, a 1 first
        n = t.shape[a]
        ones = E.ones_like(M.narrow(t, a, 0, 1)) if n else t
        t = M.cat([ones, M.narrow(t, a, 0, n - 1)], dim=a) if n else t
    out = R.cumprod(t, a).to(t.dtype)
    return M.flip(out, a) if rev else out


@op("Einsum")
def einsum(r: Run, node: Node, *xs: Any) -> Tensor:
    return E.einsum(node.attrs["equation"], *[r.tensor(x) for x in xs])


# -- indexing by index tensors -------------------------------------------------------------------

def _nd_rows(r: Run, node: Node, t: Tensor, idx: Any,
             batch: int = 0) -> tuple[Tensor, Tensor, int]:
    """``t`` with its first ``batch + k`` axes flattened, the flat row of each index tuple
    (offset by its batch entry's rows), and k."""
    i = r.tensor(idx)
    k = i.shape[-1]
    if batch < 0 or batch >= min(t.ndim, i.ndim) or batch + k > t.ndim or \
            tuple(i.shape[:batch]) != tuple(t.shape[:batch]):
        raise ValueError(f"{node.where()}: indices {list(i.shape)} do not fit data "
                         f"{list(t.shape)} with batch_dims {batch}")
    lead = t.shape[batch:batch + k]
    # an index tuple with a component out of range could still land on a valid flat row
    parts = r.host(idx) if isinstance(idx, np.ndarray) else None
    for axis in range(k):
        v = parts[..., axis] if parts is not None else i[..., axis]
        bad = (v < -lead[axis]) | (v >= lead[axis])
        if bool(bad.any() if parts is not None else bad.any().item()):
            raise IndexError(f"{node.where()}: an index along data axis {batch + axis} is "
                             f"out of range for size {lead[axis]}")
    rows = None
    for axis in range(k):
        v = i[..., axis]
        v = E.where(v < 0, v + lead[axis], v)
        rows = v if rows is None else rows * lead[axis] + v
    if rows is None:  # k == 0: whole slices
        rows = E.zeros(tuple(i.shape[:-1]), device=t.device, dtype=E.int64)
    if batch:
        nb = math.prod(t.shape[:batch])
        per = math.prod(lead)
        offs = E.arange(nb, device=t.device).reshape(
            (*t.shape[:batch], *([1] * (i.ndim - 1 - batch)))) * per
        rows = rows + offs
    flat = t.reshape((math.prod(t.shape[:batch + k]), *t.shape[batch + k:]))
    return flat, rows, batch + k


@op("GatherND", note="batch_dims")
def gather_nd(r: Run, node: Node, x: Any, idx: Any) -> Tensor:
    t = r.tensor(x)
    flat, rows, k = _nd_rows(r, node, t, idx, int(node.attrs.get("batch_dims", 0)))
    out = M.index_select(flat, 0, rows.reshape(-1))
    return out.reshape(tuple(rows.shape) + t.shape[k:])


_REDUCE = {"mul": E.mul, "max": E.maximum, "min": E.minimum}


def _scatter_reduced(r: Run, node: Node, flat: Tensor, pos: Any, upd: Tensor) -> Tensor:
    """``flat`` (1-D) with ``upd`` (1-D) combined into the positions ``pos`` by the node's
    reduction (mul, max, min).  The positions are read back to the host: updates that hit
    one position are applied in rounds of distinct positions, in their order."""
    red = node.attrs["reduction"]
    fn = _REDUCE[red]
    p = r.host(pos).reshape(-1).astype(np.int64)
    if p.size and (p.min() < 0 or p.max() >= flat.shape[0]):
        raise IndexError(f"{node.where()}: an index is out of range")
    seen: dict[int, int] = {}
    rounds = np.empty(p.size, np.int64)
    for j, v in enumerate(p.tolist()):
        rounds[j] = seen.get(v, 0)
        seen[v] = rounds[j] + 1
    for k in range(int(rounds.max()) + 1 if p.size else 0):
        sel = np.nonzero(rounds == k)[0]
        at = r.tensor(p[sel])
        u = M.index_select(upd, 0, r.tensor(sel))
        flat = M.scatter(flat, 0, at, fn(M.index_select(flat, 0, at), u))
    return flat


def _scatter(node: Node, t: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    red = node.attrs.get("reduction", "none")
    if red == "none":
        return M.scatter(t, dim, index, src)
    if red == "add":
        return M.scatter_add(t, dim, index, src)
    raise ValueError(f"{node.where()}: reduction {red!r} is not none, add, mul, max or min")


@op("ScatterND", note="reduction none, add, mul, max, min (the last three read the indices "
    "back to the host)")
def scatter_nd(r: Run, node: Node, x: Any, idx: Any, updates: Any) -> Tensor:
    t = r.tensor(x)
    flat, rows, k = _nd_rows(r, node, t, idx)
    rest = t.shape[k:]
    m = math.prod(rows.shape)
    upd = r.tensor(updates).reshape((m, *rest))
    if node.attrs.get("reduction", "none") in _REDUCE:
        inner = math.prod(rest)
        pos = rows.reshape(m, 1) * inner + E.arange(inner, device=t.device).reshape(1, inner)
        return _scatter_reduced(r, node, flat.reshape(-1), pos, upd.reshape(-1)) \
            .reshape(t.shape)
    index = M.broadcast_to(rows.reshape((m,) + (1,) * len(rest)), (m, *rest))
    return _scatter(node, flat, 0, index, upd).reshape(t.shape)


@op("ScatterElements", note="reduction none, add, mul, max, min (the last three read the "
    "indices back to the host)")
def scatter_elements(r: Run, node: Node, x: Any, idx: Any, updates: Any) -> Tensor:
    t = r.tensor(x)
    a = _axis(node.attrs.get("axis", 0), t.ndim, node)
    i = r.tensor(idx)
    i = E.where(i < 0, i + t.shape[a], i)
    if node.attrs.get("reduction", "none") in _REDUCE:
        ih = r.host(i)
        if ih.size and (ih.min() < 0 or ih.max() >= t.shape[a]):
            raise IndexError(f"{node.where()}: an index is out of range for axis {a} of "
                             f"size {t.shape[a]}")
        # each update's flat position in t: its own coordinates, with axis a from the index
        strides = [math.prod(t.shape[d + 1:]) for d in range(t.ndim)]
        pos = i * strides[a]
        for d in range(t.ndim):
            if d != a:
                shape = [1] * t.ndim
                shape[d] = i.shape[d]
                pos = pos + E.arange(i.shape[d], device=t.device).reshape(shape) * strides[d]
        upd = r.tensor(updates).reshape(-1)
        return _scatter_reduced(r, node, t.reshape(-1), pos, upd).reshape(t.shape)
    return _scatter(node, t, a, i, r.tensor(updates))


@op("OneHot", host_inputs=(1, 2))
def one_hot(r: Run, node: Node, idx: Any, depth: Any, values: Any) -> Tensor:
    i = r.tensor(idx)
    d = int(r.host(depth).reshape(-1)[0])
    off, on = (v.item() for v in r.host(values).reshape(-1))
    i = E.where(i < 0, i + d, i)
    classes = E.arange(d, device=r.device).to(i.dtype)
    hot = E.eq(i.unsqueeze(-1), classes)
    vals = r.host(values)
    out = E.where(hot, r.tensor(np.asarray(on, vals.dtype)), r.tensor(np.asarray(off, vals.dtype)))
    a = node.attrs.get("axis", -1)
    a = a % out.ndim
    return out if a == out.ndim - 1 else E.movedim(out, -1, a)


# -- values that depend on shapes or on data -------------------------------------------------------

def _eye_like(node: Node, shape: Sequence[int], dtype: Any) -> np.ndarray:
    from ._dtypes import numpy_dtype

    if len(shape) != 2:
        raise ValueError(f"{node.where()}: the input must be 2-D, got shape {tuple(shape)}")
    want = numpy_dtype(int(node.attrs["dtype"]), node.where()) if "dtype" in node.attrs \
        else dtype
    return np.eye(shape[0], shape[1], int(node.attrs.get("k", 0)), dtype=want)


@op("EyeLike", host=lambda node, x: _eye_like(node, x.shape, x.dtype))
def eye_like(r: Run, node: Node, x: Any) -> np.ndarray:
    from .._host import numpy_dtype

    return _eye_like(node, x.shape, numpy_dtype(x.dtype))


@op("NonZero", host=lambda node, x: np.array(np.nonzero(x), np.int64).reshape(x.ndim, -1),
    note="reads its input back to the host (the result's size depends on the data)")
def non_zero(r: Run, node: Node, x: Any) -> np.ndarray:
    h = r.host(x)
    return np.array(np.nonzero(h), np.int64).reshape(h.ndim, -1)


@op("Compress", host_inputs=(1,), note="reads the condition back to the host")
def compress(r: Run, node: Node, x: Any, cond: Any) -> Tensor:
    t = r.tensor(x)
    c = r.host(cond).reshape(-1).astype(bool)
    axis = node.attrs.get("axis")
    if axis is None:
        t, a = t.reshape(-1), 0
    else:
        a = _axis(int(axis), t.ndim, node)
    keep = np.nonzero(c[:t.shape[a]])[0].astype(np.int64)
    return M.index_select(t, a, r.tensor(keep))


@op("ReverseSequence", host_inputs=(1,))
def reverse_sequence(r: Run, node: Node, x: Any, lens: Any) -> Tensor:
    t = r.tensor(x)
    b_ax = _axis(node.attrs.get("batch_axis", 1), t.ndim, node)
    t_ax = _axis(node.attrs.get("time_axis", 0), t.ndim, node)
    n = r.ints(lens)
    steps = np.arange(t.shape[t_ax])
    rows = np.array([np.where(steps < k, k - 1 - steps, steps) for k in n], np.int64)
    if t_ax < b_ax:
        rows = rows.T  # [time, batch]
    shape = [1] * t.ndim
    shape[b_ax], shape[t_ax] = t.shape[b_ax], t.shape[t_ax]
    idx = np.broadcast_to(rows.reshape(shape), t.shape)
    return M.gather(t, t_ax, r.tensor(np.ascontiguousarray(idx)))
