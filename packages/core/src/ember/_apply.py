"""The one path every op takes: check devices, coerce scalars, promote dtypes, dispatch."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import _dtype as dt
from ._errors import DeviceMismatchError, DTypeError, ShapeError
from ._tensor import Tensor
from .amp._state import AUTOCAST, autocast_inputs

if TYPE_CHECKING:
    from ._device import Device
    from .ops import Op

__all__ = ["apply", "broadcast_shapes", "default_float", "lift_constants", "normalize_dim",
           "normalize_dims"]

Scalar = bool | int | float


def default_float() -> dt.DType:
    return dt.float32


def apply(op: Op, *args: Tensor, **params: Any) -> Any:
    """Run a primitive on tensors that already share a device (and dtype, where needed)."""
    if AUTOCAST:  # an `ember.autocast` region is open: the op's policy may cast its inputs
        args = autocast_inputs(op, args)
    dev = args[0]._device
    if len(args) > 1:
        for a in args[1:]:
            if a._device is not dev:
                args = lift_constants(op, args)
                dev = args[0]._device
                break
    return dev.dispatch(op, args, params)


def lift_constants(op: Op, args: Sequence[Tensor]) -> tuple[Tensor, ...]:
    """``args`` on one device: the deepest decorator stack among them, each tensor of one of its
    inner devices wrapped as a constant of it (no gradient), as `ember.tensor` makes one.

    A mask made on ``cpu`` meets an ``autodiff<cpu>`` tensor (the same hardware); so do ``cpu``
    and ``fusion<cpu>`` tensors with an ``autodiff<fusion<cpu>>`` one.  Any other pair of
    devices is a `DeviceMismatchError` naming both: tensors never change hardware implicitly.
    Only called once `apply` has seen two devices, so the one-device path pays nothing.

    Examples
    --------
    >>> import ember
    >>> w = ember.ones(3, device="autodiff<cpu>", requires_grad=True)
    >>> y = w * ember.tensor([1.0, 2.0, 3.0])   # the cpu tensor is a constant here
    >>> str(y.device), y.sum().backward()[w].tolist()
    ('autodiff<cpu>', [1.0, 2.0, 3.0])
    """
    target = args[0]._device
    depth = _depth(target)
    for a in args[1:]:
        n = _depth(a._device)
        if n > depth:
            target, depth = a._device, n
    out = []
    for a in args:
        dev = a._device
        if dev is not target:
            chain = []
            up: Device | None = target
            while up is not None and up is not dev:
                chain.append(up)
                up = up.inner
            if up is None:
                first = args[0]._device
                other = dev if dev is not first else target
                raise DeviceMismatchError(
                    f"{op.name}: tensors are on different devices: {first} and {other}")
            for decorator in reversed(chain):
                a = decorator.backend.wrap(a)  # type: ignore[attr-defined]  # a Decorator
        out.append(a)
    return tuple(out)


def _depth(device: Device) -> int:
    n = 0
    d = device.inner
    while d is not None:
        n, d = n + 1, d.inner
    return n


def create(op: Op, device: Device, **params: Any) -> Any:
    """Run a creation primitive (no tensor inputs) on ``device``."""
    dtype = params.get("dtype")
    if dtype is not None and not device.supports(dtype):
        raise DTypeError(f"device {device} does not support dtype {dtype.name}")
    return device.dispatch(op, (), params)


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """The broadcast of several shapes, or a `ShapeError` naming every one of them."""
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, n in enumerate(s, ndim - len(s)):
            if n == out[i] or n == 1:
                continue
            if out[i] == 1:
                out[i] = n
                continue
            listed = " and ".join(str(tuple(x)) for x in shapes)
            raise ShapeError(f"shapes {listed} cannot be broadcast together "
                             f"(axis {i - ndim}: {out[i]} vs {n})")
    return tuple(out)


def normalize_dim(dim: int, ndim: int, *, name: str = "dim", op: str | None = None) -> int:
    """``dim`` as an index in ``[0, ndim)`` (a 0-d tensor takes 0 and -1, as in PyTorch), or
    an `IndexError` that names the op (``op``, else the public ember function that called)."""
    lim = max(ndim, 1)
    if not -lim <= dim < lim:
        raise IndexError(f"{op or _caller()}: {name} {dim} is out of range for a tensor of "
                         f"{ndim} dimension(s) (expected to be in range of "
                         f"[{-lim}, {lim - 1}])")
    return dim % lim


def normalize_dims(dim: int | Sequence[int] | None, ndim: int, *,
                   op: str | None = None) -> tuple[int, ...]:
    """``dim`` (one axis, several, or None for all) as sorted axes; a 0-d tensor's dims 0 and
    -1 name no axis (``()``), as PyTorch reduces a 0-d tensor over them to itself."""
    if dim is None:
        return tuple(range(ndim))
    if type(dim) is int:  # one axis: nothing can repeat
        d = normalize_dim(dim, ndim, op=op)
        return (d,) if ndim else ()
    if isinstance(dim, int):
        dim = (dim,)
    out = sorted({normalize_dim(d, ndim, op=op) for d in dim})
    if len(out) != len(tuple(dim)):
        first = next(d for d in out if sum(normalize_dim(e, ndim) == d for e in dim) > 1)
        raise ShapeError(f"{op or _caller()}: dim {first} appears multiple times in the list "
                         f"of dims (dim={tuple(dim)})")
    return tuple(out) if ndim else ()


def _caller() -> str:
    """The name of the public ember function the user called: the outermost public function
    of the run of ember frames above the check (``x.softmax(5)`` names softmax, not the
    ``amax`` that softmax calls)."""
    found = "dim"
    frame = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("ember") or module.startswith("ember.testing"):
            break  # the user's code (or the conformance suite's)
        name = frame.f_code.co_name
        if not name.startswith(("_", "<", "normalize_dim")) and name != "forward":
            found = name
        frame = frame.f_back  # type: ignore[assignment]  # None ends the loop
    return found


# -- scalars and promotion --------------------------------------------------------------------

_SCALAR_CACHE: dict[tuple[Any, ...], Tensor] = {}


def scalar_tensor(value: Scalar, dtype: dt.DType, device: Device) -> Tensor:
    """A 0-d tensor of ``value``; small constants are cached (tensors are immutable)."""
    # -0.0 equals 0.0 as a key: keyed by its sign too (nan never equals itself: not cached)
    key = (value, type(value), dtype, device, value == 0 and math.copysign(1.0, value) < 0)
    t = _SCALAR_CACHE.get(key)
    if t is None:
        from .ops import creation

        t = create(creation.full, device, shape=(), value=value, dtype=dtype)
        if value == value and len(_SCALAR_CACHE) < 512 and type(value) in (bool, int, float):
            _SCALAR_CACHE[key] = t
    return t


def cast(x: Tensor, dtype: dt.DType) -> Tensor:
    if x._dtype is dtype:
        return x
    if not x._device.supports(dtype):
        raise DTypeError(f"device {x._device} does not support dtype {dtype.name}")
    from .ops import creation

    return apply(creation.cast, x, dtype=dtype)  # type: ignore[no-any-return]


def as_tensor_pair(a: Any, b: Any) -> tuple[Tensor, Tensor]:
    """Turn ``a op b`` (at least one a Tensor) into two tensors of one device and dtype."""
    if isinstance(a, Tensor):
        if isinstance(b, Tensor):
            if a._dtype is not b._dtype:
                target = dt.promote_types(a._dtype, b._dtype)
                return cast(a, target), cast(b, target)
            return a, b
        target = dt.result_type_scalar(a._dtype, b, default_float())
        return cast(a, target), scalar_tensor(b, target, a._device)
    if not isinstance(b, Tensor):
        raise TypeError(f"expected a tensor, got {type(a).__name__} and {type(b).__name__}")
    target = dt.result_type_scalar(b._dtype, a, default_float())
    return scalar_tensor(a, target, b._device), cast(b, target)


def check_broadcast(op: Op, a: Tensor, b: Tensor) -> None:
    sa, sb = a._data.shape, b._data.shape
    if sa != sb and sa and sb:
        try:
            broadcast_shapes(sa, sb)
        except ShapeError as exc:
            raise ShapeError(f"{op.name}: {exc}") from None


def to_float(x: Tensor) -> Tensor:
    return x if x._dtype.kind == "f" else cast(x, default_float())
