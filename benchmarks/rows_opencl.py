"""OpenCL's composite row ops: one kernel rendered from the row program (`ember_opencl.rows`)
against core's decomposition into primitive ops, interleaved in one process (best of 5 calls,
three rounds, each call synchronised), float32 on ``opencl:0``; the backward ops timed inside
a forward and backward step on ``autodiff<opencl:0>``.

    python benchmarks/rows_opencl.py

Prints ``IR / decomposed`` per op and shape (below 1: the row kernel is faster).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

SHAPES = [(4096, 64), (512, 1024), (64, 8192)]


def _best(f: Callable[[], Any], sync: Callable[[], None], n: int = 5) -> float:
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        sync()
        ts.append(time.perf_counter() - t)
    return min(ts)


def main() -> None:
    import ember
    import ember.nn.functional as F
    from ember.ops import composite as cops
    from ember_opencl import rows

    d = ember.device("opencl:0")
    ad = ember.device("autodiff<opencl:0>")
    table = d.backend.kernels
    rt = d.backend.runtime
    rng = np.random.default_rng(0)
    for shape in SHAPES:
        x = ember.tensor(rng.standard_normal(shape), dtype=ember.float32, device=d)
        w = ember.tensor(rng.standard_normal(shape[1]), dtype=ember.float32, device=d)
        xa = ember.tensor(rng.standard_normal(shape), dtype=ember.float32, device=ad,
                          requires_grad=True)
        n = shape[1]
        cases: dict[str, tuple[Any, Any, Callable[[], Any]]] = {
            "softmax (not routed)": (cops.softmax, rows.softmax_kernel(rt, "softmax"),
                                     lambda x=x: F.softmax(x, -1)),
            "log_softmax (not routed)": (cops.log_softmax,
                                         rows.softmax_kernel(rt, "log_softmax"),
                                         lambda x=x: F.log_softmax(x, -1)),
            "softmax step (bwd, not rtd)": (
                cops.softmax_backward, rows.softmax_kernel(rt, "softmax_backward"),
                lambda xa=xa: F.softmax(xa, -1).sum().backward()),
            "log_softmax step (bwd, n.r.)": (
                cops.log_softmax_backward, rows.softmax_kernel(rt, "log_softmax_backward"),
                lambda xa=xa: F.log_softmax(xa, -1).sum().backward()),
            "layer_norm (weight, bias)": (
                cops.layer_norm, None, lambda x=x, w=w, n=n: F.layer_norm(x, (n,), w, w)),
            "rms_norm (weight)": (cops.rms_norm, None,
                                  lambda x=x, w=w, n=n: F.rms_norm(x, (n,), w)),
        }
        for name, (op, kernel, f) in cases.items():
            kernel = kernel or table[op]
            routed = op in table
            ir_t, dec_t = [], []
            for _ in range(3):
                table[op] = kernel
                f()
                ir_t.append(_best(f, d.synchronize))
                del table[op]  # core's decomposition
                f()
                dec_t.append(_best(f, d.synchronize))
            if routed:
                table[op] = kernel
            print(f"{name:28s} {shape!s:12s} IR / decomposed {min(ir_t) / min(dec_t):5.2f}"
                  f"  ({min(ir_t) * 1e3:.2f} ms vs {min(dec_t) * 1e3:.2f} ms)", flush=True)


if __name__ == "__main__":
    main()
