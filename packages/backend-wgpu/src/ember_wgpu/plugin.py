"""The ``wgpu`` device's plugin.  ``import ember`` never imports wgpu: the probe and the
factory do, on first use.

``wgpu:0`` is the adapter wgpu-native picks for ``power_preference="high-performance"``; the
other compute-capable adapters follow (`ember_wgpu.runtime.adapters`).  Without the ``wgpu``
package, a Vulkan loader or any adapter the family is registered and unavailable, with the
reason.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from ember.backend import DeviceSpec
from ember.hookspecs import hookimpl

if TYPE_CHECKING:
    from .backend import WgpuBackend


@functools.cache
def _adapters() -> tuple[Any, ...]:
    from .runtime import adapters

    return tuple(adapters())


@functools.cache
def _probe() -> tuple[bool, str]:
    try:
        import wgpu  # noqa: F401  # the probe's question: is it importable at all
    except (ImportError, OSError) as exc:  # OSError: wgpu-native's library failed to load
        return False, f"wgpu is not importable ({type(exc).__name__}: {exc})"
    try:
        found = _adapters()
    except Exception as exc:  # no Vulkan/Metal/DX12 loader: wgpu-native raises while asking
        return False, f"no WebGPU adapter ({type(exc).__name__}: {exc})"
    if not found:
        return False, ("no WebGPU adapter found (on Debian: apt-get install mesa-vulkan-drivers "
                       "libvulkan1 gives a software Vulkan one)")
    return True, ""


def _count() -> int:
    ok, _ = _probe()
    return len(_adapters()) if ok else 1


def _describe(index: int) -> str:
    from .runtime import describe

    ok, _ = _probe()
    return describe(_adapters()[index]) if ok else ""


def _factory(index: int) -> WgpuBackend:
    from .backend import WgpuBackend

    found = _adapters()
    if not 0 <= index < len(found):
        from .runtime import describe

        listed = "; ".join(f"wgpu:{i} = {describe(a)}" for i, a in enumerate(found)) or "none"
        raise IndexError(f"no WebGPU adapter wgpu:{index}; adapters: {listed}")
    from .fusion import register_backend

    backend = WgpuBackend(found[index], index)
    register_backend(backend)  # so fusion<wgpu:N> finds this device's runtime
    return backend


@hookimpl
def ember_devices_register() -> list[DeviceSpec]:
    """WebGPU adapters through wgpu-py (Vulkan, Metal, DirectX 12)."""
    return [DeviceSpec(name="wgpu", factory=_factory, probe=_probe, count=_count, priority=4,
                       description="WebGPU adapters through wgpu-py (kernels rendered to WGSL)",
                       plugin="wgpu", describe=_describe)]


@hookimpl
def ember_fusion_compiler(backend: str) -> Any | None:
    """The generated-WGSL compiler for ``fusion<wgpu:N>`` (see ``ember_wgpu.fusion``)."""
    if backend != "wgpu":
        return None
    from .fusion import WgpuFusionCompiler

    return WgpuFusionCompiler()


@hookimpl
def ember_conformance_skips(device: str) -> dict[str, str] | None:
    """Cases the WebGPU backend cannot pass yet, with reasons."""
    if "wgpu" not in device:
        return None
    from .backend import SKIPS

    return dict(SKIPS)
