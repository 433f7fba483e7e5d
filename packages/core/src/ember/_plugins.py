"""Plugin discovery: entry points of ``ember.plugins``, skip-and-warn on failure."""

from __future__ import annotations

import importlib
import os
import warnings
from collections.abc import Callable
from importlib import metadata
from types import ModuleType
from typing import Any

import pluggy

from . import hookspecs
from ._device import REGISTRY, DecoratorSpec, DeviceSpec
from ._errors import EmberPluginWarning

__all__ = ["lazy_exports", "load_plugins", "plugin_manager", "register_plugin"]

ENTRY_POINT_GROUP = "ember.plugins"
_PM: list[pluggy.PluginManager] = []


def plugin_manager() -> pluggy.PluginManager:
    if not _PM:
        pm = pluggy.PluginManager("ember")
        pm.add_hookspecs(hookspecs)
        _PM.append(pm)
    return _PM[0]


def _disabled() -> set[str]:
    return {s.strip() for s in os.environ.get("EMBER_PLUGINS_DISABLE", "").split(",") if s.strip()}


def _register_specs(name: str, module: Any) -> None:
    """Call one plugin's registration hooks and file what it returns."""
    pm = plugin_manager()
    caller = pm.subset_hook_caller
    others = [p for p in pm.get_plugins() if p is not module]
    devs = caller("ember_devices_register", others)()
    decs = caller("ember_decorators_register", others)()
    for spec in (s for group in devs if group for s in group):
        if not isinstance(spec, DeviceSpec):
            raise TypeError(f"ember_devices_register returned {spec!r}, not a DeviceSpec")
        REGISTRY.devices[spec.name] = spec if spec.plugin else _with_plugin(spec, name)
    for dspec in (s for group in decs if group for s in group):
        if not isinstance(dspec, DecoratorSpec):
            raise TypeError(f"ember_decorators_register returned {dspec!r}, not a DecoratorSpec")
        REGISTRY.decorators[dspec.name] = dspec if dspec.plugin else _with_plugin(dspec, name)


def _with_plugin(spec: Any, plugin: str) -> Any:
    from dataclasses import replace

    return replace(spec, plugin=plugin)


def register_plugin(module: ModuleType | object, name: str | None = None) -> None:
    """Register a plugin object by hand (tests, notebooks): its hooks run at once."""
    name = name or str(getattr(module, "__name__", repr(module)))
    pm = plugin_manager()
    pm.register(module, name=name)
    _register_specs(name, module)


def load_plugins() -> None:
    """Import every installed plugin once; a failing plugin is skipped with a warning."""
    if REGISTRY.loaded:
        return
    REGISTRY.loaded = True
    pm = plugin_manager()
    disabled = _disabled()
    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if ep.name in disabled or pm.has_plugin(ep.name):
            continue
        try:
            module = ep.load()
            pm.register(module, name=ep.name)
            _register_specs(ep.name, module)
        except Exception as exc:  # any failure of a third-party plugin must not stop ember
            if pm.has_plugin(ep.name):
                pm.unregister(name=ep.name)
            warnings.warn(
                f"ember plugin {ep.name!r} ({ep.value}) failed to load and was skipped: "
                f"{type(exc).__name__}: {exc}",
                EmberPluginWarning,
                stacklevel=2,
            )


def extra_kernels(backend: str) -> dict[Any, Any]:
    """Kernels other plugins add to the backend named ``backend`` (custom ops)."""
    table: dict[Any, Any] = {}
    for part in plugin_manager().hook.ember_kernels_register(backend=backend):
        if part:
            table.update(part)
    return table


def conformance_skips(device: str) -> dict[str, str]:
    """Skips declared by plugins for ``device``: ``{pattern: reason}``."""
    load_plugins()
    skips: dict[str, str] = {}
    for part in plugin_manager().hook.ember_conformance_skips(device=device):
        if part:
            skips.update(part)
    return skips


def lazy_exports(package: str, names: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for the package ``package`` that imports each of ``names``
    (``{name: submodule}``, e.g. ``{"OpenCLBackend": "backend"}``) on first access, so that
    plugin discovery, which imports the package, loads none of its heavy dependencies."""
    def __getattr__(name: str) -> Any:
        sub = names.get(name)
        if sub is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{sub}"), name)
    return __getattr__
