"""Set and counting functions: ``unique`` and ``bincount``.

Their output sizes depend on the values (the number of distinct elements, the largest
value), so each reads one number on the host, as `nonzero` does; the rest is primitives
(sort, compare, cumsum, scatter_add) that every backend has.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _dtype as dt
from ._apply import cast
from ._errors import DTypeError, ShapeError

if TYPE_CHECKING:
    from ._tensor import Tensor

__all__ = ["bincount", "unique"]


def unique(x: Tensor, sorted: bool = True, return_inverse: bool = False,  # PyTorch's names
           return_counts: bool = False, dim: int | None = None) -> Tensor | tuple[Tensor, ...]:
    """The distinct elements of ``x`` in ascending order, and optionally the index of each
    element of ``x`` in them (``inverse``, shaped like ``x``) and how often each occurs.

    With ``dim``, the distinct slices ``x.select(dim, i)`` instead, in lexicographic order
    (PyTorch's ``unique(dim=)``): ``values`` keeps ``x``'s other axes, ``inverse`` has one
    entry per index along ``dim``.  Every nan is distinct, as in PyTorch (a slice holding one
    is distinct too), and ``-0.0`` equals ``0.0``.  Note: a nan sorts after every number, as in
    `sort`; PyTorch's comparator takes it as equal to anything and moves on to the next
    element, which orders slices holding nan arbitrarily.

    Examples
    --------
    >>> import ember
    >>> values, counts = ember.unique(ember.tensor([3, 1, 3, 2]), return_counts=True)
    >>> values.tolist(), counts.tolist()
    ([1, 2, 3], [1, 1, 2])
    >>> rows, inverse = ember.unique(ember.tensor([[2, 1], [1, 5], [2, 1]]), dim=0,
    ...                              return_inverse=True)
    >>> rows.tolist(), inverse.tolist()
    ([[1, 5], [2, 1]], [1, 0, 1])
    """
    from ._creation import ones, zeros
    from ._manipulation import cat, index_select, narrow, nonzero, reshape, sort

    # Note: sorted=False still sorts: PyTorch promises no order then, and ascending is one
    del sorted
    if dim is not None:
        return _unique_dim(x, dim, return_inverse, return_counts)
    flat = reshape(x, -1)
    n = flat.shape[0]
    values, order = sort(flat)
    first = ones(min(n, 1), dtype=dt.bool_, device=x.device)
    if n > 1:
        first = cat([first, narrow(values, 0, 1, n - 1) != narrow(values, 0, 0, n - 1)])
    hits = nonzero(first)
    assert not isinstance(hits, tuple)
    starts = reshape(hits, -1)  # where each distinct value's run begins
    out = [index_select(values, 0, starts)]
    if return_inverse:
        group = cast(first, dt.int64).cumsum(0) - 1
        inverse = zeros(n, dtype=dt.int64, device=x.device).scatter(0, order, group)
        out.append(reshape(inverse, x.shape))
    if return_counts:
        bounds = cat([starts, zeros(1, dtype=dt.int64, device=x.device) + n])
        k = starts.shape[0]
        out.append(narrow(bounds, 0, 1, k) - narrow(bounds, 0, 0, k))
    return out[0] if len(out) == 1 else tuple(out)


def _unique_dim(x: Tensor, dim: int, return_inverse: bool,
                return_counts: bool) -> Tensor | tuple[Tensor, ...]:
    """`unique` of the slices along ``dim``: the slices become the rows of an ``(n, m)`` matrix,
    sorted lexicographically by one stable sort per column from the last to the first (a radix
    sort on the device: ``m`` sorts of ``n`` keys); equal neighbours then form the groups."""
    from ._apply import normalize_dim
    from ._creation import arange, ones, zeros
    from ._manipulation import cat, index_select, movedim, narrow, nonzero, reshape, sort

    if x.ndim == 0:
        raise IndexError(f"unique: dim {dim} is out of range for a 0-d tensor")
    d = normalize_dim(dim, x.ndim)
    n = x.shape[d]
    rest = x.shape[:d] + x.shape[d + 1:]
    m = 1
    for k in rest:
        m *= k
    if m == 0 and n:
        raise ShapeError(f"unique: the slices along dim {dim} of shape {x.shape} are empty "
                         "(a zero-sized axis other than dim), so they cannot be compared")
    rows = reshape(movedim(x, d, 0), (n, m))
    small = dt.uint8 if x._device.supports(dt.uint8) else dt.int32  # sortable bools
    keys = cast(rows, small) if rows._dtype is dt.bool_ else rows
    order = arange(n, dtype=dt.int64, device=x.device)
    if n > 1:
        for j in range(m - 1, -1, -1):  # least significant column first
            column = reshape(narrow(keys, 1, j, 1), -1)
            perm = sort(index_select(column, 0, order), stable=True).indices
            order = index_select(order, 0, perm)
    ranked = index_select(rows, 0, order)
    first = ones(min(n, 1), dtype=dt.bool_, device=x.device)
    if n > 1:
        step = narrow(ranked, 0, 1, n - 1) != narrow(ranked, 0, 0, n - 1)
        first = cat([first, step.any(dim=1)])
    hits = nonzero(first)
    assert not isinstance(hits, tuple)
    starts = reshape(hits, -1)  # where each distinct slice's run begins
    k = starts.shape[0]
    values = movedim(reshape(index_select(ranked, 0, starts), (k, *rest)), 0, d)
    out = [values]
    if return_inverse:
        group = cast(first, dt.int64).cumsum(0) - 1
        out.append(zeros(n, dtype=dt.int64, device=x.device).scatter(0, order, group))
    if return_counts:
        bounds = cat([starts, zeros(1, dtype=dt.int64, device=x.device) + n])
        out.append(narrow(bounds, 0, 1, k) - narrow(bounds, 0, 0, k))
    return out[0] if len(out) == 1 else tuple(out)


def bincount(x: Tensor, weights: Tensor | None = None, minlength: int = 0) -> Tensor:
    """How often each value ``0..max(x)`` occurs in the 1-D non-negative integer ``x`` (at
    least ``minlength`` bins); with ``weights``, the sum of the weights of each value's
    elements (float weights keep their dtype, others give float64, as in PyTorch).

    Examples
    --------
    >>> import ember
    >>> ember.bincount(ember.tensor([0, 2, 2, 5])).tolist()
    [1, 0, 2, 0, 0, 1]
    """
    from ._creation import ones_like, zeros

    if x.ndim != 1 or x._dtype.kind not in "iu":
        raise (ShapeError if x.ndim != 1 else DTypeError)(
            f"bincount: expected a 1-D integer tensor, got shape {x.shape} of "
            f"{x._dtype.name}")
    if minlength < 0:
        raise ValueError(f"bincount: minlength must be non-negative, got {minlength}")
    if weights is not None and tuple(weights.shape) != tuple(x.shape):
        raise ShapeError(f"bincount: weights {weights.shape} must have the input's shape "
                         f"{x.shape}")
    n = x.shape[0]
    if n:
        lo, hi = int(x.amin().item()), int(x.amax().item())
        if lo < 0:
            raise ValueError(f"bincount: input holds negative values (the smallest is {lo}); "
                             "only non-negative integers can be counted")
        size = max(hi + 1, minlength)
    else:
        size = minlength
    index = cast(x, dt.int64)
    if weights is None:
        return zeros(size, dtype=dt.int64, device=x.device).scatter_add(
            0, index, ones_like(index))
    wdtype = weights._dtype if weights._dtype.kind == "f" else (
        dt.float64 if x._device.supports(dt.float64) else dt.float32)
    w = cast(weights, wdtype)
    return zeros(size, dtype=wdtype, device=x.device).scatter_add(0, index, w)
