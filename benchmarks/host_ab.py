"""Host cost of small eager ops in two source trees of ember, side by side (A/B).

Run: ``.venv/bin/python benchmarks/host_ab.py TREE_A TREE_B [--rounds N]``, where each tree is
a checkout (``git worktree add`` or ``git archive`` of a commit).  One worker process per tree
imports ember from that tree's ``packages/*/src``; the two run each case in lock-step, in
alternating order, so that load from other work falls on both alike.  Prints the best time per
call of each side and B / A (lower is better), at one thread.
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

NAMES = ["add cpu", "mul+sum cpu", "matmul cpu", "add autodiff", "add autodiff no grad",
         "matmul autodiff", "sum(dim) autodiff", "backward tiny graph"]


def cases() -> dict[str, Callable[[], Any]]:
    import numpy as np

    import ember

    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 8)).astype(np.float32)
    b = rng.standard_normal((8, 8)).astype(np.float32)
    x4 = rng.standard_normal((4, 8, 16)).astype(np.float32)
    ad = ember.device("autodiff<cpu>")
    ca, cb = ember.tensor(a), ember.tensor(b)
    ga = ember.tensor(a, device=ad, requires_grad=True)
    gb = ember.tensor(b, device=ad, requires_grad=True)
    pa, pb = ember.tensor(a, device=ad), ember.tensor(b, device=ad)
    g4 = ember.tensor(x4, device=ad, requires_grad=True)
    return {
        "add cpu": lambda: ca + cb, "mul+sum cpu": lambda: (ca * cb).sum(),
        "matmul cpu": lambda: ca @ cb, "add autodiff": lambda: ga + gb,
        "add autodiff no grad": lambda: pa + pb, "matmul autodiff": lambda: ga @ gb,
        "sum(dim) autodiff": lambda: g4.sum(1),
        "backward tiny graph": lambda: ((ga @ gb).relu() * gb).sum().backward(),
    }


def worker() -> None:
    """Reads ``name number`` lines; answers each with the seconds per call of one run."""
    table = cases()
    for line in sys.stdin:
        name, number = line.rsplit(" ", 1)
        fn, n = table[name], int(number)
        t = time.perf_counter()
        for _ in range(n):
            fn()
        print((time.perf_counter() - t) / n, flush=True)


def start(tree: str) -> subprocess.Popen[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(sorted(glob.glob(f"{tree}/packages/*/src"))))
    return subprocess.Popen([sys.executable, __file__, "--worker"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)


def main() -> None:
    if sys.argv[1:] == ["--worker"]:
        worker()
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    procs = {"A": start(args.a), "B": start(args.b)}
    print(f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'op':<22}{'A':>10}{'B':>10}{'B/A':>8}")
    for name in NAMES:
        n = 20 if name.startswith("backward") else 400
        best = {"A": float("inf"), "B": float("inf")}
        for r in range(args.rounds):
            for side in ("A", "B") if r % 2 == 0 else ("B", "A"):
                p = procs[side]
                assert p.stdin is not None and p.stdout is not None
                p.stdin.write(f"{name} {n}\n")
                p.stdin.flush()
                best[side] = min(best[side], float(p.stdout.readline()))
        print(f"{name:<22}{best['A'] * 1e6:8.2f}us{best['B'] * 1e6:8.2f}us"
              f"{best['B'] / best['A']:8.3f}", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}")
    for p in procs.values():
        assert p.stdin is not None
        p.stdin.close()
        p.wait()


if __name__ == "__main__":
    main()
