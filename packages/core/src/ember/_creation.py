"""Creation functions: ``tensor``, ``zeros``, ``arange``, ``rand``, ``*_like``, DLPack import."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import _dtype as dt
from ._apply import cast, create, default_float
from ._device import Device, device as _device
from ._errors import DTypeError, ShapeError
from ._host import from_host, host_array
from ._random import Generator, default_generator
from .ops import creation as cr
from .ops._op import Op

if TYPE_CHECKING:
    from ._tensor import Tensor

__all__ = [
    "arange", "as_tensor", "empty", "empty_like", "eye", "from_dlpack", "from_numpy", "full",
    "full_like", "linspace", "meshgrid", "ones", "ones_like", "rand", "rand_like", "randint",
    "randint_like", "randn", "randn_like", "tensor", "zeros", "zeros_like",
]

DeviceLike = str | Device | None
DTypeLike = dt.DType | str | type | None


def _dtype_or(dtype: DTypeLike, default: dt.DType) -> dt.DType:
    return default if dtype is None else dt.as_dtype(dtype)


def _shape(size: tuple[Any, ...]) -> tuple[int, ...]:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    shape = tuple(int(s) for s in size)
    for s in shape:
        if s < 0:  # PyTorch's words, a RuntimeError there (a ShapeError is both)
            raise ShapeError(f"Trying to create tensor with negative dimension {s}: "
                             f"{list(shape)}")
    return shape


def _finish(t: Tensor, requires_grad: bool) -> Tensor:
    return t.requires_grad_(True) if requires_grad else t


def tensor(data: Any, *, dtype: DTypeLike = None, device: DeviceLike = None,
           requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of ``data`` (nested lists, scalars, numpy arrays, tensors).

    Python floats become ``float32``, ints ``int64``, bools ``bool``; numpy arrays keep their
    dtype.  Ragged nested lists are rejected, naming the offending position.

    Examples
    --------
    >>> import ember
    >>> ember.tensor([[2., 3.], [4., 5.]]).shape
    (2, 2)
    """
    from ._tensor import Tensor

    dev = _device(device)
    if isinstance(data, Tensor):
        out = data.to(dev)
        out = cast(out, dt.as_dtype(dtype)) if dtype is not None else out
        return _finish(out.detach() if out is data else out, requires_grad)
    if hasattr(data, "__dlpack__") and not hasattr(data, "__array_interface__"):
        data = from_dlpack(data).numpy()
    arr, dtype_ = host_array(data, None if dtype is None else dt.as_dtype(dtype))
    return _finish(from_host(arr, dtype_, dev), requires_grad)


def as_tensor(data: Any, *, dtype: DTypeLike = None, device: DeviceLike = None) -> Tensor:
    """``data`` itself if it already is a tensor of that dtype and device, else a copy."""
    from ._tensor import Tensor

    if isinstance(data, Tensor) and (device is None or _device(device) is data.device) and (
            dtype is None or dt.as_dtype(dtype) is data.dtype):
        return data
    return tensor(data, dtype=dtype, device=device)


def from_numpy(array: Any, *, device: DeviceLike = None) -> Tensor:
    """A tensor from a numpy array, keeping its dtype."""
    return tensor(array, device=device)


def full(size: Sequence[int] | int, fill_value: float, *, dtype: DTypeLike = None,
         device: DeviceLike = None, requires_grad: bool = False) -> Tensor:
    """A tensor of ``size`` filled with ``fill_value``."""
    shape = _shape((size,)) if isinstance(size, int) else _shape(tuple(size))
    if dtype is None:
        dtype = dt.bool_ if isinstance(fill_value, bool) else (
            dt.int64 if isinstance(fill_value, int) else default_float())
    t: Tensor = create(cr.full, _device(device), shape=shape, value=fill_value,
                       dtype=dt.as_dtype(dtype))
    return _finish(t, requires_grad)


def zeros(*size: Any, dtype: DTypeLike = None, device: DeviceLike = None,
          requires_grad: bool = False) -> Tensor:
    """A tensor of zeros (default float)."""
    return full(_shape(size), 0, dtype=_dtype_or(dtype, default_float()), device=device,
                requires_grad=requires_grad)


