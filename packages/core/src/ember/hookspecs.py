"""Hook specifications of ember's plugin system (pluggy).

A plugin is a module named by an entry point in the group ``ember.plugins``; it implements any
of these hooks with ``@ember.hookimpl``.  Hooks run once, when ember first needs its registry
(the first device look-up), never per op.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from ._device import DecoratorSpec, DeviceSpec

hookspec = pluggy.HookspecMarker("ember")
hookimpl = pluggy.HookimplMarker("ember")

# -- devices --------------------------------------------------------------------------------


@hookspec
def ember_devices_register() -> list[DeviceSpec] | None:
    """Return the device families this plugin provides.

    Runs once at registry load.  Each `DeviceSpec` carries a cheap availability probe; a backend
    whose hardware is absent still registers and reports why it is unavailable.  Returning
    ``None`` means the plugin provides no devices.  Implemented by backend plugins.
    """


@hookspec
def ember_decorators_register() -> list[DecoratorSpec] | None:
    """Return the decorator devices (``autodiff``, ``fusion``) this plugin provides.

    Runs once at registry load.  ``None`` means none.  Implemented by decorator plugins.
    """


# -- kernels --------------------------------------------------------------------------------


@hookspec
def ember_kernels_register(backend: str) -> dict[Any, Any] | None:
    """Return extra ``{op: kernel}`` entries for the backend named ``backend``.

    Runs when a backend of that name is first created.  Lets a plugin add kernels for custom
    ops (or override a composite) on a backend it does not own.  ``None`` adds nothing.
    """


# -- conformance ----------------------------------------------------------------------------


@hookspec
def ember_conformance_skips(device: str) -> dict[str, str] | None:
    """Return ``{case-id pattern: reason}`` for conformance cases ``device`` cannot pass.

    Runs when the conformance suite collects cases for ``device`` (fnmatch patterns on case
    ids).  Each skip is reported with its reason and counted.  ``None`` declares no skips.
    """


# -- fusion ---------------------------------------------------------------------------------


@hookspec(firstresult=True)
def ember_fusion_compiler(backend: str) -> Any | None:
    """Return the fusion compiler for the primitive backend named ``backend`` (``"cpu"``).

    Runs once, when a ``fusion<...>`` device wrapping a device of that backend is created.
    The compiler is an object with ``fusible(op, dtype) -> bool`` and
    ``compile(group) -> callable``, ``group`` an `ember.backend.FusedGroup` (see
    ``ember_fusion.FusionCompiler``); the first plugin that
    returns one wins.  ``None`` means this plugin has no compiler for that backend; when no
    plugin has one, Fusion still records lazily but runs each op with the backend's own kernel.
    Implemented by backend plugins (or by ``ember_fusion`` for the backends it ships a compiler
    for).
    """
