"""Host data: nested Python lists and numpy arrays in and out of devices.

numpy is used here only as the host container (DESIGN.md), never as a kernel engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import _dtype as dt
from ._errors import DTypeError, ShapeError
from ._trace import TRACE

if TYPE_CHECKING:
    from ._device import Device
    from ._tensor import Tensor

__all__ = ["dtype_of_numpy", "from_host", "numpy_dtype", "to_host"]

_NP: dict[dt.DType, np.dtype[Any]] = {}


def numpy_dtype(dtype: dt.DType) -> np.dtype[Any]:
    """The numpy dtype holding ``dtype`` on the host (bfloat16 through ml_dtypes)."""
    out = _NP.get(dtype)
    if out is None:
        if dtype is dt.bfloat16:
            import ml_dtypes

            out = np.dtype(ml_dtypes.bfloat16)
        else:
            out = np.dtype(dtype.numpy_name)
        _NP[dtype] = out
    return out


def dtype_of_numpy(npdtype: np.dtype[Any]) -> dt.DType:
    name = "bfloat16" if npdtype.name == "bfloat16" else npdtype.name
    try:
        return dt.BY_NAME[name]
    except KeyError:
        raise DTypeError(f"numpy dtype {npdtype} has no ember equivalent") from None


def _nested_shape(data: Any, where: tuple[int, ...] = ()) -> tuple[int, ...]:
    """Shape of a nested sequence, or a ShapeError naming the first ragged position."""
    if isinstance(data, (list, tuple)):
        if not data:
            return (0,)
        shapes = [_nested_shape(item, (*where, i)) for i, item in enumerate(data)]
        for i, s in enumerate(shapes[1:], 1):
            if s != shapes[0]:
                pos = "".join(f"[{j}]" for j in (*where, i))
                first = "".join(f"[{j}]" for j in (*where, 0))
                raise ShapeError(
                    f"ragged nested sequence: element at {pos} has shape {s}, but the element "
                    f"at {first} has shape {shapes[0]}")
        return (len(data), *shapes[0])
    if hasattr(data, "__len__") and not isinstance(data, (str, bytes)) and hasattr(data, "shape"):
        return tuple(data.shape)
    return ()


def _flat_kind(data: Any) -> str:
    """The widest Python kind in a nested sequence: b < i < f."""
    kind = "b"
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, bool) or isinstance(item, np.bool_):
            continue
        elif isinstance(item, (int, np.integer)):
            kind = "i" if kind == "b" else kind
        elif isinstance(item, (float, np.floating)):
            return "f"
        else:
            raise TypeError(f"cannot make a tensor from element {item!r} of type "
                            f"{type(item).__name__}")
    return kind


def host_array(data: Any, dtype: dt.DType | None) -> tuple[np.ndarray, dt.DType]:
    """A contiguous numpy array of ``data`` and its ember dtype."""
    if isinstance(data, np.ndarray):
        src = dtype_of_numpy(data.dtype) if dtype is None else dtype
        # Note: ascontiguousarray turns 0-d arrays into 1-d ones; the reshape keeps 0-d
        return np.ascontiguousarray(data, dtype=numpy_dtype(src)).reshape(data.shape), src
    if isinstance(data, (np.generic,)):
        return host_array(np.asarray(data), dtype)
    _nested_shape(data)
    if dtype is None:
        dtype = {"b": dt.bool_, "i": dt.int64, "f": dt.float32}[_flat_kind(data)]
    if dtype is dt.bfloat16:
        arr = np.asarray(np.array(data, dtype=np.float64), dtype=numpy_dtype(dtype))
    elif dtype.kind in "iu":
        arr = _integers(data, dtype)
    else:
        arr = np.array(data, dtype=numpy_dtype(dtype))
    return np.ascontiguousarray(arr).reshape(arr.shape), dtype


def _integers(data: Any, dtype: dt.DType) -> np.ndarray:
    """Python numbers as an integer dtype, with PyTorch's overflow rule: values outside the
    dtype are a RuntimeError, except that negative integers down to ``-max`` wrap into an
    unsigned dtype (``tensor(-1, dtype=uint8)`` is 255, as in PyTorch)."""
    target = np.dtype(numpy_dtype(dtype))
    info = np.iinfo(target)
    try:
        arr = np.array(data)
    except OverflowError:
        arr = np.array(data, dtype=object)
    low = -int(info.max) if dtype.kind == "u" and arr.dtype.kind in "iuO" else int(info.min)
    if arr.size and arr.dtype.kind in "iufO":
        lo, hi = arr.min(), arr.max()
        cut = (np.trunc(lo), np.trunc(hi)) if arr.dtype.kind == "f" else (lo, hi)  # as a cast
        if not (low <= cut[0] and cut[1] <= int(info.max)):  # nan fails too
            bad = lo if not low <= cut[0] else hi
            raise RuntimeError(f"value cannot be converted to type {dtype.name} without "
                               f"overflow (the value {bad})")
    if arr.dtype.kind in "iuO":
        return arr.astype(np.int64).astype(target)  # negatives wrap into unsigned types
    return arr.astype(target)


def from_host(array: np.ndarray, dtype: dt.DType, device: Device) -> Tensor:
    """A new tensor on ``device`` holding a copy of ``array`` (of ``dtype``'s numpy type)."""
    if not device.supports(dtype):
        raise DTypeError(f"device {device} does not support dtype {dtype.name}")
    if device.inner is not None:
        return device.backend.wrap(from_host(array, dtype, device.inner))  # type: ignore[attr-defined,no-any-return]
    payload = device.backend.from_numpy(array, dtype)
    return device.tensor_type._make(payload, device, dtype)


def to_host(t: Tensor) -> np.ndarray:
    """A host numpy array with ``t``'s values (a synchronisation point)."""
    if TRACE:
        TRACE[0].host_read(t)
    dev = t._device
    while dev.inner is not None:
        t = dev.backend.unwrap(t)  # type: ignore[attr-defined]
        dev = t._device
    return dev.backend.to_numpy(t._data, t._dtype)