def ones(*size: Any, dtype: DTypeLike = None, device: DeviceLike = None,
         requires_grad: bool = False) -> Tensor:
    """A tensor of ones (default float)."""
    return full(_shape(size), 1, dtype=_dtype_or(dtype, default_float()), device=device,
                requires_grad=requires_grad)


empty = zeros


def _like(x: Tensor, dtype: DTypeLike, device: DeviceLike) -> tuple[dt.DType, Device]:
    return _dtype_or(dtype, x.dtype), x.device if device is None else _device(device)


def full_like(x: Tensor, fill_value: float, *, dtype: DTypeLike = None,
              device: DeviceLike = None, requires_grad: bool = False) -> Tensor:
    d, dev = _like(x, dtype, device)
    return full(x.shape, fill_value, dtype=d, device=dev, requires_grad=requires_grad)


def zeros_like(x: Tensor, *, dtype: DTypeLike = None, device: DeviceLike = None,
               requires_grad: bool = False) -> Tensor:
    return full_like(x, 0, dtype=dtype, device=device, requires_grad=requires_grad)


def ones_like(x: Tensor, *, dtype: DTypeLike = None, device: DeviceLike = None,
              requires_grad: bool = False) -> Tensor:
    return full_like(x, 1, dtype=dtype, device=device, requires_grad=requires_grad)


empty_like = zeros_like


def arange(start: float, end: float | None = None, step: float = 1, *, dtype: DTypeLike = None,
           device: DeviceLike = None) -> Tensor:
    """Values from ``start`` (inclusive) to ``end`` (exclusive) by ``step``.

    Examples
    --------
    >>> import ember
    >>> ember.arange(3).tolist(), ember.arange(0, 1, 0.25).tolist()
    ([0, 1, 2], [0.0, 0.25, 0.5, 0.75])
    """
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ValueError("arange: step must not be zero")
    if dtype is None:
        ints = all(isinstance(v, int) for v in (start, end, step))
        dtype = dt.int64 if ints else default_float()
    return create(cr.arange, _device(device), start=start, stop=end,  # type: ignore[no-any-return]
                  step=step, dtype=dt.as_dtype(dtype))


