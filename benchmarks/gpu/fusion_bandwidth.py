"""The 7-op chain ``v = relu(x*1.5+0.25)*0.5-1; v*sigmoid(v)`` on 2^28 float32 on ``cuda:0``:
``fusion<cuda:0>`` (one generated Triton kernel) against a device-to-device copy (CuPy), the
unfused ``cuda:0`` and, when torch imports, PyTorch eager.  Effective bandwidth counts 8 bytes
per element (read x, write y), whatever the kernels really move.

    python benchmarks/gpu/fusion_bandwidth.py [--log2n 28] [--reps 20] [--block 2048]

Timing: CUDA events (CuPy) around ``reps`` back-to-back runs after a warm-up, median of 5
such batches.  Needs no install: ember's packages are put on the path as ``check.py`` does.
Prints a table and a JSON line (``RESULT {...}``); exit status 1 when the fused result is wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def chain(x: Any, relu: Callable[[Any], Any], sigmoid: Callable[[Any], Any]) -> Any:
    v = relu(x * 1.5 + 0.25) * 0.5 - 1
    return v * sigmoid(v)


def batches(run: Callable[[], Any], reps: int, cupy: Any) -> float:
    """Median seconds per run, from CUDA events around ``reps`` runs (5 batches)."""
    run()
    run()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(5):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        for _ in range(reps):
            run()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3 / reps)
    return statistics.median(times)


def measure(log2n: int, reps: int, block: int | None) -> dict[str, Any]:
    import cupy
    import numpy as np

    import ember
    import ember_fusion

    n = 1 << log2n
    nbytes = 8 * n
    res: dict[str, Any] = {"elements": n, "bytes_per_element": 8}
    fused_name = f"fusion<cuda:0,block={block}>" if block else "fusion<cuda:0>"
    plain = ember.device("cuda:0")
    fused = ember.device(fused_name)
    x = ember.randn((n,), device=plain, generator=ember.Generator(0))
    xf = x.to(fused)
    flush = fused.backend.stream().flush

    # the copy ceiling
    src = cupy.random.standard_normal(n, dtype=cupy.float32)
    dst = cupy.empty_like(src)
    t = batches(lambda: cupy.copyto(dst, src), reps, cupy)
    res["copy_TBps"] = nbytes / t / 1e12

    # fusion<cuda:0>: one kernel per run (the flush launches it; nothing waits for it).  The
    # result must be held across the flush: fusion never computes what nobody can read.
    held: list[Any] = [None]

    def fused_run() -> None:
        held[0] = None  # the previous result's buffer goes back to the pool
        held[0] = chain(xf, lambda v: v.relu(), lambda v: v.sigmoid())
        flush()

    ember_fusion.reset_stats(fused)
    t = batches(fused_run, reps, cupy)
    stats = ember_fusion.stats(fused)
    res["fused_TBps"] = nbytes / t / 1e12
    res["fused_ms"] = t * 1e3
    res["fused_kernels_per_run"] = stats.kernels_launched / max(stats.flushes, 1)
    res["fused_groups"] = list(stats.last_groups)
    if res["fused_kernels_per_run"] < 1:
        raise RuntimeError(f"fusion<cuda:0> launched no kernel per run: {stats}")
    res["fused_ratio_to_copy"] = res["fused_TBps"] / res["copy_TBps"]

    # correctness of the fused result on a slice, against numpy float64
    y = chain(xf, lambda v: v.relu(), lambda v: v.sigmoid()).numpy()[: 1 << 20]
    a = x.numpy()[: 1 << 20].astype(np.float64)
    v = np.maximum(a * 1.5 + 0.25, 0) * 0.5 - 1
    res["fused_max_abs_err"] = float(np.abs(y - v / (1 + np.exp(-v))).max())

    # cuda:0 unfused: seven kernels, each reading and writing memory
    t = batches(lambda: chain(x, lambda v: v.relu(), lambda v: v.sigmoid()), reps, cupy)
    res["unfused_TBps"] = nbytes / t / 1e12
    res["unfused_ms"] = t * 1e3

    try:
        import torch
    except ImportError:
        res["torch"] = "not installed"
    else:
        tx = torch.randn(n, device="cuda")
        t = batches(lambda: chain(tx, torch.relu, torch.sigmoid), reps, cupy)
        res["torch_eager_TBps"] = nbytes / t / 1e12
        res["torch_eager_ms"] = t * 1e3
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--log2n", type=int, default=28)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--block", type=int, default=None, help="elements per program of the "
                   "fused kernel (default: the compiler's choice)")
    args = p.parse_args(argv)
    if os.environ.get("EMBER_BENCH_CHILD") != "1":
        sys.path.insert(0, str(HERE))
        from check import workspace_env

        with tempfile.TemporaryDirectory() as tmp:
            env = workspace_env(Path(tmp))
            env["EMBER_BENCH_CHILD"] = "1"
            return subprocess.run([sys.executable, __file__, *(argv or sys.argv[1:])],
                                  env=env, check=False).returncode
    res = measure(args.log2n, args.reps, args.block)
    print(f"7-op chain, 2^{args.log2n} float32, effective TB/s at 8 bytes/element")
    print("| what | TB/s | ms | ratio to copy |\n|---|---|---|---|")
    print(f"| copy (CuPy) | {res['copy_TBps']:.2f} | | 1.00 |")
    for key, name in (("fused", "fusion<cuda:0>"), ("unfused", "cuda:0"),
                      ("torch_eager", "PyTorch eager")):
        if f"{key}_TBps" in res:
            print(f"| {name} | {res[f'{key}_TBps']:.2f} | {res[f'{key}_ms']:.3f} | "
                  f"{res[f'{key}_TBps'] / res['copy_TBps']:.2f} |")
    print(f"fused: {res['fused_kernels_per_run']:.0f} kernel(s) per run {res['fused_groups']}, "
          f"max abs error vs float64 {res['fused_max_abs_err']:.2e}")
    print("RESULT " + json.dumps(res))
    return 0 if res["fused_max_abs_err"] < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
