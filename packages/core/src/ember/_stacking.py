"""Joining, tiling, turning and picking under PyTorch's names: ``hstack``, ``vstack``,
``dstack``, ``column_stack``, ``tile``, ``fliplr``, ``flipud``, ``rot90``, ``unbind``,
``select``, ``take``, ``take_along_dim``, ``masked_select``, ``argwhere``, ``searchsorted``,
``bucketize``, ``isin``; composites of ``cat``, ``repeat``, ``flip``, slicing and comparisons.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import _dtype as dt, _elementwise as _ew, _indexing as _ix, _manipulation as _mv
from ._apply import broadcast_shapes, cast, normalize_dim
from ._errors import DTypeError, ShapeError
from ._tensor import Tensor

__all__ = ["argwhere", "bucketize", "column_stack", "dstack", "fliplr", "flipud", "hstack",
           "isin", "masked_select", "rot90", "searchsorted", "select", "take", "take_along_dim",
           "tile", "unbind", "vstack"]


def _at_least(t: Tensor, n: int) -> Tensor:
    """numpy's ``atleast_{1,2,3}d``: 1-D ``[k]`` is ``[1, k]`` and 2-D ``[a, b]`` is
    ``[a, b, 1]``."""
    if t.ndim >= n:
        return t
    if n == 3 and t.ndim == 2:
        return t.reshape(*t.shape, 1)
    if n == 3 and t.ndim == 1:
        return t.reshape(1, t.shape[0], 1)
    if t.ndim == 0:
        return t.reshape(*(1,) * n)
    return t.reshape(1, t.shape[0])  # n == 2, 1-D


def hstack(tensors: Sequence[Tensor]) -> Tensor:
    """Join along axis 1 (axis 0 for 1-D tensors)."""
    ts = [_at_least(t, 1) for t in tensors]
    return _mv.cat(ts, 0 if all(t.ndim == 1 for t in ts) else 1)


def vstack(tensors: Sequence[Tensor]) -> Tensor:
    """Join along axis 0, 1-D tensors as rows.

    Examples
    --------
    >>> import ember
    >>> ember.vstack([ember.tensor([1, 2]), ember.tensor([3, 4])]).tolist()
    [[1, 2], [3, 4]]
    """
    return _mv.cat([_at_least(t, 2) for t in tensors], 0)


def dstack(tensors: Sequence[Tensor]) -> Tensor:
    """Join along axis 2 (depth), after making each tensor at least 3-D."""
    return _mv.cat([_at_least(t, 3) for t in tensors], 2)


def column_stack(tensors: Sequence[Tensor]) -> Tensor:
    """Join as columns: 0-d and 1-D tensors become columns ``[k, 1]``, then axis 1."""
    return _mv.cat([t.reshape(t.numel(), 1) if t.ndim <= 1 else t for t in tensors], 1)


def tile(x: Tensor, dims: Sequence[int]) -> Tensor:
    """Repeat ``x`` ``dims[i]`` times along each axis; a shorter ``dims`` is padded with 1s in
    front (where ``repeat`` needs one count per axis)."""
    reps = tuple(dims)
    reps = (1,) * (x.ndim - len(reps)) + reps
    return _mv.repeat(x, *reps)


def fliplr(x: Tensor) -> Tensor:
    """Reverse axis 1 (left to right); ``x`` must be at least 2-D."""
    if x.ndim < 2:
        raise ShapeError(f"fliplr: expected a tensor of at least 2 dimensions, got {x.shape}")
    return _mv.flip(x, 1)


def flipud(x: Tensor) -> Tensor:
    """Reverse axis 0 (up to down); ``x`` must be at least 1-D."""
    if x.ndim < 1:
        raise ShapeError("flipud: expected a tensor of at least 1 dimension, got a 0-d tensor")
    return _mv.flip(x, 0)


def rot90(x: Tensor, k: int = 1, dims: Sequence[int] = (0, 1)) -> Tensor:
    """Rotate by 90 degrees ``k`` times in the plane of ``dims``, from the first axis towards
    the second.

    Examples
    --------
    >>> import ember
    >>> ember.rot90(ember.tensor([[1, 2], [3, 4]])).tolist()
    [[2, 4], [1, 3]]
    """
    if len(dims) != 2:
        raise ValueError(f"rot90: dims must name two axes, got {tuple(dims)}")
    if x.ndim < 2:
        raise ShapeError(f"rot90: expected a tensor of at least 2 dimensions, got {x.shape}")
    d0, d1 = (normalize_dim(d, x.ndim, name="dims") for d in dims)
    if d0 == d1:
        raise ValueError(f"rot90: dims must be two different axes, got {tuple(dims)}")
    k %= 4
    if k == 1:
        return _mv.transpose(_mv.flip(x, d1), d0, d1)
    if k == 2:
        return _mv.flip(x, (d0, d1))
    if k == 3:
        return _mv.transpose(_mv.flip(x, d0), d0, d1)
    return x


def select(x: Tensor, dim: int, index: int) -> Tensor:
    """``x`` at position ``index`` of axis ``dim``, that axis removed."""
    d = normalize_dim(dim, x.ndim)
    if x.ndim == 0:
        raise IndexError("select: cannot select from a 0-d tensor")
    n = x.shape[d]
    if not -n <= index < n:
        raise IndexError(f"select: index {index} is out of range for axis {d} of size {n}")
    return _mv.squeeze(_mv.narrow(x, d, index % n, 1), d)


def unbind(x: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    """The slices of ``x`` along ``dim``, that axis removed from each.

    Examples
    --------
    >>> import ember
    >>> [t.tolist() for t in ember.unbind(ember.tensor([[1, 2], [3, 4]]), 1)]
    [[1, 3], [2, 4]]
    """
    d = normalize_dim(dim, x.ndim)
    return tuple(select(x, d, i) for i in range(x.shape[d]))


def _int_index(name: str, index: Tensor) -> None:
    if index._dtype.kind not in "iu":
        raise DTypeError(f"{name}: indices must be an integer tensor, got {index._dtype.name}")


def take(x: Tensor, index: Tensor) -> Tensor:
    """``x`` read as 1-D at ``index`` (shaped like ``index``); indices out of range raise."""
    _int_index("take", index)
    return _ix.getitem(x.reshape(-1), index, op="take")


def take_along_dim(x: Tensor, indices: Tensor, dim: int | None = None) -> Tensor:
    """``gather`` along ``dim`` with ``x`` and ``indices`` broadcast against each other but on
    that axis; without ``dim``, ``take`` of the flattened tensor."""
    _int_index("take_along_dim", indices)
    if dim is None:
        return take(x, indices.reshape(-1))
    d = normalize_dim(dim, x.ndim)
    if indices.ndim != x.ndim:
        raise ShapeError(f"take_along_dim: input {x.shape} and indices {indices.shape} must "
                         "have the same number of dimensions")
    rest_x = (*x.shape[:d], 1, *x.shape[d + 1:])
    rest_i = (*indices.shape[:d], 1, *indices.shape[d + 1:])
    shape = list(broadcast_shapes(rest_x, rest_i))
    xs, ids = list(shape), list(shape)
    xs[d], ids[d] = x.shape[d], indices.shape[d]
    return _mv.gather(x.expand(*xs), d, indices.expand(*ids))


def masked_select(x: Tensor, mask: Tensor) -> Tensor:
    """The values of ``x`` where the boolean ``mask`` is true, as a 1-D tensor (the two
    broadcast against each other first)."""
    if mask._dtype is not dt.bool_:
        raise DTypeError(f"masked_select: the mask must be bool, got {mask._dtype.name}")
    shape = broadcast_shapes(x.shape, mask.shape)
    return _ix.getitem(x.expand(*shape), mask.expand(*shape), op="masked_select")


def argwhere(x: Tensor) -> Tensor:
    """The coordinates of the non-zero values, ``[n, ndim]`` int64 (``nonzero``)."""
    out: Tensor = _mv.nonzero(x)  # type: ignore[assignment]  # not as_tuple: one tensor
    return out


def searchsorted(sorted_sequence: Tensor, values: Tensor | float, *, out_int32: bool = False,
                 right: bool = False, side: str | None = None,
                 sorter: Tensor | None = None) -> Tensor:
    """Where ``values`` would be inserted into the last axis of ``sorted_sequence`` to keep it
    sorted: the number of elements ``< v`` (``<= v`` with ``right=True`` or ``side="right"``).

    ``sorted_sequence`` is 1-D, or has the leading axes of ``values``.  nan sorts after every
    number.  Note: computed by comparing every value with every boundary (memory
    ``values.numel() * boundaries``), not by binary search.

    Examples
    --------
    >>> import ember
    >>> ember.searchsorted(ember.tensor([1, 3, 5]), ember.tensor([0, 3, 6])).tolist()
    [0, 1, 3]
    """
    from ._creation import as_tensor

    if side is not None:
        if side not in ("left", "right"):
            raise ValueError(f"searchsorted: side is 'left' or 'right', got {side!r}")
        if right and side == "left":
            raise ValueError("searchsorted: right=True and side='left' contradict each other")
        right = side == "right"
    seq = sorted_sequence
    if sorter is not None:
        seq = _mv.gather(seq, -1, sorter)
    v = values if isinstance(values, Tensor) else as_tensor(values, device=seq.device)
    if seq.ndim == 0:
        raise ShapeError("searchsorted: the sorted sequence must have at least 1 dimension")
    scalar = v.ndim == 0
    if scalar:
        v = v.reshape(1)
    if seq.ndim > 1 and seq.shape[:-1] != v.shape[:-1]:
        raise ShapeError(f"searchsorted: the sequence {seq.shape} and the values {v.shape} "
                         "must agree on every axis but the last")
    s = seq.unsqueeze(-2) if seq.ndim > 1 else seq
    vv = v.unsqueeze(-1)
    below = (s <= vv) if right else (s < vv)
    count = below.sum(-1)
    if v._dtype.kind == "f":  # nan goes after every number
        count = _ew.where(_ew.isnan(v), seq.shape[-1], count)
    if scalar:
        count = count.reshape(())
    return cast(count, dt.int32) if out_int32 else count


def bucketize(x: Tensor | float, boundaries: Tensor, *, out_int32: bool = False,
              right: bool = False) -> Tensor:
    """The index of the bucket of each value among 1-D ascending ``boundaries``:
    ``boundaries[i - 1] < x <= boundaries[i]`` (``<=``, ``<`` with ``right=True``)."""
    if boundaries.ndim != 1:
        raise ShapeError(f"bucketize: boundaries must be 1-D, got shape {boundaries.shape}")
    return searchsorted(boundaries, x, out_int32=out_int32, right=right)


def isin(elements: Tensor | float, test_elements: Tensor | float, *,
         assume_unique: bool = False, invert: bool = False) -> Tensor:
    """True where an element of ``elements`` is in ``test_elements`` (``invert`` negates)."""
    from ._creation import as_tensor

    e, t = elements, test_elements
    if not isinstance(e, Tensor):
        if not isinstance(t, Tensor):
            raise TypeError("isin: elements or test_elements must be a tensor")
        e = as_tensor(e, device=t.device)
    if not isinstance(t, Tensor):
        t = as_tensor(t, device=e.device)
    hit = (e.unsqueeze(-1) == t.reshape(-1)).any(-1)
    return _ew.logical_not(hit) if invert else hit
