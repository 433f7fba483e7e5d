"""Row kernels on the GPU: the hand-written Triton kernels (`ember_triton.rows`) against the
ones rendered from their row programs (`ember.backend.rows`, `ember_triton._rows_source`),
checked against each other, then timed in interleaved rounds (``_rounds.py``).

    python benchmarks/gpu/rows_ir.py [--quick]

Prints one line per (kernel, shape, dtype): the median milliseconds of each and ``ir/hand``
(below 1: the IR kernel is faster), and the largest difference of their outputs.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rounds import interleaved
from with_env import as_child

SHAPES = [(4096, 768), (8192, 1024), (2048, 4096), (1024, 50304)]
if "--interpret" in sys.argv:
    SHAPES = [(64, 100)]


def _cases(be: Any, x: Any, g: Any, w: Any, t: Any, mean: Any, rstd: Any
           ) -> list[tuple[str, list[Any], dict[str, Any], Any]]:
    """(row kernel, inputs, params, the hand kernel's call) of each kernel measured."""
    from ember.ops import composite as cops

    return [
        ("softmax", [x], {}, lambda: be.kernels[cops.softmax](x, dim=1)),
        ("log_softmax", [x], {}, lambda: be.kernels[cops.log_softmax](x, dim=1)),
        ("softmax_backward", [x, g], {},
         lambda: be.kernels[cops.softmax_backward](x, g, dim=1)),
        ("log_softmax_backward", [x, g], {},
         lambda: be.kernels[cops.log_softmax_backward](x, g, dim=1)),
        ("layer_norm", [x, w, w], {"eps": 1e-5, "weight": True, "bias": True},
         lambda: be.kernels[cops.layer_norm](x, w, w, ndim=1, eps=1e-5, weight=True,
                                             bias=True)),
        ("rms_norm", [x, w], {"eps": 1e-5, "weight": True},
         lambda: be.kernels[cops.rms_norm](x, w, ndim=1, eps=1e-5, weight=True)),
        ("layer_norm_backward", [g, x, mean, rstd, w], {"weight": True},
         lambda: be.kernels[cops.layer_norm_backward](g, x, mean, rstd, w, ndim=1,
                                                      weight=True, affine=False)),
        ("rms_norm_backward", [g, x, rstd, w], {"weight": True},
         lambda: be.kernels[cops.rms_norm_backward](g, x, rstd, w, ndim=1,
                                                    weight=True)),
        ("cross_entropy", [x, t], {"ignore_index": -100, "label_smoothing": 0.0},
         lambda: be.kernels[cops.cross_entropy](x, t, ignore_index=-100,
                                                label_smoothing=0.0, reduction="none")),
    ]


def child() -> None:
    import numpy as np

    import ember
    from ember.backend import rows
    from ember_triton import _rows_source

    quick = "--quick" in sys.argv
    d = ember.device("triton-interpret" if "--interpret" in sys.argv else "cuda:0")
    be = d.backend
    rng = np.random.default_rng(0)

    def up(a: np.ndarray, dt: Any) -> Any:
        return ember.tensor(a, dtype=dt, device=d)._data

    for m, n in [SHAPES[0], SHAPES[-1]] if quick else SHAPES:
        for dtn in ("float32", "bfloat16"):
            dt = getattr(ember, dtn)
            x = up(rng.standard_normal((m, n)), dt)
            g = up(rng.standard_normal((m, n)), dt)
            w = up(rng.standard_normal(n), dt)
            t = up(rng.integers(0, n, m), ember.int64)
            stat = ember.float32
            mean = up(rng.standard_normal(m) * 0.1, stat)
            rstd = up(rng.random(m) + 0.5, stat)
            cases = _cases(be, x, g, w, t, mean, rstd)
            for name, ins, params, hand in cases:
                p = rows.expand(name, [a.dtype.name for a in ins], params)

                def ir(p: Any = p, ins: list[Any] = ins) -> Any:
                    return _rows_source.run(be, p, ins)

                a, b = ir()[0], hand()
                b = b[0] if isinstance(b, tuple) else b
                diff = float(np.nanmax(np.abs(
                    be.to_numpy(a, None).astype(np.float64)
                    - be.to_numpy(b, None).astype(np.float64))))
                sync = be.synchronize
                ms = interleaved({"ir": ir, "hand": hand}, {"ir": sync, "hand": sync},
                                 rounds=3 if quick else 9, reps=10 if quick else 20)
                mi, mh = statistics.median(ms["ir"]), statistics.median(ms["hand"])
                print(f"{name:22s} {m:5d}x{n:<6d} {dtn:9s} ir {mi:8.4f} ms  hand {mh:8.4f} ms"
                      f"  ir/hand {mi / mh:5.2f}  maxdiff {diff:.2e}", flush=True)


if __name__ == "__main__":
    as_child(__file__, child)
