"""Checks of tensor *values* (indices in range, divisors not zero) before an op uses them.

Where a backend keeps its payloads in host memory (cpu) the values are read at once: the op
raises before it runs.  A backend that sets ``record_error`` (the Triton backends) is handed
the check instead, ``record_error(values, low, high, message, exc, inside=, skip=)``: it runs
it on the device with no host sync (values outside ``[low, high)`` fail, or inside it with
``inside``; values equal to ``skip`` pass), its kernels must never read or write outside a
tensor for a bad index, and the error surfaces at the next sync (``synchronize()``,
``numpy()``, ``item()``), as PyTorch's device-side asserts do.

Inside `ember.compile`'s trace the checks are skipped: a recording cannot depend on values
(the CPU kernels still raise numpy's IndexError; GPU kernels still never leave the tensor).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ._backend import lower
from ._errors import DivisionByZeroError
from ._host import to_host
from ._trace import TRACE

if TYPE_CHECKING:
    from ._tensor import Tensor

__all__ = ["check_nonzero", "check_range", "out_of_bounds"]


_base = lower


def _host_values(t: Tensor) -> Any:
    """``t``'s values on the host: the payload itself where it is a numpy array (no copy)."""
    data = t._data
    return data if type(data) is np.ndarray else to_host(t)


def check_range(op: str, index: Tensor, low: int, high: int, message: Callable[[str], str],
                exc: type[Exception] = IndexError, skip: int | None = None) -> None:
    """Raise ``exc`` unless every value of ``index`` lies in ``[low, high)`` (or is ``skip``).

    ``message(value)`` words the error after ``"{op}: "``; ``value`` is ``" -20"`` (a space and
    the first offending extreme), or ``""`` where the backend defers the check (the value is
    not known then).
    """
    if TRACE or 0 in index._data.shape:
        return
    base = _base(index)
    if base._device.backend.record_error(base._data, low, high, f"{op}: " + message(""), exc,
                                         skip=skip):
        return
    values = _host_values(base)
    if values.size <= 256:  # Python's min/max over a list beat two numpy reductions here
        flat = values.ravel().tolist()
        if skip is not None:
            flat = [v for v in flat if v != skip] or [low]
        lo, hi = min(flat), max(flat)
    else:
        if skip is not None:
            values = values[values != skip]
            if not values.size:
                return
        lo, hi = values.min(), values.max()
    if lo < low:
        raise exc(f"{op}: " + message(f" {int(lo)}"))
    if hi >= high:
        raise exc(f"{op}: " + message(f" {int(hi)}"))


def out_of_bounds(dim: int, size: int) -> Callable[[str], str]:
    """The message of an index outside ``[-size, size)`` on axis ``dim`` (PyTorch's words)."""
    return lambda value: f"index{value} is out of bounds for dimension {dim} with size {size}"


def check_nonzero(op: str, divisor: Tensor) -> None:
    """Raise `ember.DivisionByZeroError` if any value of the integer ``divisor`` is 0."""
    if TRACE or 0 in divisor._data.shape:
        return
    base = _base(divisor)
    message = f"{op}: integer division by zero (ZeroDivisionError) in a divisor of shape " \
              f"{tuple(divisor.shape)}"
    if base._device.backend.record_error(base._data, 0, 1, message, DivisionByZeroError,
                                         inside=True):
        return
    values = _host_values(base)
    if all(values.ravel().tolist()) if values.size <= 256 else values.all():
        return
    raise DivisionByZeroError(message)
