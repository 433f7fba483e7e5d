"""The guide (``examples/guide/train.py``: the CNN on 8x8 digits, seed 0, early stopping)
trains on ``autodiff<wgpu:0>`` to the test accuracy it reaches on ``autodiff<cpu>``, within
one percentage point; each run in a process of its own, as a user starts it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

GUIDE = Path(__file__).resolve().parents[3] / "examples" / "guide"


def _train(device: str, artifacts: Path) -> float:
    run = subprocess.run(
        [sys.executable, str(GUIDE / "train.py"), "--device", device, "--artifacts",
         str(artifacts), "--plain"],
        capture_output=True, text=True, timeout=1200, check=False,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    assert run.returncode == 0, f"{device}: {run.stdout[-3000:]}{run.stderr[-3000:]}"
    assert json.loads((artifacts / "config.json").read_text())["learner"]["device"] == device
    return float(json.loads((artifacts / "test_metrics.json").read_text())["accuracy"])


def test_the_guide_trains_on_wgpu_to_the_cpus_accuracy(wg_device: Any, tmp_path: Path) -> None:
    cpu = _train("autodiff<cpu>", tmp_path / "cpu")
    wgpu = _train("autodiff<wgpu:0>", tmp_path / "wgpu")
    assert cpu > 0.95, f"the CPU run, the reference, reached only {cpu:.4f}"
    assert abs(wgpu - cpu) <= 0.01, f"wgpu:0 {wgpu:.4f} against cpu {cpu:.4f}"
