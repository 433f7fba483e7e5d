"""Linear algebra: ``matmul`` with NumPy's rules for 1-D operands and batch broadcasting."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._apply import apply, as_tensor_pair, broadcast_shapes
from ._errors import DeviceMismatchError, ShapeError
from .amp._state import AUTOCAST, autocast_inputs
from .ops import linalg as la

if TYPE_CHECKING:
    from ._tensor import Tensor

__all__ = ["matmul", "outer"]


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """Matrix product; 1-D operands are promoted to matrices and the axis dropped after.

    Examples
    --------
    >>> import ember
    >>> (ember.ones(2, 3) @ ember.ones(3)).tolist()
    [3.0, 3.0]
    """
    tensor = _tensor.Tensor
    if AUTOCAST and isinstance(a, tensor) and isinstance(b, tensor):  # `ember.autocast`
        a, b = autocast_inputs(la.matmul, (a, b))
    if isinstance(a, tensor) and isinstance(b, tensor) and a._dtype is b._dtype:
        # the common case first: matrices (or equal batches of them) that fit, one dtype
        sa, sb = a._data.shape, b._data.shape
        if len(sa) == len(sb) >= 2 and sa[-1] == sb[-2] and sa[:-2] == sb[:-2]:
            dev = a._device
            if b._device is not dev:
                raise DeviceMismatchError(
                    f"{la.matmul.name}: tensors are on different devices: {dev} and {b._device}")
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


from . import _tensor  # noqa: E402  # last: _tensor imports this module
