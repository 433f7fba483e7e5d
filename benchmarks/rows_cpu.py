"""The cpu's row kernels: each composite kernel of `ember_cpu.composite` that runs its row
program (`ember.backend.rows`, numba loops from `ember_cpu._rows`) against the same kernel's
numpy path, and the row programs of the kernels that keep numpy against that numpy kernel,
interleaved in one process (best of 7 calls, three rounds), float32, one thread.

    OPENBLAS_NUM_THREADS=1 python benchmarks/rows_cpu.py

Prints ``IR / numpy`` per kernel and shape (below 1: the row program is faster).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

SHAPES = [(4096, 64), (512, 1024), (64, 8192)]


def _best(f: Callable[[], Any], n: int = 7) -> float:
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return min(ts)


Cases = tuple[dict[str, Callable[[], Any]],
              dict[str, tuple[list[np.ndarray], dict[str, Any], Callable[[], Any]]]]


def _cases(c: Any, x: np.ndarray, g: np.ndarray, w: np.ndarray, t: np.ndarray, y: np.ndarray,
           mean: np.ndarray, rstd: np.ndarray) -> Cases:
    """The routed kernels (timed with and without their row program) and the kept ones."""
    both: dict[str, Callable[[], Any]] = {
        "layer_norm (weight, bias)": lambda: c.layer_norm(x, w, w, ndim=1, eps=1e-5,
                                                          weight=True, bias=True),
        "layer_norm_backward (affine)": lambda: c.layer_norm_backward(
            g, x, mean, rstd, w, ndim=1, weight=True, affine=True),
        "rms_norm (weight)": lambda: c.rms_norm(x, w, ndim=1, eps=1e-5, weight=True),
        "rms_norm_backward (weight)": lambda: c.rms_norm_backward(g, x, rstd, w, ndim=1,
                                                                  weight=True),
        "softmax_backward": lambda: c.softmax_backward(y, g, 1),
    }
    kept: dict[str, tuple[list[np.ndarray], dict[str, Any], Callable[[], Any]]] = {
        "softmax (kept numpy)": ([x], {}, lambda: c.softmax(x, 1)),
        "log_softmax (kept numpy)": ([x], {}, lambda: c.log_softmax(x, 1)),
        "cross_entropy (kept numpy)": ([x, t], {"ignore_index": -100,
                                                "label_smoothing": 0.0},
                                       lambda: c.cross_entropy(x, t, -100, 0.0, "none")),
    }
    return both, kept


def main() -> None:
    from ember.backend import rows
    from ember_cpu import _rows, composite as c

    _rows.SYNC = True  # compile on first use: every timed call runs the compiled loops
    rng = np.random.default_rng(0)
    routed = c._ir
    for shape in SHAPES:
        x = rng.standard_normal(shape).astype(np.float32)
        g = rng.standard_normal(shape).astype(np.float32)
        w = rng.standard_normal(shape[1]).astype(np.float32)
        t = rng.integers(0, shape[1], shape[0])
        y = c.softmax(x, 1)
        mean = x.mean(1)
        rstd = (1 / np.sqrt(x.var(1) + 1e-5)).astype(np.float32)
        both, kept = _cases(c, x, g, w, t, y, mean, rstd)
        for name, f in both.items():
            f()
            ir_t, np_t = [], []
            for _ in range(3):
                c._ir = routed
                ir_t.append(_best(f))
                c._ir = lambda *args: None  # the numpy path
                np_t.append(_best(f))
            c._ir = routed
            print(f"{name:30s} {shape!s:12s} IR / numpy {min(ir_t) / min(np_t):5.2f}")
        for name, (ins, params, hand) in kept.items():
            p = rows.expand(name.split()[0], [a.dtype.name for a in ins], params)

            def ir(p: Any = p, ins: list[np.ndarray] = ins) -> Any:
                return _rows.run(p, ins)

            ir()
            ir_t, np_t = [], []
            for _ in range(3):
                ir_t.append(_best(ir))
                np_t.append(_best(hand))
            print(f"{name:30s} {shape!s:12s} IR / numpy {min(ir_t) / min(np_t):5.2f}")


if __name__ == "__main__":
    main()
