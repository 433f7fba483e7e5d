"""Per-op cost of ember `cpu` beside numpy and PyTorch CPU, in one process, as ratios.

Run: ``.venv/bin/python benchmarks/ops_cpu.py`` (PyTorch is optional; a peer only).
Prints a table of medians; ratios are ember / peer (lower is better).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import timeit

import numpy as np

import ember


def per_call(fn, number: int, repeat: int = 7) -> float:
    """Median seconds per call over ``repeat`` runs of ``number`` calls."""
    fn()
    return statistics.median(timeit.repeat(fn, number=number, repeat=repeat)) / number


def chain_numpy(x):
    v = np.maximum(x * 1.5 + 0.25, 0) * 0.5 - 1
    return v * (1 / (1 + np.exp(-v)))


def chain_ember(x):
    v = (x * 1.5 + 0.25).relu() * 0.5 - 1
    return v * v.sigmoid()


def main() -> None:
    try:
        import torch

        torch.set_num_threads(os.cpu_count() or 1)
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    rows = []

    def case(name, shape_a, shape_b, op, number, tfn=None):
        a = rng.standard_normal(shape_a).astype(np.float32)
        b = rng.standard_normal(shape_b).astype(np.float32)
        ea, eb = ember.tensor(a), ember.tensor(b)
        t_np = per_call(lambda: op(a, b), number)
        t_em = per_call(lambda: op(ea, eb), number)
        t_th = None
        if torch is not None:
            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            t_th = per_call(lambda: (tfn or op)(ta, tb), number)
        rows.append((name, t_em, t_np, t_th))

    case("add 8x8", (8, 8), (8, 8), lambda x, y: x + y, 20000)
    case("add 1000x1000", (1000, 1000), (1000, 1000), lambda x, y: x + y, 50)
    case("matmul 512^3", (512, 512), (512, 512), lambda x, y: x @ y, 20)
    x = rng.standard_normal(2 ** 24).astype(np.float32)
    ex = ember.tensor(x)
    t_np = per_call(lambda: chain_numpy(x), 3, repeat=5)
    t_em = per_call(lambda: chain_ember(ex), 3, repeat=5)
    t_th = None
    if torch is not None:
        tx = torch.from_numpy(x)
        t_th = per_call(lambda: (lambda v: v * torch.sigmoid(v))(
            torch.relu(tx * 1.5 + 0.25) * 0.5 - 1), 3, repeat=5)
    rows.append(("7-op chain 2^24", t_em, t_np, t_th))

    print(f"{'op':<18}{'ember':>12}{'numpy':>12}{'torch':>12}{'ember/numpy':>13}{'ember/torch':>13}")
    for name, em, npy, th in rows:
        ths = f"{th * 1e6:10.1f}us" if th else f"{'-':>12}"
        rt = f"{em / th:13.2f}" if th else f"{'-':>13}"
        print(f"{name:<18}{em * 1e6:10.1f}us{npy * 1e6:10.1f}us{ths}{em / npy:13.2f}{rt}")
    # import cost with every installed plugin (fresh interpreter, median of 5)
    cmd = [sys.executable, "-c", "import time; t=time.perf_counter(); import ember; "
           "ember.device('cpu'); print(time.perf_counter()-t)"]
    times = [float(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
             for _ in range(5)]
    print(f"import ember + plugin registry: {statistics.median(times) * 1e3:.0f} ms (median of 5)")


if __name__ == "__main__":
    main()
