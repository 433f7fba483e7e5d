"""`import ember` stays fast with every installed plugin: heavy libraries load on first use."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("pyopencl", "cupy", "triton", "torch", "safetensors", "sklearn", "matplotlib")


def test_import_and_registry_load_no_kernel_library():
    code = ("import sys, ember; ember.devices(); "
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == "", f"importing ember and listing devices loaded {out}"
