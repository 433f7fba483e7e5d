"""ember's WebGPU backend: kernels rendered to WGSL from the kernel IR, run through wgpu-py on
Vulkan, Metal or DirectX 12.

The plugin (:mod:`ember_wgpu.plugin`) registers the ``wgpu`` device family; `WgpuBackend` is
the backend, and each kernel family lives in the module named like core's op group.  Names are
imported on first access so that plugin discovery (which imports this package) never loads
wgpu.
"""

from __future__ import annotations

from ember.backend import lazy_exports

__all__ = ["WGArray", "WgpuBackend"]


__getattr__ = lazy_exports(__name__, {"WgpuBackend": "backend", "WGArray": "runtime"})
