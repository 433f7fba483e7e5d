"""Fusion on the GPU's benchmark models: one training step on ``autodiff<fusion<cuda:0>>``
against ``autodiff<cuda:0>``, interleaved in one process, with what Fusion did per step.

    python benchmarks/gpu/fusion_models.py [--rounds 7] [--reps 20] [--inner cuda:0]
        [--models mlp,guide,block] [--options plain=2 ...] [--profile N]

Models: the MLP of ``perf.py`` (784-1024-1024-10, batch 512, Adam), the guide CNN's step
(batch 32, AdamW, batch uploaded each step) and the transformer block of ``block_profile.py``
(embedding 512, 8 heads, sequence 256, batch 16, AdamW).  GPT-2's fused modes are
``gpt2.py --fusion``.  Prints, per model, the best milliseconds per step of each stack, the
median over rounds of fused / unfused (the goal: at most 1.00), and per fused step the ops
Fusion recorded and ran eagerly and the kernels its flushes launched.  ``--profile N`` then
prints, per model and stack, the N functions with the most host time of their own per step
(cProfile over ``--reps`` steps): where the host time of a fused step goes.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

def block_step(ember: Any, device: str) -> Callable[[], None]:
    import numpy as np
    from compile_steps import _block

    dev = ember.device(device)
    ember.manual_seed(0)
    blk = _block(ember, ember.nn, ember.nn.functional).to(dev)
    opt = ember.optim.AdamW(blk.parameters(), lr=1e-4)
    x = ember.tensor(np.random.default_rng(0).standard_normal((16, 256, 512)).astype(np.float32),
                     device=dev)

    def step() -> None:
        loss = (blk(x) ** 2).mean()
        opt.step(loss.backward())
    return step


def profile(fns: dict[str, Callable[[], Any]], sync: Callable[[], None], reps: int,
            top: int) -> None:
    """The ``top`` functions by own host time per step, each stack profiled alone."""
    for label, fn in fns.items():
        sync()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(reps):
            fn()
        sync()
        prof.disable()
        st = pstats.Stats(prof)
        rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])  # type: ignore[attr-defined]
        total = sum(v[2] for v in st.stats.values()) / reps * 1e3  # type: ignore[attr-defined]
        print(f"  {label}: {total:.3f} ms of host time per step under the profiler")
        for (file, line, name), (_cc, nc, tt, ct, _) in rows[:top]:
            print(f"    {tt / reps * 1e6:8.1f} us {nc / reps:7.1f} calls  {ct / reps * 1e6:8.1f} "
                  f"us cum  {Path(file).name}:{line} {name}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--inner", default="cuda:0", help="the device under Fusion")
    ap.add_argument("--models", default="mlp,guide,block")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="print the N functions with the most own host time per step")
    ap.add_argument("--options", action="append", default=None, metavar="OPTS",
                    help="fusion options to compare, e.g. 'plain=2' (repeatable; '' is the "
                         "default: fusion<INNER>)")
    args = ap.parse_args()
    unfused = f"autodiff<{args.inner}>"
    fdevs = [f"fusion<{args.inner}{',' + o if o else ''}>" for o in (args.options or [""])]

    from _mlp import guide_step, mlp_step
    from _rounds import interleaved

    import ember
    import ember_fusion

    base = ember.device(args.inner)
    models: dict[str, Callable[[Any, str], Callable[[], Any]]] = {
        "mlp": lambda e, d: mlp_step(e, d), "guide": lambda e, d: guide_step(e, d),
        "block": block_step}
    models = {k: v for k, v in models.items() if k in args.models.split(",")}
    print(f"one training step, ms (best of {args.rounds} interleaved rounds x {args.reps} "
          "steps); ratio: median over rounds of fused / unfused")
    for name, make in models.items():
        fns = {unfused: make(ember, unfused)}
        for f in fdevs:
            fns[f"autodiff<{f}>"] = make(ember, f"autodiff<{f}>")
        syncs = dict.fromkeys(fns, base.synchronize)
        for _ in range(5):  # kernels compiled, Fusion's plans and decisions learnt
            for fn in fns.values():
                fn()
        base.synchronize()
        stats = {}
        for f in fdevs:
            fdev = ember.device(f)
            ember_fusion.reset_stats(fdev)
            fns[f"autodiff<{f}>"]()
            fdev.synchronize()
            stats[f] = ember_fusion.stats(fdev)
        times = interleaved(fns, syncs, args.rounds, args.reps)
        print(f"{name:>6}: {unfused} {min(times[unfused]):7.3f}", flush=True)
        for f in fdevs:
            label, st = f"autodiff<{f}>", stats[f]
            ratio = statistics.median(x / u for x, u in zip(times[label], times[unfused],
                                                            strict=True))
            print(f"        {label} {min(times[label]):7.3f}   ratio {ratio:.3f}   fused step: "
                  f"{st.ops_recorded} ops recorded, {st.eager_ops} eager, "
                  f"{st.kernels_launched} kernels in {st.flushes} flushes "
                  f"{' '.join(st.last_groups)}", flush=True)
        if args.profile:
            profile(fns, base.synchronize, args.reps, args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
