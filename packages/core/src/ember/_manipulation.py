"""Shape and movement functions: reshape, permute, cat, stack, pad, gather, sort, ..."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from . import _dtype as dt
from ._apply import apply, broadcast_shapes, cast, normalize_dim, normalize_dims
from ._checks import check_range, out_of_bounds
from ._errors import DTypeError, ShapeError
from ._reduction import ValuesIndices
from .ops import movement as mv

if TYPE_CHECKING:
    from ._tensor import Tensor

__all__ = [
    "argsort", "broadcast_tensors", "broadcast_to", "cat", "chunk", "contiguous", "diff",
    "expand", "flatten", "flip", "gather", "index_copy", "index_select", "masked_fill",
    "movedim", "narrow",
    "nonzero", "pad", "permute", "repeat", "repeat_interleave", "reshape", "roll", "scatter",
    "scatter_add", "sort", "split", "squeeze", "stack", "swapaxes", "topk", "transpose", "tril",
    "triu", "unflatten", "unsqueeze",
]

Shape = Sequence[int]


def _shape_arg(shape: tuple[int | Sequence[int], ...]) -> tuple[int, ...]:
    if len(shape) == 1 and not isinstance(shape[0], int):
        return tuple(map(int, shape[0]))
    return tuple(map(int, shape))  # type: ignore[arg-type]  # all ints here


def reshape(x: Tensor, *shape: int | Sequence[int]) -> Tensor:
    """A tensor of the same elements in ``shape`` (one axis may be -1).

    Examples
    --------
    >>> import ember
    >>> ember.arange(6).reshape(2, -1).shape
    (2, 3)
    """
    target = _shape_arg(shape)
    old = tuple(x._data.shape)
    if target == old:
        return x
    numel = math.prod(old)
    if -1 in target:
        new = list(target)
        if new.count(-1) > 1:
            raise ShapeError(f"reshape: only one axis may be -1, got {target}")
        rest = math.prod(n for n in new if n != -1)
        if rest == 0 or numel % rest:
            raise ShapeError(f"reshape: cannot reshape {old} into {target}")
        new[new.index(-1)] = numel // rest
        target = tuple(new)
    if math.prod(target) != numel or min(target, default=0) < 0:
        raise ShapeError(f"reshape: cannot reshape {x.shape} ({numel} elements) into {target}")
    if target == x.shape:
        return x
    return apply(mv.reshape, x, shape=target)  # type: ignore[no-any-return]


def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merge axes ``start_dim..end_dim`` into one."""
    if x.ndim == 0:
        return reshape(x, 1)
    s, e = normalize_dim(start_dim, x.ndim), normalize_dim(end_dim, x.ndim)
    shape = x.shape
    return reshape(x, *shape[:s], math.prod(shape[s:e + 1]), *shape[e + 1:])


def unflatten(x: Tensor, dim: int, sizes: Shape) -> Tensor:
    """Split axis ``dim`` into ``sizes``."""
    d = normalize_dim(dim, x.ndim)
    return reshape(x, *x.shape[:d], *sizes, *x.shape[d + 1:])


