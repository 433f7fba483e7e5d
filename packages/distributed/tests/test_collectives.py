"""Every collective of the MPI engine on 2 and 3 ranks, against numpy on the same inputs."""

from __future__ import annotations

import numpy as np
import pytest
from cases import DTYPES, OPS, expected, keys
from conftest import requires_mpi, run_ranks

import ember

pytestmark = requires_mpi


def _devices() -> list[str]:
    devs = ["cpu"]
    try:
        ember.device("opencl:0")
        devs.append("opencl:0")
    except Exception:  # absent or unavailable OpenCL: the cpu cases still run
        pass
    return devs


DEVICES = _devices()


@pytest.fixture(scope="module", params=[2, 3], ids=["2ranks", "3ranks"])
def results(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
            ) -> tuple[int, list[dict[str, np.ndarray]]]:
    n = request.param
    out = tmp_path_factory.mktemp(f"collectives{n}")
    proc = run_ranks(n, "collectives_worker.py", str(out), *DEVICES)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    per_rank = [dict(np.load(out / f"rank{r}.npz")) for r in range(n)]
    for r, res in enumerate(per_rank):
        assert res["world"].tolist() == [r, n]
    return n, per_rank


CASES = [k for k in keys(DEVICES)]


@pytest.mark.parametrize("key", CASES)
def test_collective_matches_numpy_on_every_rank(
        results: tuple[int, list[dict[str, np.ndarray]]], key: str) -> None:
    n, per_rank = results
    parts = key.split("-")
    kind, dev = parts[0], parts[-1]
    dt = parts[-2]
    arg = parts[1] if len(parts) == 4 else ""
    for rank, res in enumerate(per_rank):
        want = expected(kind, arg, dt, n, rank)
        got = res[key]
        assert got.dtype == np.dtype(dt), (key, rank)
        assert got.shape == want.shape, (key, rank)
        tol = 1e-6 if dt == "float32" else 1e-13
        if dt.startswith("int"):
            np.testing.assert_array_equal(got, want, err_msg=f"{key} on rank {rank}")
        else:
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol,
                                       err_msg=f"{key} on rank {rank} of {n} ({dev})")


def test_every_case_was_run(results: tuple[int, list[dict[str, np.ndarray]]]) -> None:
    _, per_rank = results
    for res in per_rank:
        assert set(CASES) <= set(res), sorted(set(CASES) - set(res))
        assert len(DTYPES) * len(OPS) * len(DEVICES) <= len(res)


def test_barrier_returns_only_after_every_rank_arrived(
        results: tuple[int, list[dict[str, np.ndarray]]]) -> None:
    n, per_rank = results
    for res in per_rank:
        assert res["barrier-seen"].tolist() == list(range(n))
