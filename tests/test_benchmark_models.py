"""``python -m benchmarks.models --quick``: every model trains a few steps in ember and in
PyTorch, and every ember stack's losses agree with PyTorch's."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODELS = ["gpt", "lstm", "gru", "guide", "mlp"]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs PyTorch (the peer)")
def test_quick_run_of_every_model_matches_pytorch_losses(tmp_path: Path) -> None:
    out = tmp_path / "models.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.models", "--quick", "--json",
                           str(out), *MODELS], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    checks = {c["model"]: c for c in result["checks"]}
    assert sorted(checks) == sorted(MODELS)
    for name, c in checks.items():
        assert len(c["torch_losses"]) == 5
        assert "eager" in c["diffs"], (name, c["errors"])
        # every stack that ran agrees; a stack may only be absent with its reason
        for stack in ("eager", "fused", "compiled", "compiled fused"):
            assert stack in c["diffs"] or stack in c["errors"], (name, stack)
        for stack, diff in c["diffs"].items():
            assert diff <= result["rtol"], (name, stack, diff)
    timed = {t["model"] for t in result["timings"] if t["median_ms"].get("torch", 0) > 0}
    assert timed == set(MODELS)
