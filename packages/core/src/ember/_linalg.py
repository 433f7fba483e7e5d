"""Linear algebra: ``matmul`` with NumPy's rules for 1-D operands and batch broadcasting,
``bmm``, ``vector_norm`` and ``cdist``."""

from __future__ import annotations

import math
from collections.abc import Sequence

from . import _dtype as dt
from ._apply import apply, as_tensor_pair, broadcast_shapes
from ._errors import DTypeError, ShapeError
from ._tensor import Tensor
from .amp._state import AUTOCAST, autocast_inputs
from .ops import linalg as la

__all__ = ["bmm", "cdist", "matmul", "outer", "vector_norm"]


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """Matrix product; 1-D operands are promoted to matrices and the axis dropped after.

    Examples
    --------
    >>> import ember
    >>> (ember.ones(2, 3) @ ember.ones(3)).tolist()
    [3.0, 3.0]
    """
    if AUTOCAST and isinstance(a, Tensor) and isinstance(b, Tensor):  # `ember.autocast`
        a, b = autocast_inputs(la.matmul, (a, b))
    if isinstance(a, Tensor) and isinstance(b, Tensor) and a._dtype is b._dtype:
        # the common case first: matrices (or equal batches of them) that fit, one dtype
        sa, sb = a._data.shape, b._data.shape
        if len(sa) == len(sb) >= 2 and sa[-1] == sb[-2] and sa[:-2] == sb[:-2]:
            dev = a._device
            if b._device is not dev:  # a constant of an inner device, or an error
                return apply(la.matmul, a, b)  # type: ignore[no-any-return]
            return dev.dispatch(la.matmul, (a, b), {})  # type: ignore[no-any-return]
    a, b = as_tensor_pair(a, b)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul: operands must be at least 1-D, got {a.shape} and {b.shape}")
    squeeze_a, squeeze_b = a.ndim == 1, b.ndim == 1
    x = a.reshape(1, a.shape[0]) if squeeze_a else a
    y = b.reshape(b.shape[0], 1) if squeeze_b else b
    if x.shape[-1] != y.shape[-2]:
        raise ShapeError(f"matmul: shapes {a.shape} and {b.shape} do not fit "
                         f"({x.shape[-1]} != {y.shape[-2]})")
    batch = broadcast_shapes(x.shape[:-2], y.shape[:-2])
    if x.shape[:-2] != batch:
        x = x.expand(*batch, *x.shape[-2:])
    if y.shape[:-2] != batch:
        y = y.expand(*batch, *y.shape[-2:])
    out: Tensor = apply(la.matmul, x, y)
    if squeeze_a or squeeze_b:
        shape = out.shape
        shape = shape[:-2] + (() if squeeze_a else shape[-2:-1]) + (() if squeeze_b else
                                                                    shape[-1:])
        out = out.reshape(shape)
    return out


def outer(a: Tensor, b: Tensor) -> Tensor:
    """Outer product of two 1-D tensors."""
    return a.reshape(-1, 1) * b.reshape(1, -1)


def bmm(a: Tensor, b: Tensor) -> Tensor:
    """Batched matrix product of ``a[B, n, m]`` and ``b[B, m, p]`` (no broadcasting)."""
    if a.ndim != 3 or b.ndim != 3:
        raise ShapeError(f"bmm: expected two 3-D tensors, got {a.shape} and {b.shape}")
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise ShapeError(f"bmm: shapes {a.shape} and {b.shape} do not fit (batch "
                         f"{a.shape[0]} vs {b.shape[0]}, inner {a.shape[2]} vs {b.shape[1]})")
    return matmul(a, b)


def _root(s: Tensor, p: float) -> Tensor:
    """``s ** (1 / p)`` for ``s >= 0`` whose gradient at ``s == 0`` is 0, not inf or nan (as
    PyTorch's norms: a zero vector's subgradient)."""
    from ._elementwise import where

    pos = s > 0
    safe = where(pos, s, 1.0)
    root = safe.sqrt() if p == 2 else safe ** (1.0 / p)
    return where(pos, root, 0.0)


