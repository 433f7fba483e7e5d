"""Interleaved timing: ember and its peer measured round by round in one process, so that a
host or GPU whose speed drifts during the run (the GPU host is shared; clocks move under
load) favours neither side.  A helper module of the GPU benchmarks: nothing to run."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any


def interleaved(fns: Mapping[str, Callable[[], Any]], syncs: Mapping[str, Callable[[], Any]],
                rounds: int, reps: int) -> dict[str, list[float]]:
    """Milliseconds per call of each ``fns[name]`` (``reps`` calls, then ``syncs[name]()``,
    wall clock), for each of ``rounds`` rounds that visit every function in turn, each round
    starting one function later; each is called once untimed first."""
    for name, fn in fns.items():
        fn()
        syncs[name]()
    times: dict[str, list[float]] = {name: [] for name in fns}
    order = list(fns.items())
    for r in range(rounds):
        # each round starts one function later: none always runs right after the same other
        for name, fn in order[r % len(order):] + order[:r % len(order)]:
            t = time.perf_counter()
            for _ in range(reps):
                fn()
            syncs[name]()
            times[name].append((time.perf_counter() - t) / reps * 1e3)
    return times


def summary(times: Mapping[str, list[float]], ours: str, peer: str) -> dict[str, float]:
    """Best time of each, and the median over rounds of ``ours / peer``."""
    out = {name: round(min(ts), 4) for name, ts in times.items()}
    out["median_ratio"] = round(statistics.median(
        a / b for a, b in zip(times[ours], times[peer], strict=True)), 3)
    return out
