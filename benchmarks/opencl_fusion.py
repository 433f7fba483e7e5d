"""Fusion on OpenCL, in one run: the 7-op chain on 2^24 float32 on ``fusion<opencl:0>`` vs
``opencl:0`` vs numpy eager, and a row softmax (4096 x 1024 float32) the same way.

Run: ``.venv/bin/python benchmarks/opencl_fusion.py [--repeats 9]``.
Timings interleave the contenders round by round, so a busy machine slows all of them alike;
the ratios are the figures to compare.  Each OpenCL timing waits for the device's queue.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

import ember
import ember_fusion

N = 2**24
ROWS = (4096, 1024)
DEVICES = ["opencl:0", "fusion<opencl:0>"]


def chain(x: ember.Tensor) -> ember.Tensor:
    v = (x * 1.5 + 0.25).relu() * 0.5 - 1
    return v * v.sigmoid()


def numpy_chain(a: np.ndarray) -> np.ndarray:
    v = np.maximum(a * np.float32(1.5) + np.float32(0.25), 0) * np.float32(0.5) - 1
    return v * (1 / (1 + np.exp(-v)))


def numpy_softmax(a: np.ndarray) -> np.ndarray:
    e = np.exp(a - a.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _done(t: ember.Tensor) -> None:
    """Run ``t``'s pending kernels and wait for them, without a host copy."""
    dev = t.device
    while dev.inner is not None:
        t = dev.backend.unwrap(t)  # type: ignore[attr-defined]  # a Decorator
        dev = t.device
    dev.synchronize()


def bench(name: str, data: np.ndarray, fn: Callable[[ember.Tensor], ember.Tensor],
          oracle: Callable[[np.ndarray], np.ndarray], repeats: int) -> dict[str, float]:
    runs: dict[str, Callable[[], object]] = {"numpy eager": lambda: oracle(data)}
    want = oracle(data.astype(np.float64))
    for dev in DEVICES:
        x = ember.tensor(data, device=dev)
        got = fn(x).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{name} on {dev}")
        runs[dev] = lambda x=x: _done(fn(x))
    times: dict[str, list[float]] = {k: [] for k in runs}
    for f in runs.values():
        f()
    for _ in range(repeats):
        for key, f in runs.items():
            t = time.perf_counter()
            f()
            times[key].append(time.perf_counter() - t)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def report(name: str, ms: dict[str, float]) -> None:
    fused = ms["fusion<opencl:0>"]
    print(f"\n{name}")
    for k, v in ms.items():
        print(f"  {k:18s} {v:9.2f} ms   {v / fused:6.2f}x the fused time")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    a = rng.standard_normal(N).astype(np.float32)
    report("7-op chain, 2^24 float32", bench("chain", a, chain, numpy_chain, args.repeats))
    x = ember.tensor(a, device="fusion<opencl:0>")
    ember_fusion.reset_stats("fusion<opencl:0>")
    _done(chain(x))
    s = ember_fusion.stats("fusion<opencl:0>")
    print(f"  fusion<opencl:0>: {s.last_groups} -> {s.kernels_launched} kernel(s)")
    b = (rng.standard_normal(ROWS) * 3).astype(np.float32)
    report(f"row softmax, {ROWS[0]}x{ROWS[1]} float32",
           bench("softmax", b, lambda x: x.softmax(dim=-1), numpy_softmax, args.repeats))


if __name__ == "__main__":
    main()
