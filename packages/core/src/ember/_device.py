"""Devices, device strings and the registry that plugins fill.

A device string is ``name[:index]`` wrapped by decorators: ``autodiff<fusion<cpu>>``.
``str(device)`` round-trips, and equal strings give the same `Device` object.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._errors import DeviceUnavailableError
from ._trace import ON_TRACING, TRACE

if TYPE_CHECKING:
    from ._backend import Backend
    from ._dtype import DType

__all__ = ["Device", "DeviceInfo", "DeviceSpec", "DecoratorSpec", "device", "devices"]


@dataclass(frozen=True)
class DeviceSpec:
    """What a plugin registers for a family of devices (``cpu``, ``opencl``, ``cuda``).

    ``factory(index)`` builds the backend; ``probe()`` returns ``(available, reason)`` and must
    be cheap (no heavy imports); ``count()`` how many indices exist (1 when unknown);
    ``describe(index)``, where given, what index ``index`` is (an adapter's name and API), listed
    by `ember.devices` in place of ``description`` when not empty (asked only of an available
    family).
    """

    name: str
    factory: Callable[[int], Backend]
    probe: Callable[[], tuple[bool, str]] = lambda: (True, "")
    count: Callable[[], int] = lambda: 1
    priority: int = 0
    description: str = ""
    plugin: str = ""
    indexed: bool = True
    describe: Callable[[int], str] | None = None


@dataclass(frozen=True)
class DecoratorSpec:
    """A decorator device (``autodiff``, ``fusion``): ``factory(inner_device, **options)``.

    With ``opaque=True`` the text between the brackets is not a local device: it is handed to
    the factory as it is, ``factory(text, **options)``, and the device is a leaf of the local
    stack (``remote<HOST:PORT/INNER>``, whose inner device lives on another machine).
    """

    name: str
    factory: Callable[..., Backend]
    description: str = ""
    plugin: str = ""
    opaque: bool = False


@dataclass(frozen=True)
class DeviceInfo:
    """One row of :func:`ember.devices`."""

    name: str
    kind: str  # "device" or "decorator"
    available: bool
    reason: str = ""
    description: str = ""
    plugin: str = ""

    def __str__(self) -> str:
        state = "available" if self.available else f"unavailable: {self.reason}"
        return f"{self.name:<22} {self.kind:<9} {state}"


@dataclass
class _Registry:
    devices: dict[str, DeviceSpec] = field(default_factory=dict)
    decorators: dict[str, DecoratorSpec] = field(default_factory=dict)
    loaded: bool = False


REGISTRY = _Registry()
_LOCK = threading.RLock()
_CACHE: dict[str, Device] = {}
LOG = logging.getLogger("ember.device")

#: ember's own device families and decorators: ``name -> (distribution, core extra, folder of
#: the clone, entry-point name)``, so that an unknown name says which package to install.
#: ``tests/core/test_install_hints.py`` checks it against every ``pyproject.toml``.
PROVIDERS: dict[str, tuple[str, str | None, str, str]] = {
    "cpu": ("ember-backend-cpu", "cpu", "packages/backend-cpu", "cpu"),
    "opencl": ("ember-backend-opencl", "opencl", "packages/backend-opencl", "opencl"),
    "wgpu": ("ember-backend-wgpu", "wgpu", "packages/backend-wgpu", "wgpu"),
    "cuda": ("ember-backend-cuda", "cuda", "packages/backend-cuda", "cuda"),
    "rocm": ("ember-backend-rocm", "rocm", "packages/backend-rocm", "rocm"),
    "triton-interpret": ("ember-triton", "triton", "packages/triton", "triton"),
    "autodiff": ("ember-autodiff", "autodiff", "packages/autodiff", "autodiff"),
    "fusion": ("ember-fusion", "fusion", "packages/fusion", "fusion"),
    "remote": ("ember-remote", "remote", "packages/remote", "remote"),
    "numpyref": ("ember-backend-numpyref", None, "examples/third-party-backend", "numpyref"),
}


def install_hint(name: str) -> str:
    """What to install for the device family or decorator ``name``, or ``""`` if not ember's.

    Examples
    --------
    >>> from ember._device import install_hint
    >>> "ember-fusion" in install_hint("fusion"), install_hint("myfpga")
    (True, '')
    """
    provider = PROVIDERS.get(name)
    if provider is None:
        return ""
    dist, extra, folder, entry_point = provider
    from importlib import metadata

    try:
        metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        pip = f'pip install "ember[{extra}]", or ' if extra else ""
        return f"it is provided by {dist}: {pip}from a clone: pip install -e {folder}"
    disabled = os.environ.get("EMBER_PLUGINS_DISABLE", "")
    if entry_point in {s.strip() for s in disabled.split(",")}:
        return (f"{dist} is installed, but EMBER_PLUGINS_DISABLE={disabled!r} turns its plugin "
                f"{entry_point!r} off")
    return (f"{dist} is installed, but its plugin {entry_point!r} did not register (an "
            f"EmberPluginWarning says why)")


def _unknown(what: str, known: str, name: str) -> str:
    hint = install_hint(name)
    return f"{what} (known: {known}); {hint}" if hint else f"{what} (known: {known})"


def _ensure_plugins() -> None:
    if not REGISTRY.loaded:
        from ._plugins import load_plugins

        load_plugins()


class Device:
    """A device handle: a backend, or a decorator wrapping an inner device.

    Examples
    --------
    >>> import ember
    >>> d = ember.device("cpu")
    >>> str(d), d.supports(ember.float64)
    ('cpu', True)
    """

    __slots__ = ("__weakref__", "_backend", "dispatch", "dispatch_binary", "implements",
                 "index", "inner", "name", "options", "target", "tensor_type")

    name: str
    index: int | None
    inner: Device | None
    options: dict[str, Any]
    #: the bracketed text of an opaque decorator (``HOST:PORT/cpu`` of ``remote<...>``)
    target: str | None

    def __init__(self, name: str, index: int | None, inner: Device | None,
                 backend: Backend, options: dict[str, Any] | None = None,
                 target: str | None = None) -> None:
        from ._backend import Decorator
        from ._tensor import Tensor

        self.name = name
        self.index = index
        self.inner = inner
        self.options = dict(options or {})
        self.target = target
        self._backend = backend
        # bound once so that per-op dispatch is a single attribute look-up
        self.dispatch = backend.dispatch
        if isinstance(backend, Decorator):
            _DECORATING.add(self)
            if TRACE:
                self.dispatch = backend.dispatch_noting
        #: the backend's fast path of eager binary ops, or ``None`` (`Backend.dispatch_binary`)
        self.dispatch_binary = backend.dispatch_binary
        #: ``implements(op)``: whether a composite op runs as this device's own kernel
        self.implements = backend.implements
        self.tensor_type: type[Tensor] = backend.tensor_type
        backend.device = self

    @property
    def backend(self) -> Backend:
        """The backend object that executes ops for this device."""
        return self._backend

    @property
    def is_decorator(self) -> bool:
        return self.inner is not None

    @property
    def base(self) -> Device:
        """The innermost (hardware) device of a decorator stack."""
        d = self
        while d.inner is not None:
            d = d.inner
        return d

    def supports(self, dtype: DType) -> bool:
        """Whether tensors of ``dtype`` can live on this device."""
        return self._backend.supports(dtype)

    def synchronize(self) -> None:
        """Wait until every op queued on this device has finished."""
        self._backend.synchronize()

    def __str__(self) -> str:
        if self.inner is not None or self.target is not None:
            opts = "".join(f",{k}={v}" for k, v in sorted(self.options.items()))
            return f"{self.name}<{self.inner if self.target is None else self.target}{opts}>"
        return self.name if self.index is None else f"{self.name}:{self.index}"

    def __repr__(self) -> str:
        return f"device({str(self)!r})"

    def __reduce__(self) -> tuple[Callable[[str], Device], tuple[str]]:
        return device, (str(self),)


_ATOM = re.compile(r"^([A-Za-z_][\w\-]*)(?::(\d+))?$")


def _split_decorator(text: str) -> tuple[str, str, dict[str, Any]] | None:
    lt = text.find("<")
    if lt < 0:
        return None
    if not text.endswith(">"):
        raise ValueError(f"malformed device string {text!r}: a decorator needs a closing '>'")
    name = text[:lt].strip()
    body = text[lt + 1:-1]
    # options follow the inner device after a top-level comma: autodiff<cpu,checkpointing=True>
    depth, cut = 0, len(body)
    for i, ch in enumerate(body):
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "," and depth == 0:
            cut = i
            break
    options: dict[str, Any] = {}
    for item in filter(None, (s.strip() for s in body[cut + 1:].split(","))):
        key, _, raw = item.partition("=")
        options[key.strip()] = _parse_option(raw.strip())
    return name, body[:cut].strip(), options


def _parse_option(raw: str) -> Any:
    low = raw.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(raw)
    except ValueError:
        return raw


def _build(text: str) -> Device:
    dec = _split_decorator(text)
    if dec is not None:
        name, inner_text, options = dec
        spec = REGISTRY.decorators.get(name)
        if spec is None:
            known = ", ".join(sorted(REGISTRY.decorators)) or "none installed"
            raise ValueError(_unknown(f"unknown decorator {name!r} in device {text!r}", known,
                                      name))
        if spec.opaque:  # the text names something elsewhere: the factory reads it
            return Device(name, None, None, spec.factory(inner_text, **options), options,
                          target=inner_text)
        inner = device(inner_text)
        backend = spec.factory(inner, **options)
        return Device(name, None, inner, backend, options)
    m = _ATOM.match(text)
    if m is None:
        raise ValueError(f"malformed device string {text!r}: expected name[:index]")
    name, idx = m.group(1), m.group(2)
    dspec = REGISTRY.devices.get(name)
    if dspec is None:
        known = ", ".join(sorted(REGISTRY.devices)) or "none installed"
        raise ValueError(_unknown(f"unknown device {name!r}", known, name))
    index = int(idx) if idx is not None else (0 if dspec.indexed else None)
    ok, reason = dspec.probe()
    if not ok:
        raise DeviceUnavailableError(f"device {text!r} is unavailable: {reason}")
    if index is not None and index >= dspec.count():
        existing = ", ".join(f"{name}:{i}" for i in range(dspec.count()))
        raise DeviceUnavailableError(
            f"device {text!r} is unavailable: index {index} out of range "
            f"({dspec.count()} {name} device(s): {existing})")
    return Device(name, index, None, dspec.factory(index if index is not None else 0))


def device(spec: str | Device | None = None) -> Device:
    """Resolve a device string (or None for the default device) to a `Device`.

    Examples
    --------
    >>> import ember
    >>> ember.device("cpu")
    device('cpu')
    """
    if isinstance(spec, Device):
        return spec
    if spec is None:
        return default_device()
    if not isinstance(spec, str):
        raise TypeError(f"expected a device string or ember.Device, got {type(spec).__name__}")
    key = spec.replace(" ", "")
    dev = _CACHE.get(key)
    if dev is not None:
        return dev
    with _LOCK:
        _ensure_plugins()
        dev = _CACHE.get(key)
        if dev is None:
            dev = _build(key)
            _CACHE[key] = dev
            _CACHE[str(dev)] = dev
    return dev


_DEFAULT: list[Device] = []
_LOCAL = threading.local()

#: the decorator devices: while `ember.compile` traces, their ``dispatch`` is the backend's
#: `Decorator.dispatch_noting`, which shows the trace the tensors they see (candidate holders
#: of the program's external payloads); otherwise the backend's own ``dispatch``, untaxed
_DECORATING: weakref.WeakSet[Device] = weakref.WeakSet()


def _tracing(on: bool) -> None:
    for dev in list(_DECORATING):
        backend: Any = dev.backend
        dev.dispatch = backend.dispatch_noting if on else backend.dispatch


ON_TRACING.append(_tracing)


def default_device() -> Device:
    """The device new tensors go to, overridable per thread with :func:`use_device`.

    ``EMBER_DEVICE`` when set (an error if it names no usable device); otherwise ``cpu``; and
    where ``cpu`` is not installed or not available, the best available device: the highest
    ``DeviceSpec.priority`` (cuda 20, rocm 15, opencl 5, wgpu 4, cpu 0, triton-interpret -10),
    said once on the ``ember.device`` logger.

    Examples
    --------
    >>> import ember
    >>> ember.default_device()
    device('cpu')
    """
    local = getattr(_LOCAL, "stack", None)
    if local:
        return local[-1]  # type: ignore[no-any-return]  # list of Device, set by use_device
    if not _DEFAULT:
        with _LOCK:
            if not _DEFAULT:
                env = os.environ.get("EMBER_DEVICE", "")
                _DEFAULT.append(device(env) if env else _best_default())
    return _DEFAULT[0]


def _best_default() -> Device:
    """``cpu`` where it is usable, else the available device of highest priority (logged)."""
    _ensure_plugins()
    cpu = REGISTRY.devices.get("cpu")
    if cpu is not None:
        ok, reason = _probe(cpu)
        if ok:
            return device("cpu")
        why = f"the 'cpu' device is unavailable: {reason}"
    else:
        why = f"there is no 'cpu' device ({install_hint('cpu')})"
    tried: list[str] = []
    for spec in sorted(REGISTRY.devices.values(), key=lambda s: (-s.priority, s.name)):
        if spec is cpu:
            continue
        ok, reason = _probe(spec)
        if ok:
            try:
                dev = device(f"{spec.name}:0" if spec.indexed else spec.name)
            except DeviceUnavailableError as exc:
                reason = str(exc)
            else:
                LOG.warning("ember: the default device is %r because %s; EMBER_DEVICE chooses "
                            "another", str(dev), why)
                return dev
        tried.append(f"{spec.name} ({reason})")
    others = ", ".join(tried) or "none installed"
    raise DeviceUnavailableError(
        f"no device can be the default device: {why}; other devices: {others}")


def _probe(spec: DeviceSpec) -> tuple[bool, str]:
    """``(available, reason)``; a probe that raises counts as unavailable."""
    try:
        ok, reason = spec.probe()
    except Exception as exc:  # a probe must never take ember down
        return False, f"probe failed: {type(exc).__name__}: {exc}"
    return bool(ok), reason or ("" if ok else "no reason given")


@contextmanager
def use_device(spec: str | Device) -> Iterator[Device]:
    """Make ``spec`` the default device inside a ``with`` block (per thread)."""
    dev = device(spec)
    stack = getattr(_LOCAL, "stack", None)
    if stack is None:
        stack = _LOCAL.stack = []
    stack.append(dev)
    try:
        yield dev
    finally:
        stack.pop()


def devices() -> list[DeviceInfo]:
    """Every registered device family and decorator, with availability and reasons.

    Examples
    --------
    >>> import ember
    >>> any(d.name == "cpu" and d.available for d in ember.devices())
    True
    """
    _ensure_plugins()
    rows: list[DeviceInfo] = []
    for spec in sorted(REGISTRY.devices.values(), key=lambda s: (-s.priority, s.name)):
        try:
            ok, reason = spec.probe()
        except Exception as exc:  # a probe must never take ember down
            ok, reason = False, f"probe failed: {type(exc).__name__}: {exc}"
        n = spec.count() if ok else 1
        names = [f"{spec.name}:{i}" for i in range(n)] if spec.indexed else [spec.name]
        for i, name in enumerate(names):
            about = ""
            if ok and spec.describe is not None:
                try:
                    about = spec.describe(i)
                except Exception:  # a description must never take ember down either
                    about = ""
            rows.append(DeviceInfo(name, "device", ok, reason, about or spec.description,
                                   spec.plugin))
    for dspec in sorted(REGISTRY.decorators.values(), key=lambda s: s.name):
        rows.append(DeviceInfo(f"{dspec.name}<...>", "decorator", True, "",
                               dspec.description, dspec.plugin))
    return rows
