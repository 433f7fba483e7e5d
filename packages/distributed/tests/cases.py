"""The collective cases both sides agree on: each rank's input, made from its rank alone.

The worker (``collectives_worker.py``, one process per rank) runs the collectives on these
inputs; the tests compute what the results must be with numpy from the same inputs.
"""

from __future__ import annotations

import numpy as np

DTYPES = ("float32", "float64", "int64")
SHAPE = (6, 3)  # rows divisible by 2 and 3 ranks (reduce_scatter)
OPS = ("sum", "mean", "max", "min")


def rank_input(rank: int, dtype: str) -> np.ndarray:
    rng = np.random.default_rng(1000 + rank)
    if dtype.startswith("int"):
        return rng.integers(-50, 50, size=SHAPE).astype(dtype)
    return rng.normal(size=SHAPE).astype(dtype)


def keys(devices: list[str]) -> list[str]:
    out = []
    for dev in devices:
        for dt in DTYPES:
            out += [f"all_reduce-{op}-{dt}-{dev}" for op in OPS]
            out += [f"reduce_scatter-{op}-{dt}-{dev}" for op in ("sum", "mean")]
            out += [f"broadcast-{src}-{dt}-{dev}" for src in (0, 1)]
            out += [f"all_gather-{dt}-{dev}"]
    return out


def expected(kind: str, arg: str, dt: str, n: int, rank: int) -> np.ndarray:
    """What rank ``rank`` of ``n`` must get from the collective ``kind`` (numpy oracle)."""
    xs = np.stack([rank_input(r, dt) for r in range(n)])
    if kind == "all_gather":
        return xs
    if kind == "broadcast":
        return xs[int(arg)]
    exact = xs.astype(np.float64) if dt.startswith("float") else xs
    reduced = {"sum": exact.sum(0), "max": exact.max(0), "min": exact.min(0),
               "mean": exact.sum(0) / n}[arg]
    if arg == "mean" and dt.startswith("int"):
        reduced = np.trunc(reduced)  # rounds toward zero, as NCCL's average
    reduced = reduced.astype(dt)
    if kind == "reduce_scatter":
        rows = SHAPE[0] // n
        return reduced[rank * rows:(rank + 1) * rows]
    return reduced
