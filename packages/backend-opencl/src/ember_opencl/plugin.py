"""The ``opencl`` device's plugin.  ``import ember`` never imports pyopencl: the probe and the
factory do, on first use."""

from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING, Any

from ember.backend import DeviceSpec
from ember.hookspecs import hookimpl

if TYPE_CHECKING:
    from .backend import OpenCLBackend


@functools.cache
def _probe() -> tuple[bool, str]:
    try:
        from .runtime import select_devices
    except ImportError as exc:
        return False, f"pyopencl is not importable ({exc})"
    try:
        devs = select_devices()
    except Exception as exc:  # no ICD loader or platform: pyopencl raises cl.Error/LogicError
        return False, f"no OpenCL platform ({type(exc).__name__}: {exc})"
    if not devs:
        return False, "no OpenCL device found (install an ICD, e.g. Debian's pocl-opencl-icd)"
    return True, ""


def _count() -> int:
    ok, _ = _probe()
    if not ok:
        return 1
    from .runtime import select_devices

    return len(select_devices())


@hookimpl
def ember_devices_register() -> list[DeviceSpec]:
    """OpenCL devices of every platform (``EMBER_OPENCL_DEVICE=platform:device`` picks one)."""
    return [DeviceSpec(name="opencl", factory=_factory, probe=_probe, count=_count, priority=5,
                       description="OpenCL devices through pyopencl (generated OpenCL C)",
                       plugin="opencl")]


def _factory(index: int) -> OpenCLBackend:
    from .backend import OpenCLBackend
    from .fusion import register_backend

    backend = OpenCLBackend(index)
    register_backend(backend)  # so fusion<opencl:N> finds this device's runtime
    return backend


@hookimpl
def ember_fusion_compiler(backend: str) -> Any | None:
    """The generated-OpenCL-C compiler for ``fusion<opencl:N>`` (see ``ember_opencl.fusion``)."""
    # imported only when asked for opencl: ``fusion<cpu>`` must not load pyopencl
    return (importlib.import_module(".fusion", __package__).OpenCLFusionCompiler()
            if backend == "opencl" else None)


@hookimpl
def ember_conformance_skips(device: str) -> dict[str, str] | None:
    """Cases the OpenCL backend cannot pass, with reasons: none."""
    return {} if "opencl" in device else None
