"""Kernels run by the interpreter compile for a real GPU (sm_90) with Triton's own compiler.

The interpreter never runs Triton's front end, which once rejected every fused kernel on the
H200 (generated helpers without a module).  These tests record real launches and compile them
in a separate process without ``TRITON_INTERPRET``, as ``nox -s conformance`` does at scale.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ember
import numpy as np

from ember_triton import _aot


def _compile(path: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(tmp / "cache")}
    return subprocess.run([sys.executable, "-m", "ember_triton._aot", str(path), "--jobs", "1"],
                          env=env, capture_output=True, text=True, timeout=600, check=False)


def test_fused_and_eager_kernels_recorded_on_the_interpreter_compile_for_sm90(
        tmp_path: Path) -> None:
    path = tmp_path / "kernels.jsonl"
    dev = ember.device("fusion<triton-interpret>")
    a = np.linspace(-2, 2, 300, dtype=np.float32)
    with _aot.record(str(path)):
        x = ember.tensor(a, device=dev)
        v = (x * 1.5 + 0.25).relu() * 0.5 - 1
        got = (v * v.sigmoid()).numpy()
        rows = ember.tensor(a.reshape(3, 100), device="triton-interpret").softmax(dim=-1)
        rows.numpy()
    w = np.maximum(a.astype(np.float64) * 1.5 + 0.25, 0) * 0.5 - 1
    np.testing.assert_allclose(got, w / (1 + np.exp(-w)), rtol=1e-5, atol=1e-6)
    specs = [json.loads(line) for line in path.read_text().splitlines()]
    origins = {(s["origin"][0], s["origin"][1]) for s in specs}
    assert ("generated", "fused") in origins  # the fused chain: one generated kernel
    assert any(o[0] == "module" for o in origins)  # the softmax row kernel
    fused = next(s for s in specs if s["origin"][1] == "fused")
    assert "def op0_" in fused["origin"][2]  # it calls generated helpers (the old failure)
    proc = _compile(path, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"{len(specs)} of {len(specs)} kernel specialisations compiled for sm_90" in proc.stdout


def test_a_kernel_the_front_end_rejects_is_reported_with_its_source(tmp_path: Path) -> None:
    bad = "@triton.jit\ndef bad(x):\n    tl.store(x, LIMIT)\n"  # reads an undefined global
    spec = {"origin": ["generated", "bad", bad], "signature": {"x": "*fp32"},
            "constexprs": {}, "options": {}}
    path = tmp_path / "kernels.jsonl"
    path.write_text(json.dumps(spec) + "\n")
    proc = _compile(path, tmp_path)
    assert proc.returncode == 1
    assert "FAILED generated bad" in proc.stdout and "LIMIT" in proc.stdout
    assert "0 of 1 kernel specialisations compiled" in proc.stdout
