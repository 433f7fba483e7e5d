"""The payload of Triton tensors: a strided view of one allocation of some memory layer.

Views (reshape of contiguous data, permute, expand, slice with steps, flip) cost no copy: they
share the allocation and change ``shape``, ``strides`` (in elements, possibly 0 or negative) and
``offset``.  Kernels receive a pointer to the view's first element plus its strides.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ember.backend.strided import StridedView, contiguous_strides

__all__ = ["DeviceArray", "contiguous_strides", "dtype_name", "kind_of", "triton_dtype_name"]


_SHAPES: dict[tuple[int, ...], tuple[int, ...]] = {}


def int_shape(shape: Any) -> tuple[int, ...]:
    """``shape`` as a tuple of Python ints (numpy integers leak into views otherwise, and
    slow down everything that hashes or compares them).  A dictionary of the shapes seen
    answers in one look-up: numpy integers hash and compare like the ints they hold, so a
    tuple of them finds its int twin."""
    if type(shape) is not tuple:
        shape = tuple(shape)
    got = _SHAPES.get(shape)
    if got is None:
        got = tuple(map(int, shape))
        if len(_SHAPES) < 65536:
            _SHAPES[got] = got
    return got


_TRITON_NAMES: dict[np.dtype[Any], str] = {}


def triton_dtype_name(dtype: np.dtype[Any]) -> str:
    """The dtype name Triton sees for a pointer: bool is stored as bytes (``uint8``)."""
    name = _TRITON_NAMES.get(dtype)
    if name is None:  # Note: cached, since dtype.name costs microseconds in numpy
        name = _TRITON_NAMES[dtype] = "uint8" if dtype.kind == "b" else dtype.name
    return name


class DeviceArray(StridedView):
    """A strided view of ``storage`` (an allocation owned by ``memory``): the
    `ember.backend.strided.StridedView` of the Triton backends.

    Examples
    --------
    >>> import numpy as np
    >>> from ember_triton import HostMemory
    >>> a = HostMemory().from_numpy(np.arange(6.0).reshape(2, 3))
    >>> a.shape, a.strides, a.transpose((1, 0)).strides
    ((2, 3), (3, 1), (1, 3))
    """

    __slots__ = ("dtype", "memory", "offset", "ptr", "shape", "storage", "strides")

    def __init__(self, memory: Any, storage: Any, shape: tuple[int, ...], dtype: np.dtype[Any],
                 strides: tuple[int, ...] | None = None, offset: int = 0) -> None:
        self.memory = memory
        self.storage = storage
        self.shape = int_shape(shape)
        self.dtype = np.dtype(dtype)
        self.strides = contiguous_strides(self.shape) if strides is None else tuple(strides)
        self.offset = int(offset)
        #: the device address of the first element (what kernels are launched with)
        self.ptr: int = memory.address(storage) + self.offset * self.dtype.itemsize

    @classmethod
    def fresh(cls, memory: Any, storage: Any, shape: tuple[int, ...],
              dtype: np.dtype[Any], ptr: int,
              strides: tuple[int, ...] | None = None, offset: int = 0) -> DeviceArray:
        """A contiguous array over a new allocation, its first element at address ``ptr``
        (``offset`` elements into ``storage``); ``shape`` is a tuple of ints and ``dtype`` a
        numpy dtype already (the allocation path skips normalising them); ``strides``, when
        given, are the contiguous strides of ``shape``."""
        a = object.__new__(cls)
        a.memory = memory
        a.storage = storage
        a.shape = shape
        a.dtype = dtype
        a.strides = contiguous_strides(shape) if strides is None else strides
        a.offset = offset
        a.ptr = ptr
        return a

    def view(self, shape: tuple[int, ...], strides: tuple[int, ...],
             offset: int) -> DeviceArray:
        """Another view of the same allocation (element strides and offset)."""
        a = object.__new__(DeviceArray)
        a.memory = self.memory
        a.storage = self.storage
        a.shape = int_shape(shape)
        a.dtype = self.dtype
        a.strides = tuple(strides)
        a.offset = int(offset)
        a.ptr = self.ptr + (a.offset - self.offset) * self.dtype.itemsize
        return a

    def transpose(self, dims: tuple[int, ...]) -> DeviceArray:
        """numpy's name for `permute`."""
        return self.permute(dims)

    def address(self) -> int:
        """The device address of the view's first element."""
        return self.ptr

    def arg(self) -> Any:
        """The kernel argument: a pointer to the first element of the view."""
        return self.memory.pointer(self.storage, self.offset * self.dtype.itemsize,
                                   triton_dtype_name(self.dtype))

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, strides={self.strides})"


_NAMES: dict[np.dtype[Any], str] = {}


def dtype_name(dtype: np.dtype[Any]) -> str:
    """``dtype.name``, cached: numpy computes it afresh, in microseconds, on every access."""
    name = _NAMES.get(dtype)
    if name is None:
        name = _NAMES[dtype] = dtype.name
    return name


_KINDS: dict[np.dtype[Any], str] = {}


def kind_of(dtype: np.dtype[Any]) -> str:
    """numpy's kind letter, with ml_dtypes' bfloat16 (kind ``V``) counted as floating."""
    kind = _KINDS.get(dtype)
    if kind is None:  # Note: cached, since dtype.name costs microseconds in numpy
        kind = _KINDS[dtype] = "f" if dtype.name == "bfloat16" else dtype.kind
    return kind
