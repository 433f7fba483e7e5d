"""ember's own Python cost of a training step, measured on any CPU: the MLP and the guide CNN
on ``autodiff<triton-interpret>`` with every kernel launch and allocation stubbed out after a
warm-up, so what remains is what a GPU step spends in core, Autodiff, the optimizer and the
Triton backend before its launches (the recorded-launch paths a GPU takes are the ones run).

    python benchmarks/host_overhead.py [mlp|guide] [--profile]

No peer: the numbers compare revisions of ember on one machine (run both in one sitting,
alternating); ``--profile`` adds a cProfile table of the step.  The GPU host's figures, against
PyTorch, come from ``benchmarks/gpu/perf.py``.  The results of stubbed steps are garbage by
design.
"""

from __future__ import annotations

import collections
import cProfile
import pstats
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _step(which: str) -> Any:
    import ember

    sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
    from _mlp import guide_step

    if which != "mlp":
        return guide_step(ember, "autodiff<triton-interpret>", batch=4)
    dev = ember.device("autodiff<triton-interpret>")
    f, nn, g = ember.nn.functional, ember.nn, ember.Generator(0)
    model = nn.Sequential(nn.Linear(8, 16, generator=g), nn.ReLU(),
                          nn.Linear(16, 16, generator=g), nn.ReLU(),
                          nn.Linear(16, 4, generator=g)).to(dev)
    opt = ember.optim.Adam(model.parameters(), lr=1e-3)
    xb = ember.randn((4, 8), device=dev, generator=g)
    yb = ember.randint(0, 4, (4,), device=dev, generator=g)

    def mlp() -> None:
        opt.step(f.cross_entropy(model(xb), yb).backward())
    return mlp


def _stub_kernels() -> None:
    """Launches return a no-op entry (so recorded-launch paths are taken) and allocations
    hand out one buffer."""
    import ember
    from ember_triton.backend import TritonBackend

    be = ember.device("triton-interpret").backend

    def noop(grid: Any, stream: Any, raw: Any) -> None:
        return None

    TritonBackend.launch = lambda self, kernel, grid, *a, **m: noop  # type: ignore[method-assign]
    be._planned.clear()
    be.elementwise_plans.clear()
    mem = be.memory
    real = mem.allocate_at
    buf = real(1 << 20)
    mem.allocate_at = lambda n: buf if n <= 1 << 20 else real(n)
    mem.stream = lambda: 0


def main(argv: list[str]) -> int:
    which = argv[0] if argv and not argv[0].startswith("-") else "guide"
    step = _step(which)
    for _ in range(3):  # compiles and records the launches
        step()
    _stub_kernels()
    for _ in range(5):
        step()
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(100):
            step()
        best = min(best, (time.perf_counter() - t) / 100)
    print(f"{which} step: {best * 1e6:.1f} us of Python (best of 5 x 100, kernels stubbed)")
    if "--profile" in argv:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(300):
            step()
        prof.disable()
        st = pstats.Stats(prof)
        by_file: collections.Counter[str] = collections.Counter()
        for (fn, _, _), (_, _, tt, _, _) in st.stats.items():  # type: ignore[attr-defined]
            by_file[fn.split("/src/")[-1] if "/src/" in fn else Path(fn).name] += tt
        for name, tt in by_file.most_common(15):
            print(f"  {tt / 300 * 1e6:8.1f} us  {name}")
        st.sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
