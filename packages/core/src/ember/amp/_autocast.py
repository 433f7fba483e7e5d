"""`autocast`: run listed ops in bfloat16 / float16 (or float32) inside a region, per thread."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from .. import _dtype as dt
from .._device import _ATOM, REGISTRY, Device, _ensure_plugins, _split_decorator, device
from .._errors import DTypeError
from ._state import AUTOCAST, STATE, Frame

__all__ = ["autocast", "get_autocast_dtype", "is_autocast_enabled"]

F = TypeVar("F", bound=Callable[..., Any])

#: PyTorch's defaults: float16 on CUDA (and ROCm, which PyTorch calls cuda), bfloat16 elsewhere
_DEFAULT_DTYPE = {"cuda": dt.float16, "rocm": dt.float16}
#: (name, index, dtype) -> None once the device was found to support the dtype
_CHECKED: dict[tuple[str, int | None, dt.DType], None] = {}


def _parse(device_type: str | Device) -> tuple[str, int | None]:
    """The hardware device a ``device_type`` names: ``(name, index)``, index None for all."""
    if isinstance(device_type, Device):
        base = device_type.base
        return base.name, base.index
    if not isinstance(device_type, str):
        raise TypeError(f"autocast: device_type must be a device string or an ember.Device, "
                        f"got {type(device_type).__name__}")
    text = device_type.replace(" ", "")
    _ensure_plugins()
    while True:  # autodiff<fusion<cuda:0>> -> cuda:0
        dec = _split_decorator(text)
        if dec is None:
            break
        text = dec[1]
    m = _ATOM.match(text)
    if m is None:
        raise ValueError(f"autocast: malformed device_type {device_type!r}: expected a device "
                         "kind ('cuda'), a device ('cuda:0') or a device string "
                         "('autodiff<fusion<cuda:0>>')")
    name, idx = m.group(1), m.group(2)
    if name not in REGISTRY.devices:
        if name in REGISTRY.decorators:
            raise ValueError(f"autocast: {name!r} is a decorator, not a hardware device; give "
                             f"the device it wraps ('{name}<cuda:0>' or 'cuda')")
        known = ", ".join(sorted(REGISTRY.devices)) or "none installed"
        raise ValueError(f"autocast: unknown device type {name!r} (known: {known})")
    return name, int(idx) if idx is not None else None


def _check_support(name: str, index: int | None, dtype: dt.DType) -> None:
    """A clear error now rather than a failed cast later; skipped where the device is absent
    (no op can run there, so autocast for it does nothing)."""
    key = (name, index, dtype)
    if key in _CHECKED:
        return
    try:
        dev = device(name if index is None else f"{name}:{index}")
    except RuntimeError:  # DeviceUnavailableError, or a backend that cannot start here
        return
    if not dev.supports(dtype):
        have = [d.name for d in (dt.bfloat16, dt.float16) if dev.supports(d)]
        hint = f"; it supports {' and '.join(have)}" if have else \
            "; it supports neither bfloat16 nor float16"
        raise DTypeError(f"autocast: device {dev} does not support dtype {dtype.name}{hint}")
    _CHECKED[key] = None


class autocast:  # PyTorch's name; a class so it works as a decorator too
    """Run the ops PyTorch's autocast lists in ``dtype`` (matmul, linear, conv, attention) or
    in float32 (softmax, norms, losses, exp/log/pow, sums) inside a region.

    Parameters
    ----------
    device_type : which tensors it applies to: a device kind (``"cuda"``, ``"cpu"``,
        ``"triton-interpret"``), one device (``"cuda:0"``), a device string with decorators
        (``"autodiff<fusion<cuda:0>>"``, meaning its hardware device) or an `ember.Device`.
        An op is affected when its tensors live on that hardware device, through any
        decorators.
    dtype : ``ember.bfloat16`` or ``ember.float16``; the default is float16 on ``cuda`` and
        ``rocm`` and bfloat16 elsewhere, as in PyTorch.
    enabled : ``False`` turns autocast off for that device inside the region (nesting).
    cache_enabled : reuse a float32 parameter's low-precision cast within the region.

    The state is per thread; regions nest.  Only floating tensors are cast, never float64
    ones.  The casts are ops like any other (an autodiff device records them), so gradients
    of float32 parameters come back in float32.  See ``docs/mixed-precision.md``.

    Examples
    --------
    >>> import ember
    >>> a = ember.ones(2, 3)
    >>> with ember.autocast("cpu", dtype=ember.bfloat16):
    ...     (a @ a.T).dtype, (a @ a.T).softmax(-1).dtype
    (ember.bfloat16, ember.float32)
    """

    def __init__(self, device_type: str | Device, dtype: dt.DType | None = None,
                 enabled: bool = True, cache_enabled: bool = True) -> None:
        name, index = _parse(device_type)
        if dtype is None:
            dtype = _DEFAULT_DTYPE.get(name, dt.bfloat16)
        if dtype not in (dt.bfloat16, dt.float16):
            shown = dtype.name if isinstance(dtype, dt.DType) else repr(dtype)
            raise DTypeError(f"autocast: dtype must be ember.bfloat16 or ember.float16, got "
                             f"{shown}")
        enabled = bool(enabled)
        if enabled:
            _check_support(name, index, dtype)
        self.device_type = device_type
        self.dtype = dtype
        self.enabled = enabled
        self.cache_enabled = bool(cache_enabled)
        self._frame = Frame(name, index, dtype, enabled, self.cache_enabled)
        self._prev: list[tuple[tuple[Frame, ...], object | None]] = []

    def __enter__(self) -> autocast:
        st = STATE
        token = object() if self.enabled else None
        self._prev.append((st.frames, token))
        st.frames = (*st.frames, self._frame)
        st.resolved = {}
        if token is not None:
            AUTOCAST.append(token)
        return self

    def __exit__(self, *exc: object) -> None:
        st = STATE
        frames, token = self._prev.pop()
        st.frames = frames
        st.resolved = {}
        if token is not None:
            AUTOCAST.remove(token)
        if not frames:
            st.cache.clear()

    def __call__(self, fn: F) -> F:
        args = (self.device_type, self.dtype, self.enabled, self.cache_enabled)

        @wraps(fn)
        def run(*a: Any, **kw: Any) -> Any:
            with autocast(*args):
                return fn(*a, **kw)

        return run  # type: ignore[return-value]  # same signature as fn

    def __repr__(self) -> str:
        return (f"ember.autocast({str(self.device_type)!r}, dtype=ember.{self.dtype.name}, "
                f"enabled={self.enabled}, cache_enabled={self.cache_enabled})")


def _lookup(device_type: str | Device | None) -> Frame | None:
    frames = STATE.frames
    if device_type is None:
        return next((f for f in reversed(frames) if f.enabled), None)
    name, index = _parse(device_type)
    return next((f for f in reversed(frames) if f.matches(name, index)), None)


def is_autocast_enabled(device_type: str | Device | None = None) -> bool:
    """Whether ops on ``device_type`` are autocast in this thread (any device when None).

    Examples
    --------
    >>> import ember
    >>> with ember.autocast("cpu"):
    ...     ember.is_autocast_enabled("cpu"), ember.is_autocast_enabled("opencl")
    (True, False)
    """
    f = _lookup(device_type)
    return f is not None and f.enabled


def get_autocast_dtype(device_type: str | Device) -> dt.DType:
    """The dtype autocast uses for ``device_type`` here: the innermost region's, or the default
    (float16 on ``cuda``/``rocm``, bfloat16 elsewhere) outside any region."""
    f = _lookup(device_type)
    if f is not None:
        return f.dtype
    return _DEFAULT_DTYPE.get(_parse(device_type)[0], dt.bfloat16)
