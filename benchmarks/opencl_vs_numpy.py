"""OpenCL (PoCL) against numpy on the same machine: matmul, elementwise, reduction, conv2d.

    python benchmarks/opencl_vs_numpy.py               # prints a table
    python benchmarks/opencl_vs_numpy.py --write results.md   # appends the table

Each figure is the median of several timed runs, each after a short pause and an untimed run
(the first also builds the kernels), numpy and OpenCL alternating; OpenCL timings include
waiting for the queue, so they are wall-clock results.
The numpy conv2d is ember_cpu's (im2col with sliding windows, then BLAS).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import ember
import ember.functional as F

SETTLE = 0.25  # seconds for the other side's worker threads to go idle


def _pair(fn_np: Callable[[], Any], fn_cl: Callable[[], Any], reps: int) -> tuple[float, float]:
    """Medians of numpy and OpenCL timings taken alternately, so both see the same load.

    Each timed call follows a pause and an untimed call of the same side: OpenBLAS's threads
    keep spinning for a while after a matmul returns, which would otherwise be charged to the
    next OpenCL run (measured: 1024^3 matmul at ~70 instead of ~135 GFLOP/s).
    """
    t_np, t_cl = [], []
    for _ in range(reps):
        for fn, times in ((fn_np, t_np), (fn_cl, t_cl)):
            time.sleep(SETTLE)
            fn()
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    return statistics.median(t_np), statistics.median(t_cl)


def run(reps: int = 5) -> list[tuple[str, float, float, str]]:
    dev = ember.device("opencl:0")
    rng = np.random.default_rng(0)
    rows: list[tuple[str, float, float, str]] = []

    n = 1024
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    xa, xb = ember.tensor(a, device=dev), ember.tensor(b, device=dev)
    t_np, t_cl = _pair(lambda: a @ b, lambda: _sync(dev, xa @ xb), reps)
    flop = 2 * n ** 3
    rows.append(("matmul 1024^3 float32 (GFLOP/s)", flop / t_np / 1e9, flop / t_cl / 1e9,
                 "higher is better"))

    m = 1 << 24
    u = rng.standard_normal(m, dtype=np.float32)
    v = rng.standard_normal(m, dtype=np.float32)
    xu, xv = ember.tensor(u, device=dev), ember.tensor(v, device=dev)
    t_np, t_cl = _pair(lambda: u * v + u, lambda: _sync(dev, xu * xv + xu), reps)
    rows.append(("x * y + x, 2^24 float32 (ms)", t_np * 1e3, t_cl * 1e3, "lower is better"))

    t_np, t_cl = _pair(lambda: np.exp(u), lambda: _sync(dev, xu.exp()), reps)
    rows.append(("exp, 2^24 float32 (ms)", t_np * 1e3, t_cl * 1e3, "lower is better"))

    t_np, t_cl = _pair(lambda: u.sum(), lambda: _sync(dev, xu.sum()), reps)
    rows.append(("sum, 2^24 float32 (ms)", t_np * 1e3, t_cl * 1e3, "lower is better"))

    w2 = rng.standard_normal((4096, 4096), dtype=np.float32)
    xw2 = ember.tensor(w2, device=dev)
    t_np, t_cl = _pair(lambda: w2.sum(axis=1), lambda: _sync(dev, xw2.sum(dim=1)), reps)
    rows.append(("row sums of 4096x4096 float32 (ms)", t_np * 1e3, t_cl * 1e3, "lower is better"))

    from ember_cpu.nn import conv2d as np_conv2d

    x = rng.standard_normal((8, 32, 56, 56), dtype=np.float32)
    w = rng.standard_normal((64, 32, 3, 3), dtype=np.float32)
    xx, xw = ember.tensor(x, device=dev), ember.tensor(w, device=dev)
    t_np, t_cl = _pair(lambda: np_conv2d(x, w, (1, 1), (1, 1)),
                       lambda: _sync(dev, F.conv2d(xx, xw, padding=1)), reps)
    rows.append(("conv2d 8x32x56x56, 64 3x3 filters (ms)", t_np * 1e3, t_cl * 1e3,
                 "lower is better"))
    return rows


def _sync(dev: ember.Device, t: ember.Tensor) -> None:
    del t
    dev.synchronize()


def table(rows: list[tuple[str, float, float, str]], device_name: str,
          load: tuple[float, float]) -> str:
    lines = [f"Measured with `python benchmarks/opencl_vs_numpy.py` on {device_name} "
             f"({time.strftime('%Y-%m-%d %H:%M')}, 1-minute load average {load[0]:.2f} before, "
             f"{load[1]:.2f} after); ratio = OpenCL speed / numpy speed (> 1: OpenCL faster).",
             "",
             "| benchmark | numpy | OpenCL (PoCL) | ratio |", "|---|---|---|---|"]
    for name, np_v, cl_v, sense in rows:
        ratio = cl_v / np_v if sense.startswith("higher") else np_v / cl_v
        lines.append(f"| {name} | {np_v:.2f} | {cl_v:.2f} | {ratio:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--write", default=None, help="append the table to this markdown file")
    args = p.parse_args()
    dev = ember.device("opencl:0")
    name = getattr(dev.backend, "device_name", "opencl:0")
    before = os.getloadavg()[0]
    rows = run(args.reps)
    text = table(rows, name, (before, os.getloadavg()[0]))
    print(text)
    if args.write:
        with open(args.write, "a+", encoding="utf-8") as f:
            f.seek(0)
            head = "" if "## OpenCL (PoCL)" in f.read() else "\n## OpenCL (PoCL)\n\n"
            f.write(head + text)


if __name__ == "__main__":
    main()
