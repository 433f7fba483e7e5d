"""`import ember` stays fast with every installed plugin: heavy libraries load on first use."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("pyopencl", "cupy", "triton", "torch", "safetensors", "sklearn", "matplotlib")


def test_import_and_cpu_work_load_no_kernel_library():
    # ember.devices() may import a plugin's library to probe its hardware; computing on the
    # cpu must not (plugins import triton, cupy, pyopencl when their device is first used)
    code = ("import sys, ember; (ember.ones(2, device='cpu') + 1).numpy(); "
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == "", f"importing ember and computing on the cpu loaded {out}"