def linspace(start: float, end: float, steps: int, *, dtype: DTypeLike = None,
             device: DeviceLike = None) -> Tensor:
    """``steps`` evenly spaced values from ``start`` to ``end`` inclusive."""
    d = _dtype_or(dtype, default_float())
    if steps == 1:
        return full((1,), start, dtype=d, device=device)
    i = arange(steps, dtype=dt.float64 if d is dt.float64 else dt.float32, device=device)
    step = (end - start) / (steps - 1)
    # Note: the second half counts down from ``end`` so that both ends are exact (as PyTorch)
    from ._elementwise import where

    up = i * step + start
    down = end - (steps - 1 - i) * step
    return cast(where(i < steps // 2, up, down), d)


def logspace(start: float, end: float, steps: int, base: float = 10.0, *,
             dtype: DTypeLike = None, device: DeviceLike = None) -> Tensor:
    """``steps`` values from ``base ** start`` to ``base ** end``, evenly spaced in the
    exponent.

    Examples
    --------
    >>> import ember
    >>> ember.logspace(0, 2, 3).tolist()
    [1.0, 10.0, 100.0]
    """
    d = _dtype_or(dtype, default_float())
    from ._elementwise import pow

    exponents = linspace(start, end, steps, dtype=dt.float64 if d is dt.float64 else
                         dt.float32, device=device)
    return cast(pow(float(base), exponents), d)


def eye(n: int, m: int | None = None, *, dtype: DTypeLike = None,
        device: DeviceLike = None) -> Tensor:
    """The identity matrix (``n`` x ``m``)."""
    m = n if m is None else m
    rows = arange(n, device=device).reshape(n, 1)
    cols = arange(m, device=device).reshape(1, m)
    return cast(rows == cols, _dtype_or(dtype, default_float()))


def meshgrid(*tensors: Tensor | Sequence[Tensor], indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids of 1-D (or 0-d) tensors: with ``indexing="ij"`` output ``k`` varies
    along axis ``k``; ``"xy"`` swaps the first two axes (Cartesian, as numpy's default).
    The grids are broadcast views of the inputs.

    Examples
    --------
    >>> import ember
    >>> xs, ys = ember.meshgrid(ember.tensor([1, 2]), ember.tensor([3, 4, 5]), indexing="xy")
    >>> xs.shape, xs.tolist()[0]
    ((3, 2), [1, 2])
    """
    ts: list[Tensor] = list(tensors[0]) if len(tensors) == 1 and isinstance(
        tensors[0], (list, tuple)) else list(tensors)  # type: ignore[arg-type]  # tensors
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    if not ts:
        raise ValueError("meshgrid needs at least one tensor")
    for i, t in enumerate(ts):
        if t.ndim > 1:
            raise ShapeError(f"meshgrid: expected 0-d or 1-D tensors, got {t.shape} at "
                             f"position {i}")
    sizes = [t.numel() for t in ts]
    swap = indexing == "xy" and len(ts) >= 2
    if swap:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    out = []
    for i, t in enumerate(ts):
        axis = (1 - i if i < 2 else i) if swap else i
        shape = [1] * len(ts)
        shape[axis] = t.numel()
        out.append(t.reshape(shape).expand(sizes))
    return tuple(out)


def _random(op: Op, size: tuple[Any, ...], dtype: DTypeLike, device: DeviceLike,
            generator: Generator | None, requires_grad: bool, **params: Any) -> Tensor:
    d = _dtype_or(dtype, default_float())
    if op is not cr.randint and d.kind != "f":
        raise DTypeError(f"{op.name} needs a floating dtype, got {d.name}")
    seed, offset = (generator or default_generator).next_key()
    t: Tensor = create(op, _device(device), shape=_shape(size), dtype=d, seed=seed,
                       offset=offset, **params)
    return _finish(t, requires_grad)


def rand(*size: Any, generator: Generator | None = None, dtype: DTypeLike = None,
         device: DeviceLike = None, requires_grad: bool = False) -> Tensor:
    """Uniform samples in ``[0, 1)``."""
    return _random(cr.rand, size, dtype, device, generator, requires_grad)


def randn(*size: Any, generator: Generator | None = None, dtype: DTypeLike = None,
          device: DeviceLike = None, requires_grad: bool = False) -> Tensor:
    """Standard normal samples."""
    return _random(cr.randn, size, dtype, device, generator, requires_grad)


def randint(low: int, high: int | None = None, size: Sequence[int] = (), *,
            generator: Generator | None = None, dtype: DTypeLike = None,
            device: DeviceLike = None) -> Tensor:
    """Integers uniform in ``[low, high)`` (``randint(high, size)`` starts at 0)."""
    if high is None:
        low, high = 0, low
    if high <= low:
        raise ValueError(f"randint: high ({high}) must be greater than low ({low})")
    return _random(cr.randint, tuple(size), _dtype_or(dtype, dt.int64), device, generator,
                   False, low=int(low), high=int(high))


def rand_like(x: Tensor, *, generator: Generator | None = None, dtype: DTypeLike = None) -> Tensor:
    return rand(x.shape, generator=generator, dtype=_dtype_or(dtype, x.dtype), device=x.device)


def randn_like(x: Tensor, *, generator: Generator | None = None,
               dtype: DTypeLike = None) -> Tensor:
    return randn(x.shape, generator=generator, dtype=_dtype_or(dtype, x.dtype), device=x.device)


def randint_like(x: Tensor, low: int, high: int | None = None, *,
                 generator: Generator | None = None, dtype: DTypeLike = None) -> Tensor:
    return randint(low, high, x.shape, generator=generator, dtype=_dtype_or(dtype, x.dtype),
                   device=x.device)


def from_dlpack(obj: Any, *, device: DeviceLike = None) -> Tensor:
    """A tensor from any DLPack producer (numpy, CuPy, PyTorch, JAX).

    Host producers are imported through numpy; a backend whose memory the producer lives on
    may import without a copy (``Backend.from_dlpack``).
    """
    dev = _device(device)
    imported = dev.backend.from_dlpack(obj) if dev.inner is None else None
    if imported is not None:
        payload, dtype = imported
        return dev.tensor_type._make(payload, dev, dtype)
    import numpy as np

    arr = np.from_dlpack(obj)
    return tensor(arr, device=dev)


def numel(shape: Sequence[int]) -> int:
    return math.prod(shape)
