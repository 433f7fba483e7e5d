"""ember's exception types.  Each subclasses the builtin a PyTorch or numpy user would catch
(where the two differ, both)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "DTypeError",
    "DeviceMismatchError",
    "DivisionByZeroError",
    "DeviceUnavailableError",
    "EmberPluginWarning",
    "OutOfMemoryError",
    "RecordError",
    "ShapeError",
    "allocation_error",
]


class ShapeError(ValueError, RuntimeError):
    """Shapes that do not fit together; the message names every shape involved.

    A `RuntimeError`, as PyTorch raises for shape errors (so a ported ``except RuntimeError``
    catches it), and a `ValueError`, as it has always been.
    """


class DeviceMismatchError(RuntimeError):
    """Tensors of two devices meet in one op; the message names both devices."""


class DeviceUnavailableError(RuntimeError):
    """A device whose hardware or driver is absent; the message gives the probe's reason."""


class DivisionByZeroError(ZeroDivisionError, RuntimeError):
    """Integer ``//`` or ``%`` by zero (PyTorch raises a RuntimeError "ZeroDivisionError")."""


class DTypeError(TypeError, RuntimeError):
    """A dtype the device or the op does not support; the message names both.

    A `RuntimeError`, as PyTorch raises for unsupported dtypes ("not implemented for 'Bool'"),
    and a `TypeError`, as it has always been.
    """


class RecordError(ValueError):
    """A record (checkpoint) that cannot be loaded: names the file and the key."""


class OutOfMemoryError(MemoryError):
    """An allocation a device could not make: the message names the op, the shape, the dtype,
    the bytes and the device (PyTorch's ``torch.OutOfMemoryError``; a `MemoryError`, so code
    that catches that keeps working).  Nothing else is lost: the process and every other
    tensor stay as they were.

    ``shape``, ``dtype`` (a name), ``nbytes`` and ``device`` (a device string) are kept as
    attributes (``None`` where unknown), ``reason`` is what the allocator said.
    """

    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    nbytes: int | None = None
    device: str | None = None
    reason: str = ""


def _size(nbytes: int) -> str:
    value, unit = float(nbytes), "bytes"
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if value < 1024 or unit == "EiB":
            break
        value /= 1024
    return f"{nbytes} bytes" if unit == "bytes" else f"{value:.2f} {unit} ({nbytes} bytes)"


def allocation_error(shape: Sequence[int] | None, dtype: Any, nbytes: int | None = None,
                     device: Any = None, *, op: str | None = None,
                     reason: str = "") -> OutOfMemoryError:
    """An `OutOfMemoryError` for a failed allocation of ``shape`` elements of ``dtype``.

    Backends raise it where they allocate (``device`` may be left out there: core's dispatch
    adds the device and the op); ``nbytes`` defaults to the shape's elements times the item
    size, ``reason`` is the allocator's own message.

    Examples
    --------
    >>> from ember._errors import allocation_error
    >>> e = allocation_error((1 << 40,), "float32", device="cpu", op="full")
    >>> print(e)  # doctest: +NORMALIZE_WHITESPACE
    full: out of memory on cpu: cannot allocate 4.00 TiB (4398046511104 bytes)
    for a tensor of shape (1099511627776,) and dtype float32
    >>> isinstance(e, MemoryError), e.nbytes
    (True, 4398046511104)
    """
    name = None if dtype is None else str(getattr(dtype, "name", dtype))
    dims = None if shape is None else tuple(int(n) for n in shape)
    if nbytes is None and dims is not None and dtype is not None:
        count = 1
        for n in dims:
            count *= n
        item = getattr(dtype, "itemsize", None)
        if item is None:
            import numpy as np

            item = np.dtype(name).itemsize if name != "bfloat16" else 2
        nbytes = count * int(item)
    what = "memory" if nbytes is None else _size(nbytes)
    head = f"{op}: " if op else ""
    where = f" on {device}" if device is not None else ""
    target = "" if dims is None else f" for a tensor of shape {dims} and dtype {name}"
    tail = f" ({reason})" if reason else ""
    exc = OutOfMemoryError(f"{head}out of memory{where}: cannot allocate {what}{target}{tail}")
    exc.shape, exc.dtype, exc.nbytes, exc.reason = dims, name, nbytes, reason
    exc.device = None if device is None else str(device)
    return exc


class EmberPluginWarning(UserWarning):
    """A plugin failed to import or register and was skipped."""
