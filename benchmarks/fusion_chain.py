"""Fusion on the CPU, in one run: the 7-op chain on 2^24 float32 (``fusion<cpu>`` vs ``cpu``,
plus the compiler's options), and the share of a steady training step spent in fusion analysis.

Run: ``.venv/bin/python benchmarks/fusion_chain.py [--repeats 9] [--steps 30]``.
Timings interleave the devices round by round, so a busy machine slows all of them alike;
the ratios are the figures to compare.
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
OPTIONS = ["fusion<cpu>", "fusion<cpu,threads=1>", "fusion<cpu,chunk=4096>",
           "fusion<cpu,chunk=16384>", "fusion<cpu,chunk=262144>"]


def chain(x: ember.Tensor) -> ember.Tensor:
    v = (x * 1.5 + 0.25).relu() * 0.5 - 1
    return v * v.sigmoid()


def numpy_eager(a: np.ndarray) -> np.ndarray:
    v = np.maximum(a * np.float32(1.5) + np.float32(0.25), 0) * np.float32(0.5) - 1
    return v * (1 / (1 + np.exp(-v)))


def _sync(t: ember.Tensor) -> None:
    # the value on the hardware device, without a host copy: the kernels' time only
    dev = t.device
    while dev.inner is not None:
        t = dev.backend.unwrap(t)  # type: ignore[attr-defined]  # a Decorator
        dev = t.device


def bench_chain(repeats: int) -> dict[str, float]:
    a = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    runs: dict[str, Callable[[], object]] = {"numpy eager": lambda: numpy_eager(a)}
    for dev in ["cpu", *OPTIONS]:
        x = ember.tensor(a, device=dev)
        runs[dev] = lambda x=x: _sync(chain(x))
    ref = chain(ember.tensor(a)).numpy()
    for dev in OPTIONS:
        got = chain(ember.tensor(a, device=dev)).numpy()
        assert np.array_equal(got, ref), f"{dev} differs from cpu"
    times: dict[str, list[float]] = {k: [] for k in runs}
    for fn in runs.values():
        fn()
    for _ in range(repeats):
        for name, fn in runs.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def bench_training(steps: int, device: str) -> tuple[float, float, ember_fusion.FusionStats]:
    """MLP 784-256-256-10, batch 128, Adam: steady step time and the analysis fraction."""
    nn = ember.nn
    ember.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 10)).to(device)
    opt = ember.optim.Adam(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    x = ember.tensor(rng.standard_normal((128, 784)).astype(np.float32), device=device)
    y = ember.tensor(rng.integers(0, 10, 128), device=device)

    def step() -> float:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.step(loss.backward())
        return float(loss.item())

    for _ in range(5):
        step()
    if "fusion" in device:
        ember_fusion.reset_stats(device)
    t0 = time.perf_counter()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    total = time.perf_counter() - t0
    stats = ember_fusion.stats(device) if "fusion" in device else ember_fusion.FusionStats()
    return statistics.median(times) * 1e3, stats.analysis_s / total, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    ms = bench_chain(args.repeats)
    base = ms["cpu"]
    print(f"7-op chain, 2^24 float32, median of {args.repeats} (ms; speed-up over cpu):")
    for name, t in ms.items():
        print(f"  {name:<26} {t:8.1f} ms   {base / t:5.2f}x")
    plain, _, _ = bench_training(args.steps, "autodiff<cpu>")
    fused, frac, s = bench_training(args.steps, "autodiff<fusion<cpu>>")
    per = max(s.flushes, 1)
    print(f"training step (MLP 784-256-256-10, batch 128, Adam), median of {args.steps}:")
    print(f"  autodiff<cpu>            {plain:8.2f} ms")
    print(f"  autodiff<fusion<cpu>>    {fused:8.2f} ms   analysis {100 * frac:.2f}% of step time")
    print(f"  per step: {s.ops_recorded / args.steps:.0f} ops recorded, "
          f"{s.kernels_launched / args.steps:.0f} kernels, {s.views_run / args.steps:.0f} views, "
          f"{s.flushes / args.steps:.0f} flushes; plan hits {s.plan_hits}/{per}")


if __name__ == "__main__":
    main()
