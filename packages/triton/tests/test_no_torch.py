"""The Triton path never imports PyTorch: run it with torch made unimportable."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

BLOCKER = textwrap.dedent("""
    import sys

    class NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError("torch is blocked by this test")
            return None

    sys.meta_path.insert(0, NoTorch())
""")

PROGRAM = BLOCKER + textwrap.dedent("""
    import numpy as np
    import ember

    d = ember.device("triton-interpret")
    x = ember.tensor(np.arange(6.0).reshape(2, 3), device=d)
    y = ((x @ x.T).softmax(dim=-1) + ember.rand((2, 2), device=d)).sum().item()
    assert np.isfinite(y)
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("the blocker let torch through")
    print("torch" in sys.modules)
""")


def test_interpreter_path_runs_with_torch_unimportable() -> None:
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "False"
