"""What ``fusion<...>`` costs the host: a training step of the transformer block of
``benchmarks/gpu/compile_steps.py`` (pre-LayerNorm attention and a GELU MLP, AdamW) at a tiny
shape, where kernel time is negligible, on ``autodiff<inner>`` against
``autodiff<fusion<inner>>``, in interleaved rounds.

    python benchmarks/fusion_host.py [--rounds 7] [--reps 50] [--profile]

Pairs: ``cpu`` (numpy kernels on tiny arrays: host cost dominates), and ``triton-interpret``
with every Triton launch stubbed out after the warm-up (`host_overhead._stub_kernels`), so what
remains is the Python a GPU step spends before its launches (Fusion's recording, flushes and
plans included; the stubbed results are garbage by design).  The GPU's wall time follows this
host time where the GPU waits on the host (``benchmarks/gpu/block_profile.py``).  Prints the
best milliseconds per step of each stack and the median over rounds of fused / unfused: at
most 1.00 means Fusion costs the host nothing.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "gpu"))

#: embedding, heads, sequence, batch: tiny, so kernels cost next to nothing
SHAPE = (32, 4, 8, 2)


def block_step(device: str) -> tuple[Callable[[], None], Any]:
    """One training step of the block on ``device``, and the device."""
    import numpy as np
    from compile_steps import _block

    import ember

    d, heads, t, b = SHAPE
    dev = ember.device(device)
    ember.manual_seed(0)
    blk = _block(ember, ember.nn, ember.nn.functional, d=d, heads=heads).to(dev)
    opt = ember.optim.AdamW(blk.parameters(), lr=1e-4)
    xb = np.random.default_rng(0).standard_normal((b, t, d)).astype(np.float32)
    x = ember.tensor(xb, device=dev)

    def step() -> None:
        loss = (blk(x) ** 2).mean()
        opt.step(loss.backward())
    return step, dev


def measure(pair: tuple[str, str], rounds: int, reps: int, stub: bool, profile: bool,
            clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    steps = {name: block_step(name) for name in pair}
    for step, dev in steps.values():
        for _ in range(5):  # compiles, records launches, lets Fusion learn its plans
            step()
        dev.synchronize()
    if stub:
        from host_overhead import _stub_kernels

        _stub_kernels()
        for step, dev in steps.values():
            for _ in range(3):
                step()
            dev.synchronize()
    times: dict[str, list[float]] = {name: [] for name in pair}
    order = list(steps.items())
    for r in range(rounds):
        for name, (step, dev) in order[r % 2:] + order[:r % 2]:
            t = clock()
            for _ in range(reps):
                step()
            dev.synchronize()
            times[name].append((clock() - t) / reps * 1e3)
    base, fused = pair
    out = {name: min(ts) for name, ts in times.items()}
    out["ratio"] = statistics.median(f / u for f, u in zip(times[fused], times[base],
                                                            strict=True))
    if profile:
        step, dev = steps[fused]
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(reps):
            step()
        dev.synchronize()
        prof.disable()
        print(f"-- {fused}: own time over {reps} steps")
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--profile", action="store_true", help="cProfile the fused stacks' steps")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time by this thread's CPU time, not the wall clock (on a busy machine)")
    args = ap.parse_args()
    clock = time.thread_time if args.cpu_time else time.perf_counter
    print(f"transformer block step, embedding {SHAPE[0]}, {SHAPE[1]} heads, sequence "
          f"{SHAPE[2]}, batch {SHAPE[3]}; best ms per step of {args.rounds} interleaved rounds "
          f"x {args.reps} steps{' (thread CPU time)' if args.cpu_time else ''}; "
          "ratio: median over rounds of fused / unfused")
    # the cpu pair first: stubbing Triton's launches is for good
    for inner, stub in (("cpu", False), ("triton-interpret", True)):
        pair = (f"autodiff<{inner}>", f"autodiff<fusion<{inner}>>")
        res = measure(pair, args.rounds, args.reps, stub, args.profile, clock)
        print(f"{pair[0]:>28} {res[pair[0]]:7.3f} ms   {pair[1]:>36} {res[pair[1]]:7.3f} ms"
              f"   ratio {res['ratio']:.3f}" + ("  (launches stubbed)" if stub else ""),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
