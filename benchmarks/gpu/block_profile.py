"""Where a transformer block's training step spends its GPU time: kernel times by
`torch.profiler` (CUPTI sees every kernel in the process, ember's Triton and cuBLASLt kernels on
CuPy streams as well as PyTorch's), for eager ember on ``autodiff<cuda:0>`` and
``autodiff<fusion<cuda:0>>`` and for PyTorch eager, on the block of ``compile_steps.py``
(embedding 512, 8 heads, sequence 256, batch 16, fp32, AdamW).

    python benchmarks/gpu/with_env.py python benchmarks/gpu/block_profile.py [--top 25]

Prints, per stack, the wall time per step (interleaved rounds), the host's time to issue a step,
the summed kernel time per step and the kernels that take the most time, grouped by name.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _kernels(prof: Any, steps: int) -> list[tuple[str, float, int]]:
    """(name, µs per step, launches per step) of every GPU kernel and memcpy/memset."""
    total: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for ev in prof.events():
        dev_t = getattr(ev, "device_time", None) or getattr(ev, "cuda_time", 0.0)
        if ev.device_type.name != "CUDA" or not dev_t:
            continue
        name = ev.name if len(ev.name) < 70 else ev.name[:67] + "..."
        total[name] += dev_t
        count[name] += 1
    return sorted(((n, t / steps, count[n] // steps) for n, t in total.items()),
                  key=lambda r: -r[1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--host", action="store_true",
                    help="also profile the host (cProfile) of each ember stack's steps")
    args = ap.parse_args()

    import numpy as np
    import torch
    from _rounds import interleaved, summary
    from compile_steps import _block
    from torch.profiler import ProfilerActivity, profile

    import ember

    rng = np.random.default_rng(0)
    xb = rng.standard_normal((16, 256, 512)).astype(np.float32)
    base = ember.device("cuda:0")
    stacks: dict[str, Any] = {}
    for name in ("autodiff<cuda:0>", "autodiff<fusion<cuda:0>>"):
        dev = ember.device(name)
        blk = _block(ember, ember.nn, ember.nn.functional).to(dev)
        opt = ember.optim.AdamW(blk.parameters(), lr=1e-4)
        x = ember.tensor(xb, device=dev)

        def step(blk: Any = blk, opt: Any = opt, x: Any = x) -> None:
            loss = (blk(x) ** 2).mean()
            opt.step(loss.backward())
        stacks[name] = step
    tb = _block(torch, torch.nn, torch.nn.functional).cuda()
    topt = torch.optim.AdamW(tb.parameters(), lr=1e-4)
    tx = torch.from_numpy(xb).cuda()

    def tstep() -> None:
        topt.zero_grad()
        (tb(tx) ** 2).mean().backward()
        topt.step()
    stacks["torch"] = tstep

    def sync() -> None:
        base.synchronize()

    def tsync() -> None:
        torch.cuda.synchronize()
    syncs = {k: (tsync if k == "torch" else sync) for k in stacks}
    times = interleaved(stacks, syncs, 5, 10)
    wall = summary(times, "autodiff<cuda:0>", "torch")
    print("wall ms per step (best of 5 rounds):", wall, flush=True)

    issue = _issue_times(stacks, syncs)
    for name, fn in stacks.items():
        for _ in range(3):
            fn()
        syncs[name]()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(args.steps):
                fn()
            syncs[name]()
        rows = _kernels(prof, args.steps)
        busy = sum(r[1] for r in rows)
        launches = sum(r[2] for r in rows)
        print(f"\n== {name}: wall {wall[name]:.3f} ms, kernels {busy / 1e3:.3f} ms in "
              f"{launches} launches per step, host issues a step in {issue[name]:.3f} ms")
        print(f"{'kernel':<72}{'µs/step':>9}{'n':>5}")
        for n, t, c in rows[:args.top]:
            print(f"{n:<72}{t:>9.1f}{c:>5}")
        if args.host and name != "torch":
            _host_profile(fn, syncs[name], args.steps, args.top)
    return 0


def _issue_times(stacks: dict[str, Any], syncs: dict[str, Any], reps: int = 5,
                 rounds: int = 5) -> dict[str, float]:
    """Milliseconds the host takes to issue a step (``reps`` steps after a sync, timed before
    the next sync; best of ``rounds``): where it is below the wall time, the GPU is the bound.
    ``reps`` steps queue fewer launches than a stream holds, so issuing never waits."""
    best = {name: float("inf") for name in stacks}
    for _ in range(rounds):
        for name, fn in stacks.items():
            syncs[name]()
            t = time.perf_counter()
            for _ in range(reps):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t) / reps * 1e3)
            syncs[name]()
    return best


def _host_profile(fn: Any, sync: Any, steps: int, top: int) -> None:
    """The host functions that cost the most over ``steps`` steps (cProfile, own time)."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        fn()
    sync()
    prof.disable()
    print(f"-- host, own time over {steps} steps:")
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


if __name__ == "__main__":
    sys.exit(main())