def squeeze(x: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:
    """Drop size-1 axes (all of them, or those in ``dim``)."""
    if dim is None:
        dims = {i for i, n in enumerate(x.shape) if n == 1}
    else:
        dims = {normalize_dim(d, x.ndim, op="squeeze")
                for d in ((dim,) if isinstance(dim, int) else dim)}
        if not x.ndim:  # a 0-d tensor's dim 0 (or -1) names no axis: nothing to drop
            return x
        dims = {d for d in dims if x.shape[d] == 1}
    return reshape(x, *[n for i, n in enumerate(x.shape) if i not in dims])


def unsqueeze(x: Tensor, dim: int) -> Tensor:
    """Insert a size-1 axis at ``dim``."""
    d = normalize_dim(dim, x.ndim + 1)
    return reshape(x, *x.shape[:d], 1, *x.shape[d:])


def permute(x: Tensor, *dims: int | Sequence[int]) -> Tensor:
    """Reorder the axes."""
    ndim = len(x._data.shape)
    order = tuple([d if 0 <= d < ndim else normalize_dim(d, ndim) for d in _shape_arg(dims)])
    same = tuple(range(ndim))
    if order == same:
        return x
    if tuple(sorted(order)) != same:
        raise ShapeError(f"permute: {tuple(_shape_arg(dims))} is not a permutation of "
                         f"{ndim} axes (shape {x.shape})")
    return apply(mv.permute, x, dims=order)  # type: ignore[no-any-return]


def transpose(x: Tensor, dim0: int, dim1: int) -> Tensor:
    """Swap two axes."""
    order = list(range(x.ndim))
    a, b = normalize_dim(dim0, x.ndim), normalize_dim(dim1, x.ndim)
    order[a], order[b] = order[b], order[a]
    return permute(x, order)


swapaxes = transpose


def expand(x: Tensor, *shape: int | Sequence[int]) -> Tensor:
    """Broadcast ``x`` to ``shape`` without copying (-1 keeps an axis)."""
    target = list(_shape_arg(shape))
    if len(target) < x.ndim:
        raise ShapeError(f"expand: cannot expand {x.shape} to fewer axes {tuple(target)}")
    lead = len(target) - x.ndim
    for i, n in enumerate(x.shape):
        if target[lead + i] == -1:
            target[lead + i] = n
        elif n != 1 and n != target[lead + i]:
            raise ShapeError(f"expand: cannot expand {x.shape} to {tuple(target)}")
    if any(n < 0 for n in target):
        raise ShapeError(f"expand: -1 is not allowed for new axes in {tuple(target)}")
    if tuple(target) == x.shape:
        return x
    if lead:
        x = reshape(x, *([1] * lead), *x.shape)
    return apply(mv.expand, x, shape=tuple(target))  # type: ignore[no-any-return]


def broadcast_to(x: Tensor, shape: Shape) -> Tensor:
    """Broadcast ``x`` to ``shape``."""
    return expand(x, tuple(shape))


def broadcast_tensors(*xs: Tensor) -> tuple[Tensor, ...]:
    """Broadcast several tensors to their common shape."""
    shape = broadcast_shapes(*(t.shape for t in xs))
    return tuple(expand(t, shape) for t in xs)


def repeat(x: Tensor, *reps: int | Sequence[int]) -> Tensor:
    """Tile ``x`` ``reps`` times along each axis (PyTorch's ``Tensor.repeat``)."""
    r = _shape_arg(reps)
    if len(r) < x.ndim:
        raise ShapeError(f"repeat: {len(r)} repeats for a tensor of {x.ndim} axes")
    x = reshape(x, *([1] * (len(r) - x.ndim)), *x.shape)
    inter = []
    for n in x.shape:
        inter += [1, n]
    y = reshape(x, *inter)
    big = []
    for k, n in zip(r, x.shape, strict=True):
        big += [k, n]
    return reshape(expand(y, big), *[k * n for k, n in zip(r, x.shape, strict=True)])


def flip(x: Tensor, dims: int | Sequence[int]) -> Tensor:
    """Reverse the order of elements along ``dims``."""
    # a dim named twice is an error, as in PyTorch ("dim 0 appears multiple times")
    d = normalize_dims(dims, x.ndim, op="flip")
    return apply(mv.flip, x, dims=d) if d else x


def narrow(x: Tensor, dim: int, start: int, length: int) -> Tensor:
    """``length`` elements of axis ``dim`` from ``start``."""
    shape = x._data.shape
    ndim = len(shape)
    d = normalize_dim(dim, ndim)
    if ndim and type(start) is int and type(length) is int:
        # what x[..., start:start + length] does (one slice, or x itself), without the key
        n = shape[d]
        lo, hi, _ = slice(start, start + length).indices(n)
        if lo == 0 and hi == n:
            return x
        starts, stops = [0] * ndim, list(shape)
        starts[d], stops[d] = lo, hi
        return apply(mv.slice, x, starts=tuple(starts),  # type: ignore[no-any-return]
                     stops=tuple(stops), steps=(1,) * ndim)
    return x[(slice(None),) * d + (slice(start, start + length),)]


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Join tensors along an existing axis.

    Examples
    --------
    >>> import ember
    >>> ember.cat([ember.zeros(2), ember.ones(3)]).tolist()
    [0.0, 0.0, 1.0, 1.0, 1.0]
    """
    ts = list(tensors)
    if not ts:
        raise ValueError("cat needs at least one tensor")
    dtype = ts[0]._dtype
    for t in ts[1:]:
        dtype = dt.promote_types(dtype, t._dtype)
    ts = [cast(t, dtype) for t in ts]
    ref = next((t for t in ts if t.ndim > 0), ts[0])
    d = normalize_dim(dim, ref.ndim)
    for t in ts:
        if t.ndim != ref.ndim or any(a != b for i, (a, b) in enumerate(
                zip(t.shape, ref.shape, strict=True)) if i != d):
            raise ShapeError(f"cat: shapes {ref.shape} and {t.shape} differ outside dim {d}")
    ts = [t for t in ts if t.shape[d] > 0] or ts[:1]
    if len(ts) == 1:
        return ts[0]
    return apply(mv.cat, *ts, dim=d)  # type: ignore[no-any-return]


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Join tensors of one shape along a new axis."""
    ts = list(tensors)
    if not ts:
        raise ValueError("stack needs at least one tensor")
    for t in ts[1:]:
        if t.shape != ts[0].shape:
            raise ShapeError(f"stack: shapes {ts[0].shape} and {t.shape} differ")
    d = normalize_dim(dim, ts[0].ndim + 1)
    return cat([unsqueeze(t, d) for t in ts], d)


def split(x: Tensor, split_size_or_sections: int | Sequence[int], dim: int = 0) -> list[Tensor]:
    """Split into pieces of a size, or of the sizes listed (PyTorch's ``split``)."""
    d = normalize_dim(dim, x.ndim)
    n = x.shape[d]
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        sizes = [min(step, n - i) for i in range(0, n, step)] or [0]
    else:
        sizes = list(split_size_or_sections)
        if sum(sizes) != n:
            raise ShapeError(f"split: sizes {sizes} do not add up to {n} (axis {d} of {x.shape})")
    out, start = [], 0
    for s in sizes:
        out.append(narrow(x, d, start, s))
        start += s
    return out


def chunk(x: Tensor, chunks: int, dim: int = 0) -> list[Tensor]:
    """Split into ``chunks`` nearly equal pieces."""
    n = x.shape[normalize_dim(dim, x.ndim)]
    return split(x, max(1, -(-n // chunks)), dim)


def roll(x: Tensor, shifts: int | Sequence[int],
         dims: int | Sequence[int] | None = None) -> Tensor:
    """Rotate elements along ``dims`` by ``shifts``; without ``dims``, the flattened tensor
    (its shape kept), as PyTorch.

    Examples
    --------
    >>> import ember
    >>> ember.tensor([[1, 2], [3, 4]]).roll(1).tolist()
    [[4, 1], [2, 3]]
    """
    sh = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    if dims is None:
        if len(sh) != 1:
            raise ShapeError(f"roll: shifts and dimensions must align: {len(sh)} shifts and "
                             "no dims (without dims, give one shift)")
        return reshape(roll(reshape(x, -1), sh, 0), *x.shape)
    ds = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(sh) != len(ds):
        raise ShapeError(f"roll: shifts and dimensions must align: {len(sh)} shifts "
                         f"{sh} and {len(ds)} dims {ds}")
    for s, d in zip(sh, ds, strict=True):
        d = normalize_dim(d, x.ndim, op="roll")
        if not x.ndim:
            continue
        n = x.shape[d]
        if n == 0:
            continue
        k = s % n
        if k:
            x = cat([narrow(x, d, n - k, k), narrow(x, d, 0, n - k)], d)
    return x


def pad(x: Tensor, pad: Sequence[int], mode: str = "constant",
        value: float | None = None) -> Tensor:
    """Pad the last axes as ``torch.nn.functional.pad``: ``(left, right, top, bottom, ...)``.

    ``mode`` is ``constant`` (``value``, 0 by default), ``reflect`` (mirrored without the
    edge; each pad smaller than its axis), ``replicate`` (the edge repeated) or ``circular``
    (wrapped; each pad at most its axis).  Negative pads crop.

    Examples
    --------
    >>> import ember
    >>> ember.pad(ember.arange(4.), (2, 1), mode="reflect").tolist()
    [2.0, 1.0, 0.0, 1.0, 2.0, 3.0, 2.0]
    """
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ShapeError(f"pad: {tuple(pad)} must hold pairs for at most {x.ndim} axes "
                         f"(input {x.shape})")
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise ValueError(f"pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', "
                         f"got {mode!r}")
    widths = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        widths[x.ndim - 1 - i] = (int(pad[2 * i]), int(pad[2 * i + 1]))
    if mode != "constant":
        # Note: PyTorch pads only the last 1-3 axes of a batched input in these modes; ember
        # pads any of them
        if value is not None and value != 0:
            raise ValueError(f"pad: mode {mode!r} takes no value (got {value})")
        from ._windows import pad_modes

        return pad_modes(x, widths, mode)
    # negative widths crop, as in PyTorch, never below 0 elements
    for d, ((lo, hi), n) in enumerate(zip(widths, x.shape, strict=True)):
        if n - max(-lo, 0) - max(-hi, 0) < 0:
            raise ShapeError(f"pad: pad={tuple(pad)} crops dimension {d} of size {n} below 0 "
                             f"elements (input {x.shape})")
    crop = tuple(slice(max(-lo, 0), n - max(-hi, 0)) for (lo, hi), n in zip(widths, x.shape,
                                                                           strict=True))
    if any(lo < 0 or hi < 0 for lo, hi in widths):
        x = x[crop]
    widths = [(max(lo, 0), max(hi, 0)) for lo, hi in widths]
    if all(w == (0, 0) for w in widths):
        return x
    return apply(mv.pad, x, pad=tuple(widths),  # type: ignore[no-any-return]
                 value=0.0 if value is None else value)


def movedim(x: Tensor, source: int | Sequence[int], destination: int | Sequence[int]) -> Tensor:
    """Move axes ``source`` to positions ``destination``, the others keeping their order."""
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    if len(src) != len(dst):
        raise ValueError(f"movedim: {len(src)} source and {len(dst)} destination axes")
    src = [normalize_dim(d, x.ndim) for d in src]
    dst = [normalize_dim(d, x.ndim) for d in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ValueError(f"movedim: repeated axes in {tuple(src)} or {tuple(dst)}")
    rest = iter(d for d in range(x.ndim) if d not in src)
    placed = dict(zip(dst, src, strict=True))
    return permute(x, [placed[i] if i in placed else next(rest) for i in range(x.ndim)])


def diff(x: Tensor, n: int = 1, dim: int = -1, prepend: Tensor | None = None,
         append: Tensor | None = None) -> Tensor:
    """The ``n``-th forward difference along ``dim`` (``out[i] = x[i + 1] - x[i]``), after
    joining ``prepend`` and ``append`` to ``x``; bool tensors give ``x[i + 1] != x[i]``.

    Examples
    --------
    >>> import ember
    >>> ember.diff(ember.tensor([1, 4, 9, 16])).tolist()
    [3, 5, 7]
    """
    if x.ndim == 0:
        raise ShapeError("diff: expected a tensor of at least 1 dimension, got a 0-d tensor")
    if n < 0:
        raise ValueError(f"diff: order n must be non-negative, got {n}")
    d = normalize_dim(dim, x.ndim)
    parts = []
    for name, t in (("prepend", prepend), (None, x), ("append", append)):
        if t is None:
            continue
        if name is not None:
            from ._apply import as_tensor_pair

            t = as_tensor_pair(t, x)[0]
            if t.ndim == 0:
                t = expand(t, *x.shape[:d], 1, *x.shape[d + 1:])
            if t.ndim != x.ndim or any(a != b for i, (a, b) in enumerate(
                    zip(t.shape, x.shape, strict=True)) if i != d):
                raise ShapeError(f"diff: {name} {t.shape} must match input {x.shape} except "
                                 f"in dim {d}")
        parts.append(t)
    y = cat(parts, d) if len(parts) > 1 else x
    for _ in range(n):
        m = y.shape[d]
        if m == 0:
            break
        hi, lo = narrow(y, d, 1, m - 1), narrow(y, d, 0, m - 1)
        y = hi != lo if y._dtype is dt.bool_ else hi - lo
    return y


def repeat_interleave(x: Tensor, repeats: int | Tensor | None = None, dim: int | None = None,
                      *, output_size: int | None = None) -> Tensor:
    """Repeat each element (each slice along ``dim``) ``repeats`` times in place, as
    ``torch.repeat_interleave``; ``repeats`` is an int or a 1-D tensor of one count per
    element.  ``dim=None`` flattens first.  ``repeat_interleave(counts)`` alone repeats the
    indices ``0..len(counts)-1``.

    Examples
    --------
    >>> import ember
    >>> ember.repeat_interleave(ember.tensor([1, 2]), 2).tolist()
    [1, 1, 2, 2]
    """
    from ._creation import arange, zeros
    from ._tensor import Tensor as T

    if repeats is None:  # repeat_interleave(repeats)
        return repeat_interleave(arange(x.shape[0] if x.ndim else 1, device=x.device), x,
                                 0, output_size=output_size)
    if dim is None:
        x, d = reshape(x, -1), 0
    else:
        d = normalize_dim(dim, x.ndim)
        if x.ndim == 0:
            x = reshape(x, 1)
    n = x.shape[d]
    if isinstance(repeats, T) and repeats.numel() == 1:
        repeats = int(repeats.item())
    if not isinstance(repeats, T):
        r = int(repeats)
        if r < 0:
            raise ValueError(f"repeat_interleave: repeats must be non-negative, got {r}")
        y = unsqueeze(x, d + 1)
        y = expand(y, *x.shape[:d + 1], r, *x.shape[d + 1:])
        return reshape(y, *x.shape[:d], n * r, *x.shape[d + 1:])
    if repeats.ndim != 1 or repeats.shape[0] != n:
        raise ShapeError(f"repeat_interleave: repeats {repeats.shape} must be 1-D with one "
                         f"count for each of the {n} elements of dim {d} of {x.shape}")
    if repeats._dtype.kind not in "iu":
        raise DTypeError(f"repeat_interleave: repeats must be integers, got "
                         f"{repeats._dtype.name}")
    counts = cast(repeats, dt.int64)
    if n and int(counts.amin().item()) < 0:
        raise ValueError("repeat_interleave: repeats must be non-negative")
    total = int(counts.sum().item()) if output_size is None else int(output_size)
    # source index of each output slot: mark where each element's run ends, count the marks
    ends = counts.cumsum(0)
    marks = zeros(total + 1, dtype=dt.int64, device=x.device)
    if n:
        marks = marks.scatter_add(0, ends.clamp(max=total), _int_ones(ends))
    idx = narrow(marks, 0, 0, total).cumsum(0)
    return index_select(x, d, idx)


def _int_ones(t: Tensor) -> Tensor:
    from ._creation import ones_like

    return ones_like(t, dtype=dt.int64)


def _index_tensor(index: Tensor, name: str) -> Tensor:
    if index._dtype.kind not in "iu":
        raise DTypeError(f"{name}: index must be an integer tensor, got {index._dtype.name}")
    return cast(index, dt.int64)


def _check_index(name: str, index: Tensor, x: Tensor, dim: int) -> None:
    # Note: negative indices wrap once ([-n, n) is valid), as in x[index]; PyTorch's gather,
    # scatter and index_select take only [0, n)
    n = x.shape[dim] if x.ndim else 1
    check_range(name, index, -n, n, out_of_bounds(dim, n))


def gather(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """``out[i][j] = x[index[i][j]][j]`` for ``dim=0`` (PyTorch's ``gather``)."""
    index = _index_tensor(index, "gather")
    if index.ndim != x.ndim:
        raise ShapeError(f"gather: index shape {index.shape} needs {x.ndim} axes like x {x.shape}")
    dim = normalize_dim(dim, x.ndim)
    _check_index("gather", index, x, dim)
    return apply(mv.gather, x, index, dim=dim)  # type: ignore[no-any-return]


def _scatter_args(x: Tensor, index: Tensor, src: Tensor | float,
                  name: str) -> tuple[Tensor, Tensor]:
    from ._apply import scalar_tensor
    from ._tensor import Tensor as T

    index = _index_tensor(index, name)
    if not isinstance(src, T):
        src = expand(scalar_tensor(src, x._dtype, x._device), index.shape)
    if index.ndim != x.ndim or src.ndim != x.ndim:
        raise ShapeError(f"{name}: x {x.shape}, index {index.shape} and src {src.shape} "
                         "need the same number of axes")
    return index, cast(src, x._dtype)


def scatter_add(x: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """``x`` with ``src`` added at ``index`` along ``dim`` (functional, duplicates add up)."""
    index, src = _scatter_args(x, index, src, "scatter_add")
    dim = normalize_dim(dim, x.ndim)
    _check_index("scatter_add", index, x, dim)
    return apply(mv.scatter_add, x, index, src, dim=dim)  # type: ignore[no-any-return]


def scatter(x: Tensor, dim: int, index: Tensor, src: Tensor | float) -> Tensor:
    """``x`` with ``src`` written at ``index`` along ``dim`` (functional)."""
    index, src = _scatter_args(x, index, src, "scatter")
    dim = normalize_dim(dim, x.ndim)
    _check_index("scatter", index, x, dim)
    return apply(mv.scatter, x, index, src, dim=dim)  # type: ignore[no-any-return]


def index_copy(x: Tensor, dim: int, index: Tensor, source: Tensor) -> Tensor:
    """``x`` with the slices of ``source`` along ``dim`` written at ``index`` (functional;
    ``Tensor.index_copy_`` rebinds ``x`` to the result, as PyTorch's in-place form).

    ``index`` is a 1-D integer tensor (or a 0-d one) of ``source.shape[dim]`` positions, and
    ``source`` has ``x``'s shape elsewhere.  It is one ``scatter``, so the positions may live on
    the device (a KV cache written at a step's position without a host read in a compiled
    step).  As in PyTorch, repeated positions leave an unspecified one of their slices.

    Examples
    --------
    >>> import ember
    >>> ember.zeros(4).index_copy(0, ember.tensor([3, 1]), ember.tensor([5., 7.])).tolist()
    [0.0, 7.0, 0.0, 5.0]
    """
    index = _index_tensor(index, "index_copy")
    if index.ndim > 1:
        raise ShapeError(f"index_copy: index must be 0-d or 1-d, got shape {index.shape}")
    dim = normalize_dim(dim, x.ndim) if x.ndim else 0
    n = index.numel()
    want = tuple(n if i == dim else s for i, s in enumerate(x.shape)) if x.ndim else ()
    if tuple(source.shape) != want and not (x.ndim == 0 and source.numel() == n == 1):
        raise ShapeError(f"index_copy: source {source.shape} must have x's shape {x.shape} "
                         f"with {n} (the index's length) at dim {dim}, i.e. {want}")
    if x.ndim == 0:
        return reshape(index_copy(reshape(x, 1), 0, reshape(index, 1), reshape(source, 1)), ())
    _check_index("index_copy", index, x, dim)
    view = tuple(n if i == dim else 1 for i in range(x.ndim))
    return apply(mv.scatter, x, expand(reshape(index, view), want),  # type: ignore[no-any-return]
                 cast(source, x._dtype), dim=dim)


def index_select(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """Rows (along ``dim``) picked by a 1-D integer ``index``."""
    index = _index_tensor(index, "index_select")
    if index.ndim != 1:
        index = reshape(index, -1)
    dim = normalize_dim(dim, x.ndim)
    _check_index("index_select", index, x, dim)
    return apply(mv.index_select, x, index, dim=dim)  # type: ignore[no-any-return]


def masked_fill(x: Tensor, mask: Tensor, value: float) -> Tensor:
    """``x`` with ``value`` where ``mask`` (broadcast to x) is true."""
    from ._tensor import Tensor as T

    if isinstance(value, T):
        value = value.item()
    if broadcast_shapes(x.shape, mask.shape) != x.shape:
        raise ShapeError(f"masked_fill: mask {mask.shape} does not broadcast to x {x.shape}")
    if x._dtype.kind in "iub" and isinstance(value, float) and not value.is_integer():
        raise DTypeError(f"masked_fill: value {value} does not fit dtype {x._dtype.name}")
    return apply(mv.masked_fill, x, cast(mask, dt.bool_), value=value)  # type: ignore[no-any-return]


def tril(x: Tensor, diagonal: int = 0) -> Tensor:
    """Lower triangle of the last two axes."""
    return apply(mv.tril, x, k=diagonal)  # type: ignore[no-any-return]


def triu(x: Tensor, diagonal: int = 0) -> Tensor:
    """Upper triangle of the last two axes."""
    return apply(mv.triu, x, k=diagonal)  # type: ignore[no-any-return]


def contiguous(x: Tensor) -> Tensor:
    """A copy with a dense row-major layout (a no-op where the backend has one already)."""
    return apply(mv.contiguous, x)  # type: ignore[no-any-return]


def nonzero(x: Tensor, *, as_tuple: bool = False) -> Tensor | tuple[Tensor, ...]:
    """Coordinates of non-zero elements: ``[n, ndim]`` int64, or one 1-D tensor per axis."""
    idx: Tensor = apply(mv.nonzero, x)
    if as_tuple:
        return tuple(idx[:, i] for i in range(x.ndim))
    return idx


def sort(x: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> ValuesIndices:
    """Sorted values and their indices along ``dim``."""
    d = normalize_dim(dim, x.ndim)
    if x.ndim == 0:
        from ._creation import zeros_like

        return ValuesIndices(x, zeros_like(x, dtype=dt.int64))
    v, i = apply(mv.sort, x, dim=d, descending=descending, stable=stable)
    return ValuesIndices(v, i)


def argsort(x: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
    """Indices that sort ``x`` along ``dim``."""
    return sort(x, dim, descending, stable).indices


def topk(x: Tensor, k: int, dim: int = -1, largest: bool = True,
         sorted: bool = True) -> ValuesIndices:
    """The ``k`` largest (or smallest) values along ``dim`` and their indices, sorted."""
    d = normalize_dim(dim, x.ndim)
    n = x.shape[d] if x.ndim else 1
    if not 0 <= k <= n:
        raise ValueError(f"topk: k={k} is out of range for axis {d} of size {n}")
    v, i = apply(mv.topk, x, k=k, dim=d, largest=largest)
    return ValuesIndices(v, i)
