"""Fusion on the GPU's benchmark models: one training step on ``autodiff<fusion<cuda:0>>``
against ``autodiff<cuda:0>``, interleaved in one process, with what Fusion did per step.

    python benchmarks/gpu/fusion_models.py [--rounds 7] [--reps 20] [--inner cuda:0]

Models: the MLP of ``perf.py`` (784-1024-1024-10, batch 512, Adam), the guide CNN's step
(batch 32, AdamW, batch uploaded each step) and the transformer block of ``block_profile.py``
(embedding 512, 8 heads, sequence 256, batch 16, AdamW).  GPT-2's fused modes are
``gpt2.py --fusion``.  Prints, per model, the best milliseconds per step of each stack, the
median over rounds of fused / unfused (the goal: at most 1.00), and per fused step the ops
Fusion recorded and ran eagerly and the kernels its flushes launched.
"""

from __future__ import annotations

import argparse
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--inner", default="cuda:0", help="the device under Fusion")
    args = ap.parse_args()
    unfused, fused = f"autodiff<{args.inner}>", f"autodiff<fusion<{args.inner}>>"

    from _mlp import guide_step, mlp_step
    from _rounds import interleaved

    import ember
    import ember_fusion

    base = ember.device(args.inner)
    fdev = ember.device(f"fusion<{args.inner}>")
    models: dict[str, Callable[[Any, str], Callable[[], Any]]] = {
        "mlp": lambda e, d: mlp_step(e, d), "guide": lambda e, d: guide_step(e, d),
        "block": block_step}
    print(f"one training step, ms (best of {args.rounds} interleaved rounds x {args.reps} "
          "steps); ratio: median over rounds of fused / unfused")
    for name, make in models.items():
        fns = {unfused: make(ember, unfused), fused: make(ember, fused)}
        syncs = dict.fromkeys(fns, base.synchronize)
        for _ in range(5):  # kernels compiled, Fusion's plans and decisions learnt
            for fn in fns.values():
                fn()
        base.synchronize()
        ember_fusion.reset_stats(fdev)
        fns[fused]()
        fdev.synchronize()
        st = ember_fusion.stats(fdev)
        times = interleaved(fns, syncs, args.rounds, args.reps)
        ratio = statistics.median(f / u for f, u in zip(times[fused], times[unfused],
                                                        strict=True))
        print(f"{name:>6}: {unfused} {min(times[unfused]):7.3f}   {fused} "
              f"{min(times[fused]):7.3f}   ratio {ratio:.3f}   fused step: "
              f"{st.ops_recorded} ops recorded, {st.eager_ops} eager, {st.kernels_launched} "
              f"kernels in {st.flushes} flushes {' '.join(st.last_groups)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
