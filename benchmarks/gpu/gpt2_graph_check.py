"""Compiled GPT-2 steps against eager ones, replayed as CUDA graphs and as Python.

    python benchmarks/gpu/with_env.py python benchmarks/gpu/gpt2_graph_check.py [--small]

For the tiny GPT-2 of ``gpt2.py`` (bf16 autocast and fp32) and with ``--small`` the 124M one:
the losses of eager steps, of ``ember.compile`` replayed as a CUDA graph
(``EMBER_COMPILE_GRAPHS=1``, `ember_cuda.graph.ProgramGraph`) and replayed as Python
(``EMBER_COMPILE_GRAPHS=0``), over batches cycled as a training loop cycles them; then the
parameters that differ most from the eager run's after the last step, and whether the batch
tensors the steps were given still hold their data.  The graph's first launch is the fourth
step (the first is a warm-up, the second is traced, the third records the graph while running
the program as Python), so a difference that starts there is the graph's.  ``CHECK_DEVICE=cpu``
runs the same comparison on another device (no graphs there: both compiled runs are Python).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _gpt2  # noqa: E402
import gpt2  # noqa: E402


def _train(setup: Any, compiled: bool, graphs: bool, steps: int
           ) -> tuple[list[float], dict[str, np.ndarray], Any]:
    import ember

    os.environ["EMBER_COMPILE_GRAPHS"] = "1" if graphs else "0"
    side = _gpt2.ember_side(setup, compiled)
    losses = [float(side.step(i).item()) for i in range(steps)]
    weights = {k: v.to(dtype=ember.float32).numpy() for k, v in side.model.state_dict().items()}
    return losses, weights, side


def compare(label: str, cfg: Any, batch: int, steps: int, precision: str = "bf16",
            device: str = os.environ.get("CHECK_DEVICE", "cuda:0")) -> bool:
    t0 = time.perf_counter()
    setup = gpt2.prepare(cfg, device, batch=batch, precision=precision)
    eager, w_eager, _ = _train(setup, False, False, steps)
    graph, w_graph, side = _train(setup, True, True, steps)
    python, w_python, _ = _train(setup, True, False, steps)
    print(f"== {label} ({time.perf_counter() - t0:.0f} s)")
    for name, losses in (("eager", eager), ("graph", graph), ("python", python)):
        print(f"{name:<8}" + " ".join(f"{x:.5f}" for x in losses))
    fn = side.info["compiled"]
    print("runners:", [(type(p.runner).__name__, getattr(p.runner, "records", None))
                       for p in fn.programs()], fn.stats)
    ok = True
    for name, weights, losses in (("graph", w_graph, graph), ("python", w_python, python)):
        worst = sorted(((float(np.abs(weights[k] - w_eager[k]).max()), k) for k in w_eager),
                       reverse=True)[:4]
        rel = max(abs(a - b) / abs(b) for a, b in zip(losses, eager, strict=True))
        tol = 1e-4 if precision == "fp32" else 2e-3
        ok &= rel <= tol
        print(f"{name} vs eager: worst loss {rel:.2e} (<= {tol:g}); largest parameter "
              "differences " + ", ".join(f"{k} {d:.1e}" for d, k in worst))
    intact = all(np.array_equal(x.numpy(), xb) and np.array_equal(y.numpy(), yb)
                 for (x, y), (xb, yb) in zip(side.info["data"], setup.data, strict=True))
    print("the steps' batch tensors still hold their data:", intact)
    return ok and intact


def main() -> int:
    results = [compare("tiny, bf16 autocast", gpt2.TINY, 4, 8),
               compare("tiny, fp32", gpt2.TINY, 4, 8, precision="fp32")]
    if "--small" in sys.argv:
        results.append(compare("GPT-2 small, bf16 autocast", _gpt2.GPTConfig(), 8, 7))
    print("PASS" if all(results) else "FAIL")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
