"""Sorting on a WebGPU device: the rank sort against the bitonic sort (`ember_wgpu.sort`).

    python benchmarks/gpu/wgpu_sort_bench.py [--device wgpu:0] [--rank-up-to 65536] [--quick]

Times ``ember.sort`` of float32 on one line of 2^10 .. 2^20 elements and on 2^18 elements
cut into lines of 16 .. 2048 (where `RANK_MAX` is chosen), each kernel forced in turn; every
result is checked against numpy's stable sort.  A time is the best of five rounds of
``reps`` sorts recorded back to back then waited for (host recording included), per sort.
The rank sort is left out of lines longer than ``--rank-up-to`` (it is quadratic).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from with_env import main


def timed(sort_once: object, reps: int, sync: object) -> float:
    best = float("inf")
    for _ in range(5):
        sync()  # type: ignore[operator]
        t0 = time.perf_counter()
        for _ in range(reps):
            sort_once()  # type: ignore[operator]
        sync()  # type: ignore[operator]
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def child() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="wgpu:0")
    p.add_argument("--rank-up-to", type=int, default=1 << 16)
    p.add_argument("--quick", action="store_true", help="one line up to 2^16 only")
    p.add_argument("--child", action="store_true")
    args = p.parse_args()

    from ember_wgpu import sort as wsort

    import ember

    dev = ember.device(args.device)
    rt = dev._backend.runtime  # type: ignore[attr-defined]
    row = next(d for d in ember.devices() if d.name == args.device)
    print(f"{args.device} = {row.description}; RANK_MAX = {wsort.rank_max(rt)}, "
          f"TILE = {wsort.TILE}")
    rng = np.random.default_rng(0)
    chosen = wsort.RANK_MAX

    def case(n: int, lines: int) -> str:
        a = rng.standard_normal((lines, n)).astype(np.float32)
        x = ember.tensor(a, device=dev)
        want = np.sort(a, axis=-1, kind="stable")
        out = []
        for name, forced in (("rank", 1 << 30), ("bitonic", 0)):
            if name == "rank" and n > args.rank_up_to:
                out.append(f"{name} -")
                continue
            wsort.RANK_MAX = {"CPU": forced, "GPU": forced}
            try:
                got = x.sort(dim=-1)[0].numpy()  # builds the pipelines
                ok = "" if np.array_equal(got, want) else " (WRONG)"
                t0 = time.perf_counter()
                rt.synchronize()
                x.sort(dim=-1)
                rt.synchronize()
                once = time.perf_counter() - t0
                reps = max(1, min(50, int(0.2 / max(once, 1e-6))))
                ms = timed(lambda: x.sort(dim=-1), reps, rt.synchronize) * 1e3
                out.append(f"{name} {ms:.3f} ms{ok}")
            finally:
                wsort.RANK_MAX = chosen
        return "  ".join(out)

    print("one line of n float32:")
    for lg in (10, 12, 14, 16) if args.quick else (10, 12, 14, 16, 18, 20):
        print(f"  n = 2^{lg}: {case(1 << lg, 1)}", flush=True)
    print("2^18 float32 in lines of n:")
    for n in (16, 32, 64, 128, 256, 512, 1024, 2048):
        print(f"  n = {n} x {(1 << 18) // n}: {case(n, (1 << 18) // n)}", flush=True)
    print("one line of n:")
    for n in (32, 64, 128, 256, 512, 1024):
        print(f"  n = {n}: {case(n, 1)}", flush=True)


if __name__ == "__main__":
    if "--child" in sys.argv:
        child()
    else:  # again in a process with the workspace's packages importable
        sys.exit(main([sys.executable, __file__, "--child", *sys.argv[1:]]))
