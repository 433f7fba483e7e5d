"""Fusion on the CPU, in one run: the 7-op chain on 2^24 float32 (``fusion<cpu>`` vs ``cpu``,
plus the compiler's options), and the share of a steady training step spent in fusion analysis.

Run: ``.venv/bin/python benchmarks/fusion_chain.py [--repeats 9] [--steps 30]``.
Timings interleave the devices round by round, so a busy machine slows all of them alike;
the ratios are the figures to compare.

``--processes N`` instead runs the chain (2^22 float32 unless ``--log2n``) in N fresh
processes one after another and prints each process's ``fusion<cpu>`` / ``cpu`` ratio, at the
default device string and at one thread on each side (``fusion<cpu,threads=1>`` with
``OPENBLAS_NUM_THREADS=1``), with the process's CPU time per call, the first ``fusion<cpu>``
call and the time from the fused devices' second calls (which ask for the compiled loops) until
a background thread has loaded them (numba's import and disk cache; timing starts after it),
and the load average, then the
minimum and median over processes: a figure a fresh process may or may not reach shows up
there, not in one process's median.  ``--loops 0`` runs the same with ``loops=0`` (numpy's
blocks only) for comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np

import ember
import ember_cpu.fusion
import ember_fusion

N = 2**24
OPTIONS = ["fusion<cpu>", "fusion<cpu,threads=1>", "fusion<cpu,chunk=4096>",
           "fusion<cpu,chunk=16384>", "fusion<cpu,chunk=262144>", "fusion<cpu,loops=0>",
           "fusion<cpu,loops=0,threads=1>"]


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
    ember_cpu.fusion.wait_for_loops()  # the compiled loops the second calls asked for
    for _ in range(repeats):
        for name, fn in runs.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def _fused(loops: int, threads: int | None = None) -> str:
    opts = ([] if threads is None else [f"threads={threads}"]) + ([] if loops else ["loops=0"])
    return f"fusion<cpu{''.join(',' + o for o in opts)}>"


def bench_fresh(log2n: int, repeats: int, loops: int = 1) -> dict[str, float]:
    """One process's figures for `--processes`: median wall and process CPU ms per call of the
    chain on ``cpu`` and the fused devices, interleaved round by round after one warm call."""
    a = np.random.default_rng(0).standard_normal(2**log2n).astype(np.float32)
    devs = ["cpu", _fused(loops), _fused(loops, 1)]
    xs = {d: ember.tensor(a, device=d) for d in devs}
    ref = chain(xs["cpu"]).numpy()
    first: dict[str, float] = {}
    for d in devs[1:]:
        t = time.perf_counter()
        got = chain(xs[d]).numpy()
        first[d] = time.perf_counter() - t
        assert np.array_equal(got, ref), f"{d} differs from cpu"
    # a recurring chain asks for its compiled loops (on its second call), loaded in the
    # background (numba's import and disk cache, or a compile): the second calls and the wait
    # for the loops, timed together, then the steady state
    t = time.perf_counter()
    for d in devs[1:]:
        assert np.array_equal(chain(xs[d]).numpy(), ref), f"{d} differs from cpu"
    ember_cpu.fusion.wait_for_loops()
    loaded = time.perf_counter() - t
    for d in devs[1:]:
        assert np.array_equal(chain(xs[d]).numpy(), ref), f"{d} differs from cpu"
    wall: dict[str, list[float]] = {d: [] for d in devs}
    cpu: dict[str, list[float]] = {d: [] for d in devs}
    for _ in range(repeats):
        for d, x in xs.items():
            t, c = time.perf_counter(), time.process_time()
            _sync(chain(x))
            wall[d].append(time.perf_counter() - t)
            cpu[d].append(time.process_time() - c)
    names = dict(zip(devs, ["cpu", "fusion<cpu>", "fusion<cpu,threads=1>"], strict=True))
    out = {f"{names[d]} ms": statistics.median(wall[d]) * 1e3 for d in devs}
    out.update({f"{names[d]} cpu ms": statistics.median(cpu[d]) * 1e3 for d in devs})
    # the first call (numpy's blocks; the loops are asked for), and the further wait until
    # the loops were loaded
    out.update({f"{names[d]} first ms": v * 1e3 for d, v in first.items()})
    out["loops ms"] = loaded * 1e3
    return out


def fresh_processes(n: int, log2n: int, repeats: int, loops: int = 1) -> None:
    """`--processes`: ``n`` fresh processes, each at the default thread settings and at one
    thread on each side, alternating; each one's ratios, then min and median."""
    ratios: dict[str, list[float]] = {"default": [], "one thread": []}
    print(f"7-op chain, 2^{log2n} float32, {n} fresh processes (median of {repeats} rounds "
          f"each; {os.cpu_count()} cores; load at start {os.getloadavg()[0]:.2f}"
          f"{'' if loops else '; loops=0'}):")
    print("  proc  fusion<cpu> / cpu (ms; CPU time; first call + till loops, ms)   "
          "threads=1 / cpu, 1 thread each   load")
    for i in range(n):
        row = []
        for mode, env in (("default", {}), ("one thread", {"OPENBLAS_NUM_THREADS": "1"})):
            cmd = [sys.executable, __file__, "--child", str(log2n), "--repeats", str(repeats),
                   "--loops", str(loops)]
            got = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True,
                                 text=True, check=True)
            r = json.loads(got.stdout.strip().splitlines()[-1])
            dev = "fusion<cpu>" if mode == "default" else "fusion<cpu,threads=1>"
            ratio = r["cpu ms"] / r[f"{dev} ms"]
            ratios[mode].append(ratio)
            row.append(f"{ratio:5.2f}x ({r['cpu ms']:5.1f} / {r[f'{dev} ms']:4.1f}; CPU time "
                       f"{r['cpu cpu ms'] / r[f'{dev} cpu ms']:4.2f}x"
                       + (f"; {r['fusion<cpu> first ms']:3.0f} +{r['loops ms']:4.0f})"
                          if mode == "default" else ")"))
        print(f"  {i:4d}  {row[0]}    {row[1]}  {os.getloadavg()[0]:.2f}")
    for mode, rs in ratios.items():
        print(f"  {mode:<11} min {min(rs):.2f}x  median {statistics.median(rs):.2f}x  "
              f"({' '.join(f'{r:.2f}' for r in rs)})")
    print(f"  load average at end {os.getloadavg()[0]:.2f} "
          f"(1/5/15 min: {' '.join(f'{v:.2f}' for v in os.getloadavg())})")


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
    parser.add_argument("--processes", type=int, default=0,
                        help="run the chain in this many fresh processes (see above)")
    parser.add_argument("--log2n", type=int, default=22,
                        help="elements of the chain with --processes, as a power of 2")
    parser.add_argument("--loops", type=int, default=1,
                        help="with --processes: 0 runs fusion<cpu,loops=0> (numpy blocks only)")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(bench_fresh(args.child, args.repeats, args.loops)))
        return
    if args.processes:
        fresh_processes(args.processes, args.log2n, args.repeats, args.loops)
        return
    ms = bench_chain(args.repeats)
    base = ms["cpu"]
    print(f"7-op chain, 2^24 float32, median of {args.repeats} (ms; speed-up over cpu):")
    for name, t in ms.items():
        print(f"  {name:<30} {t:8.1f} ms   {base / t:5.2f}x")
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