def vector_norm(x: Tensor, ord: float = 2, dim: int | Sequence[int] | None = None,
                keepdim: bool = False, *, dtype: dt.DType | None = None) -> Tensor:
    """The ``ord``-norm of ``x`` over ``dim`` (all axes when None), as
    ``torch.linalg.vector_norm``: ``inf`` / ``-inf`` give ``max`` / ``min |x|``, 0 counts the
    non-zero elements, any other ``ord`` is ``sum(|x| ** ord) ** (1 / ord)``.

    Examples
    --------
    >>> import ember
    >>> ember.linalg.vector_norm(ember.tensor([3.0, 4.0])).item()
    5.0
    """
    if x._dtype.kind != "f":
        raise DTypeError(f"linalg.vector_norm: expected a floating point tensor, got "
                         f"{x._dtype.name}")
    if dtype is not None:
        from ._apply import cast

        x = cast(x, dt.as_dtype(dtype))
    ax = x.abs()
    if ord == math.inf:
        return ax.amax(dim, keepdim)
    if ord == -math.inf:
        return ax.amin(dim, keepdim)
    if ord == 0:
        from ._apply import cast

        return cast(x != 0, x._dtype).sum(dim, keepdim)
    if ord == 1:
        return ax.sum(dim, keepdim)
    if ord == 2:
        return _root((x * x).sum(dim, keepdim), 2)
    # |x| ** p with 0 < p < 1 has an infinite slope at 0: zeros contribute no gradient (as
    # PyTorch), and 0 ** p is never differentiated
    from ._elementwise import where

    nz = ax > 0
    powered = where(nz, where(nz, ax, 1.0) ** float(ord), 0.0)
    return _root(powered.sum(dim, keepdim), float(ord))


_CDIST_MODES = ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist",
                "donot_use_mm_for_euclid_dist")


def cdist(x1: Tensor, x2: Tensor, p: float = 2.0,
          compute_mode: str = "use_mm_for_euclid_dist_if_necessary") -> Tensor:
    """The ``p``-norm distance between each row of ``x1[..., P, M]`` and each row of
    ``x2[..., R, M]``: ``[..., P, R]``, batch axes broadcast, as ``torch.cdist``.

    For ``p = 2`` with more than 25 rows on a side (or ``compute_mode=
    "use_mm_for_euclid_dist"``) it uses ``|a|^2 + |b|^2 - 2 a.b``, one matmul, as PyTorch.

    Examples
    --------
    >>> import ember
    >>> ember.cdist(ember.tensor([[0.0, 0.0]]), ember.tensor([[3.0, 4.0]])).tolist()
    [[5.0]]
    """
    if x1.ndim < 2 or x2.ndim < 2 or x1.shape[-1] != x2.shape[-1]:
        raise ShapeError(f"cdist: expected x1 [..., P, M] and x2 [..., R, M] with the same M, "
                         f"got {x1.shape} and {x2.shape}")
    if p < 0:
        raise ValueError(f"cdist: p must be non-negative, got {p}")
    if compute_mode not in _CDIST_MODES:
        raise ValueError(f"cdist: compute_mode must be one of {_CDIST_MODES}, got "
                         f"{compute_mode!r}")
    if x1._dtype.kind != "f" or x2._dtype.kind != "f":
        raise DTypeError(f"cdist: expected floating point tensors, got {x1._dtype.name} and "
                         f"{x2._dtype.name}")
    x1, x2 = as_tensor_pair(x1, x2)
    broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
    mm = p == 2 and (compute_mode == "use_mm_for_euclid_dist" or (
        compute_mode == _CDIST_MODES[0] and (x1.shape[-2] > 25 or x2.shape[-2] > 25)))
    if mm:
        sq1 = (x1 * x1).sum(-1, keepdim=True)
        sq2 = (x2 * x2).sum(-1).unsqueeze(-2)
        s = (sq1 + sq2 - matmul(x1, x2.transpose(-1, -2)) * 2.0).clamp(min=0)
        return _root(s, 2)
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    return vector_norm(diff, p, dim=-1)
