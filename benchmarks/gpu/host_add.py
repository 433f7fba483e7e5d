"""Host cost of a small eager add, ember on ``cuda:0`` against torch, nine interleaved rounds of
3,000 adds in one process (``python benchmarks/gpu/host_add.py``; ``EMBER_C_LAUNCH=0`` for the
Python launcher).  Prints which launcher the recorded add uses, the best round of each, the
median of the rounds' ratios, and every round: the host's speed differs between processes, so
only ratios within one process compare."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child() -> None:
    import torch
    from _rounds import interleaved, summary

    import ember

    d = ember.device("cuda:0")
    x = ember.ones((1024,), device=d)
    tx = torch.ones(1024, device="cuda")
    for _ in range(200):
        x + x
    entry = next(iter(d.backend.elementwise_plans.values()))[-1]
    print("recorded add launches through:",
          "the compiled launcher" if hasattr(entry, "func") else type(entry).__name__)
    times = interleaved({"ember": lambda: x + x, "torch": lambda: tx + tx},
                        {"ember": d.synchronize, "torch": torch.cuda.synchronize}, 9, 3000)
    s = summary(times, "ember", "torch")
    print(f"best round: ember {s['ember'] * 1e3:.2f} us, torch {s['torch'] * 1e3:.2f} us; "
          f"median ratio {s['median_ratio']}x")
    for name in ("ember", "torch"):
        print(f"rounds {name}:", " ".join(f"{t * 1e3:.2f}" for t in times[name]))


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from with_env import as_child

    as_child(__file__, child)
