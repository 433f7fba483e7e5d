"""A process that imported Triton compiled first cannot run the interpreter device: creating
``triton-interpret`` then says so as a `DeviceUnavailableError` (what test suites and
`ember.devices()` treat as an absent device), never as a half-working device."""

from __future__ import annotations

import os
import subprocess
import sys

PROGRAM = r'''
import os
os.environ.pop("TRITON_INTERPRET", None)
import triton.language  # compiled mode
import ember
try:
    ember.device("triton-interpret")
except ember.DeviceUnavailableError as exc:
    print("unavailable:", exc)
else:
    print("created")
'''


def test_the_interpreter_device_is_unavailable_after_a_compiled_triton_import() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "unavailable:" in proc.stdout, proc.stdout
    assert "triton was imported in compiled mode" in proc.stdout
