"""Run a command with ember's packages importable from this checkout (no install), the way
``check.py`` runs the conformance suite:

    python benchmarks/gpu/with_env.py python -m pytest packages/backend-cuda/tests -q
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check import workspace_env


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        return subprocess.run(argv, env=workspace_env(Path(tmp)), check=False).returncode


def as_child(script: str, child: Callable[[], None]) -> None:
    """``python script`` runs ``child()`` in a new process with the workspace on the path (the
    process re-runs ``script`` with ``--child``)."""
    if "--child" in sys.argv:
        child()
        return
    sys.exit(main([sys.executable, script, "--child"]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
