"""Host cost of small eager ops: ember ``cpu`` / ``autodiff<cpu>`` beside PyTorch CPU.

On 8x8 operands the kernels take well under a microsecond, so what is timed is each
framework's per-op Python and dispatch cost.  Both sides run in one process, interleaved (an
ember run, then a torch run, repeated), at one thread each and at the default thread count.

Run: ``.venv/bin/python benchmarks/host_ops.py [--threads 1|default|both] [--number N]``
(PyTorch is a peer only; without it the torch column is empty).  Prints the best of the
interleaved runs in µs (other work on shared cores only ever adds time) and ember / torch
ratios (lower is better).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import ember

Case = tuple[str, Callable[[], Any], Callable[[], Any] | None]


def cases(torch: Any) -> list[Case]:
    """(name, ember call, torch call) for each measured op."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 8)).astype(np.float32)
    b = rng.standard_normal((8, 8)).astype(np.float32)
    x4 = rng.standard_normal((4, 8, 16)).astype(np.float32)
    xb = rng.standard_normal((32, 64)).astype(np.float32)
    ad = ember.device("autodiff<cpu>")
    ca, cb = ember.tensor(a), ember.tensor(b)
    ga = ember.tensor(a, device=ad, requires_grad=True)
    gb = ember.tensor(b, device=ad, requires_grad=True)
    g4 = ember.tensor(x4, device=ad, requires_grad=True)
    gx = ember.tensor(xb, device=ad)
    g = ember.Generator(0)
    lin = ember.nn.Linear(64, 32, generator=g).to(ad)

    def ember_backward() -> Any:
        return ((ga @ gb).relu() * gb).sum().backward()

    out: list[Case] = [
        ("matmul 8x8 cpu", lambda: ca @ cb, None),
        ("matmul 8x8 autodiff", lambda: ga @ gb, None),
        ("add 8x8 cpu", lambda: ca + cb, None),
        ("add 8x8 autodiff", lambda: ga + gb, None),
        ("x[3] autodiff", lambda: g4[3], None),
        ("chunk(4) autodiff", lambda: g4.chunk(4), None),
        ("reshape autodiff", lambda: g4.reshape(32, 16), None),
        ("permute autodiff", lambda: g4.permute(2, 0, 1), None),
        ("sum(dim) autodiff", lambda: g4.sum(1), None),
        ("Linear 32x64->32", lambda: lin(gx), None),
        ("backward tiny graph", ember_backward, None),
    ]
    if torch is None:
        return out
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    tga = torch.from_numpy(a.copy()).requires_grad_()
    tgb = torch.from_numpy(b.copy()).requires_grad_()
    t4 = torch.from_numpy(x4.copy()).requires_grad_()
    tx = torch.from_numpy(xb)
    tlin = torch.nn.Linear(64, 32)

    def torch_backward() -> Any:
        return torch.autograd.grad(((tga @ tgb).relu() * tgb).sum(), (tga, tgb))

    peers: list[Callable[[], Any]] = [
        lambda: ta @ tb, lambda: tga @ tgb, lambda: ta + tb, lambda: tga + tgb,
        lambda: t4[3], lambda: t4.chunk(4), lambda: t4.reshape(32, 16),
        lambda: t4.permute(2, 0, 1), lambda: t4.sum(1), lambda: tlin(tx), torch_backward,
    ]
    return [(name, fe, ft) for (name, fe, _), ft in zip(out, peers, strict=True)]


def per_call(fn: Callable[[], Any], number: int) -> float:
    """Seconds per call over one run of ``number`` calls."""
    t = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t) / number


def measure(rows: list[Case], number: int, repeat: int) -> list[tuple[str, float, float | None]]:
    """Best per-call time of each side, runs interleaved ember / torch."""
    out = []
    for name, fe, ft in rows:
        n = max(1, number // 10) if name.startswith(("backward", "Linear")) else number
        fe()
        if ft is not None:
            ft()
        te, tt = [], []
        for _ in range(repeat):
            te.append(per_call(fe, n))
            if ft is not None:
                tt.append(per_call(ft, n))
        out.append((name, min(te), min(tt) if tt else None))
    return out


def report(title: str, results: list[tuple[str, float, float | None]]) -> None:
    print(f"\n{title}")
    print(f"{'op':<22}{'ember':>10}{'torch':>10}{'ember/torch':>13}")
    for name, em, th in results:
        ths = f"{th * 1e6:8.2f}us" if th else f"{'-':>10}"
        rt = f"{em / th:13.2f}" if th else f"{'-':>13}"
        print(f"{name:<22}{em * 1e6:8.2f}us{ths}{rt}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", choices=["1", "default", "both"], default="both")
    parser.add_argument("--number", type=int, default=2000, help="calls per timed run")
    parser.add_argument("--repeat", type=int, default=7, help="timed runs per side")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        torch = None
    rows = cases(torch)
    if args.threads in ("1", "both"):
        from threadpoolctl import threadpool_limits

        default = torch.get_num_threads() if torch is not None else None
        with threadpool_limits(1):
            if torch is not None:
                torch.set_num_threads(1)
            report("one thread (numpy BLAS and torch intra-op)",
                   measure(rows, args.number, args.repeat))
        if torch is not None and default is not None:
            torch.set_num_threads(default)
    if args.threads in ("default", "both"):
        n = torch.get_num_threads() if torch is not None else "-"
        report(f"default threads (torch: {n})", measure(rows, args.number, args.repeat))


if __name__ == "__main__":
    main()
