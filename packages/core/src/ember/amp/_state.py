"""Autocast's per-thread state, and the casts an op's inputs get under it.

Hot paths test :data:`AUTOCAST` with one global look-up (``if AUTOCAST:``): the list is empty
unless some thread is inside an enabled `ember.autocast` region, so outside autocast an op
pays nothing more.  Inside, :func:`autocast_inputs` reads the op's policy (one dict look-up,
`ember.amp._policy.POLICY`) and the setting of the tensors' device (one more, cached per
device until the next region is entered or left) and casts the floating inputs.

The weight-cast cache: a float32 leaf that requires grad (a parameter being trained) cast to
the low dtype is cast once per region and reused, as PyTorch does.  An entry is used only
while the parameter still holds the payload it was cast from (an optimizer step or any
in-place update gives the parameter a new payload, so the entry is dropped) and while the
cast's graph node has not been freed by a ``backward()``; the cache is bypassed while
`ember.compile` traces (a replay must cast the parameter's current value) and emptied when
the outermost region exits.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import _dtype as dt
from .._grad_mode import STATE as GRAD
from .._trace import TRACE
from ._policy import FLOAT32, LOWER, POLICY

if TYPE_CHECKING:
    from .._device import Device
    from .._tensor import Tensor

__all__ = ["AUTOCAST", "STATE", "Frame", "autocast_inputs", "guard_key", "setting"]

#: one token per enabled autocast region open in any thread (a list: one global look-up)
AUTOCAST: list[object] = []


class Frame(NamedTuple):
    """One open `ember.autocast` region: which hardware devices, which dtype, on or off."""

    name: str  # base device name: "cuda", "cpu", "triton-interpret"
    device_index: int | None  # None: every device of that name
    dtype: dt.DType
    enabled: bool
    cache: bool

    def matches(self, name: str, index: int | None) -> bool:
        return self.name == name and (self.device_index is None or self.device_index == index)


class _State(threading.local):
    """This thread's open regions, innermost last; settings resolved per device; the cache."""

    def __init__(self) -> None:
        self.frames: tuple[Frame, ...] = ()
        #: device -> (dtype, cache_enabled), or None where autocast is off for it
        self.resolved: dict[Device, tuple[dt.DType, bool] | None] = {}
        #: (id(param), dtype) -> (param, its payload when cast, the cast tensor)
        self.cache: dict[tuple[int, dt.DType], tuple[Tensor, Any, Tensor]] = {}


STATE = _State()
_HALF = (dt.float16, dt.bfloat16)


def _resolve(device: Device) -> tuple[dt.DType, bool] | None:
    base = device.base
    found: tuple[dt.DType, bool] | None = None
    for f in reversed(STATE.frames):
        if f.matches(base.name, base.index):
            found = (f.dtype, f.cache) if f.enabled else None
            break
    STATE.resolved[device] = found
    return found


def setting(device: Device) -> tuple[dt.DType, bool] | None:
    """``(dtype, cache_enabled)`` where autocast applies to ``device`` in this thread, else None."""
    if device in STATE.resolved:
        return STATE.resolved[device]
    return _resolve(device)


_MISSING: Any = object()


def guard_key() -> tuple[Frame, ...]:
    """What `ember.compile` adds to its guard: this thread's open regions."""
    return STATE.frames


def autocast_inputs(key: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` (tensors, or None for absent optional inputs) cast as ``POLICY[key]`` says.

    Called only while :data:`AUTOCAST` is non-empty.  Returns ``args`` itself when nothing
    is cast (the op is not listed, autocast is off for the device, nothing is floating).
    """
    rule = POLICY.get(key)
    if rule is None:
        return args
    first = args[0]
    if first is None:
        first = next((a for a in args if a is not None), None)
        if first is None:
            return args
    st = STATE
    s = st.resolved.get(first._device, _MISSING)
    if s is _MISSING:
        s = _resolve(first._device)
    if s is None:
        return args
    dtype, cache = s
    if rule is LOWER:
        for a in args:
            if a is not None and a._dtype is not dtype and a._dtype.kind == "f" \
                    and a._dtype is not dt.float64:
                break
        else:
            return args
        return tuple(a if a is None or a._dtype is dtype or a._dtype.kind != "f"
                     or a._dtype is dt.float64 else _lower(a, dtype, cache, st)
                     for a in args)
    if rule is FLOAT32:
        for a in args:
            if a is not None and a._dtype in _HALF:
                break
        else:
            return args
        return tuple(_cast(a, dt.float32) if a is not None and a._dtype in _HALF else a
                     for a in args)
    # PROMOTE: the widest floating dtype among the inputs
    floats = {a._dtype for a in args if a is not None and a._dtype.kind == "f"}
    if len(floats) < 2:
        return args
    widest = dt.float16
    for d in floats:
        widest = dt.promote_types(widest, d)
    return tuple(_cast(a, widest) if a is not None and a._dtype.kind == "f" else a
                 for a in args)


def _lower(a: Tensor, dtype: dt.DType, cache: bool, st: _State) -> Tensor:
    """``a`` cast to the autocast dtype, through the weight-cast cache where it applies."""
    if not (cache and a._dtype is dt.float32 and a.requires_grad and GRAD.enabled
            and not TRACE and getattr(a, "is_leaf", False)):
        return _cast(a, dtype)
    key = (id(a), dtype)
    entry = st.cache.get(key)
    if entry is not None and entry[0] is a and entry[1] is a._data:
        out = entry[2]
        node = getattr(out, "grad_fn", None)
        if node is None or getattr(node, "parents", ()) is not None:  # not freed by backward
            return out
    out = _cast(a, dtype)
    st.cache[key] = (a, a._data, out)
    return out


def _cast(a: Tensor, dtype: dt.DType) -> Tensor:
    from .._apply import cast

    return cast(a, dtype)
