"""Running a worker script on N MPI ranks (skipped, with the reason, where MPI is missing)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def mpi_missing() -> str | None:
    if shutil.which("mpirun") is None:
        return "mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"
    try:
        from mpi4py import MPI  # noqa: F401
    except ImportError as e:
        return f"mpi4py cannot load an MPI library: {e}"
    return None


def run_ranks(n: int, script: str, *args: str, timeout: float = 120,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``ember-run -n N python script args`` (mpirun underneath); its output, never raising
    on a non-zero exit (tests assert on it)."""
    from ember_distributed import mpirun_command, mpirun_env

    full_env = mpirun_env({**os.environ, "OPENBLAS_NUM_THREADS": "1",
                           "PYTHONUNBUFFERED": "1", **(env or {})})
    cmd = mpirun_command(n, [sys.executable, str(HERE / script), *args])
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout,
                          check=False)


requires_mpi = pytest.mark.skipif(mpi_missing() is not None, reason=str(mpi_missing()))
