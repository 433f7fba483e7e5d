"""The NCCL engine's collectives on 2 GPUs (``ember-run --launcher spawn``), against numpy.

Skipped, with the reason, without CuPy or without two CUDA devices (CI has neither).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cases import expected, keys
from conftest import HERE


def _gpus_missing() -> str | None:
    try:
        import cupy  # noqa: TID251  # the GPU test of the NCCL engine
    except ImportError:
        return "CuPy is not installed (the NCCL engine needs cupy-cuda12x or -13x)"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # no driver: CUDARuntimeError and friends
        return f"no CUDA device: {e}"
    if count < 2:
        return f"the NCCL test needs 2 GPUs, this machine has {count}"
    from cupy.cuda import nccl  # noqa: TID251  # (as above)

    if not getattr(nccl, "available", False):
        return "CuPy was built without NCCL"
    return None


pytestmark = pytest.mark.skipif(_gpus_missing() is not None, reason=str(_gpus_missing()))


def test_nccl_collectives_match_numpy_on_two_gpus(tmp_path: Path) -> None:
    cmd = [str(Path(sys.executable).with_name("ember-run")), "-n", "2", "--launcher", "spawn",
           sys.executable, str(HERE / "collectives_worker.py"), str(tmp_path), "cuda"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "EMBER_DIST_TIMEOUT": "60"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    per_rank = [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(2)]
    for key in keys(["cuda"]):
        parts = key.split("-")
        kind, dt = parts[0], parts[-2]
        arg = parts[1] if len(parts) == 4 else ""
        for rank, res in enumerate(per_rank):
            want = expected(kind, arg, dt, 2, rank)
            if dt.startswith("int"):
                np.testing.assert_array_equal(res[key], want, err_msg=f"{key} rank {rank}")
            else:
                np.testing.assert_allclose(res[key], want, rtol=1e-6, atol=1e-6,
                                           err_msg=f"{key} rank {rank}")
    assert [res["barrier-seen"].tolist() for res in per_rank] == [[0, 1], [0, 1]]
