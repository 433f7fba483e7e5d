"""The plugin module named by the entry point: it registers the device and declares skips.

Keep this module cheap to import: ember imports every plugin at start-up.  The backend module
(and anything heavy it needs) is imported only when the device is first used.
"""

from __future__ import annotations

from typing import Any

import ember
from ember import DeviceSpec


def _factory(index: int) -> Any:
    from .backend import NumpyRefBackend

    return NumpyRefBackend()


def _probe() -> tuple[bool, str]:
    """Cheap availability check: a GPU backend would look for its driver here."""
    try:
        import numpy  # noqa: F401  # the only thing this backend needs
    except ImportError:
        return False, "numpy is not installed"
    return True, ""


@ember.hookimpl
def ember_devices_register() -> list[DeviceSpec]:
    return [DeviceSpec(name="numpyref", factory=_factory, probe=_probe, indexed=False,
                       description="reference backend on plain numpy (example plugin)",
                       plugin="numpyref")]


@ember.hookimpl
def ember_conformance_skips(device: str) -> dict[str, str] | None:
    """Conformance cases this backend knowingly fails, each with the reason (fnmatch ids)."""
    if "numpyref" not in device:
        return None
    return {
        "interpolate-*-align_corners-*": "interpolate(align_corners=True) is not written yet",
    }
