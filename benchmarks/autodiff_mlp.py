"""Forward + backward of an MLP 784-256-256-10 (batch 128, float32) on ``autodiff<cpu>``
against PyTorch on the CPU.  Prints both medians and the ratio.

Run: ``OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/autodiff_mlp.py [--repeats 200]``.
PyTorch gets as many threads as OpenBLAS (``OPENBLAS_NUM_THREADS``), so both run their BLAS on
the same number of cores.  torch is used here only as the peer being compared with.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time
from collections.abc import Callable

import numpy as np

import ember
import ember.functional as F

SIZES = (784, 256, 256, 10)
BATCH = 128


def _params(rng: np.random.Generator) -> list[np.ndarray]:
    out = []
    for fan_in, fan_out in itertools.pairwise(SIZES):
        bound = 1 / np.sqrt(fan_in)
        out.append(rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32))
        out.append(rng.uniform(-bound, bound, fan_out).astype(np.float32))
    return out


def _median_ms(step: Callable[[], object], repeats: int) -> float:
    for _ in range(20):
        step()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def ember_step(device: str = "autodiff<cpu>") -> Callable[[], object]:
    rng = np.random.default_rng(0)
    params = [ember.tensor(p, device=device, requires_grad=True) for p in _params(rng)]
    x = ember.tensor(rng.normal(size=(BATCH, SIZES[0])).astype(np.float32), device=device)
    y = ember.tensor(rng.integers(0, SIZES[-1], BATCH), device=device)

    def step() -> object:
        h = x
        for i in range(0, len(params), 2):
            h = F.linear(h, params[i], params[i + 1])
            if i + 2 < len(params):
                h = F.relu(h)
        grads = F.cross_entropy(h, y).backward()
        return [grads[p] for p in params]

    return step


def torch_step() -> Callable[[], object]:
    import torch

    if "OPENBLAS_NUM_THREADS" in os.environ:
        torch.set_num_threads(int(os.environ["OPENBLAS_NUM_THREADS"]))
    rng = np.random.default_rng(0)
    params = [torch.tensor(p, requires_grad=True) for p in _params(rng)]
    x = torch.tensor(rng.normal(size=(BATCH, SIZES[0])).astype(np.float32))
    y = torch.tensor(rng.integers(0, SIZES[-1], BATCH))

    def step() -> object:
        h = x
        for i in range(0, len(params), 2):
            h = torch.nn.functional.linear(h, params[i], params[i + 1])
            if i + 2 < len(params):
                h = torch.relu(h)
        return torch.autograd.grad(torch.nn.functional.cross_entropy(h, y), params)

    return step


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def memory(steps: int) -> None:
    """RSS over ``steps`` training steps (forward, backward, an SGD update of every leaf)."""
    device = "autodiff<cpu>"
    wrap = ember.device(device).backend.wrap
    rng = np.random.default_rng(0)
    params = [ember.tensor(p, device=device, requires_grad=True) for p in _params(rng)]
    x = ember.tensor(rng.normal(size=(BATCH, SIZES[0])).astype(np.float32), device=device)
    y = ember.tensor(rng.integers(0, SIZES[-1], BATCH), device=device)
    for i in range(steps + 1):
        if i in (0, 10, 100, steps // 2, steps):
            print(f"  step {i:5d}: RSS {_rss_mib():8.2f} MiB")
        h = x
        for j in range(0, len(params), 2):
            h = F.linear(h, params[j], params[j + 1])
            if j + 2 < len(params):
                h = F.relu(h)
        grads = F.cross_entropy(h, y).backward()
        params = [wrap(p.inner - grads[p] * 0.01).requires_grad_()  # type: ignore[attr-defined]
                  for p in params]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--memory", type=int, metavar="STEPS", default=0,
                        help="instead of timing, print RSS over STEPS training steps")
    args = parser.parse_args()
    if args.memory:
        print(f"MLP 784-256-256-10, batch {BATCH}: process memory over {args.memory} steps")
        memory(args.memory)
        return
    results = {}
    # interleave the two, twice, so that neither profits from a quieter moment of the machine
    for _ in range(3):
        results.setdefault("ember", []).append(_median_ms(ember_step(), args.repeats))
        results.setdefault("torch", []).append(_median_ms(torch_step(), args.repeats))
    e, t = min(results["ember"]), min(results["torch"])
    print(f"MLP 784-256-256-10, batch {BATCH}, float32, forward+backward")
    print(f"  ember autodiff<cpu>: {e:.3f} ms")
    print(f"  PyTorch CPU:         {t:.3f} ms")
    print(f"  ratio:               {e / t:.2f}x")


if __name__ == "__main__":
    main()
