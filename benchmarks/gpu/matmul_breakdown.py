"""Where does a 4096³ matmul's time go?  Times, in interleaved rounds in one process: torch
(cuBLAS), ember's ``a @ b`` with Triton alone and with kernel selection, and the pieces of the
Triton path (the persistent TMA kernel on operands already in its layout; for tf32 the
transposed copy of B), each with CUDA events (``python benchmarks/gpu/matmul_breakdown.py``)."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child() -> None:
    import torch

    import ember
    import ember_triton.linalg as la

    d = ember.device("cuda:0")
    be = d.backend
    timer = be.memory.timer
    n = 4096
    flop = 2 * n ** 3
    print(f"{'case':34} {'best TFLOP/s':>12} {'median':>8}  (5 rounds)")
    for name, dt, tdt in (("tf32", ember.float32, torch.float32),
                          ("bf16", ember.bfloat16, torch.bfloat16)):
        tf32 = name == "tf32"
        be.matmul_precision = "tf32" if tf32 else "ieee"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a = ember.randn((n, n), dtype=dt, device=d)
        b = ember.randn((n, n), dtype=dt, device=d)
        ta = torch.randn((n, n), dtype=tdt, device="cuda")
        tb = torch.randn((n, n), dtype=tdt, device="cuda")
        out = be.empty((n, n), a._data.dtype)
        bt = be.contiguous(b._data.transpose((1, 0))).transpose((1, 0))  # K-major view of B
        args = (n, n, n, 1, 0, 0, n, 1, 0, 0, *bt.strides) if tf32 else \
            (n, n, n, 1, 0, 0, n, 1, 0, 0, n, 1)
        src = bt if tf32 else b._data
        cfg = la._TMA_CONFIGS["tf32" if tf32 else "half"][0]

        def mm(cublas: bool, a=a, b=b):  # type: ignore[no-untyped-def]
            be.use_cublas = cublas
            return a @ b

        cases = {
            "torch": lambda ta=ta, tb=tb: ta @ tb,
            "ember a @ b, Triton alone": lambda: mm(False),
            "ember a @ b, selected": lambda: mm(True),
            f"tma kernel {cfg}": lambda out=out, a=a, src=src, args=args, cfg=cfg:
                la._tma_matmul(be, cfg, out, a._data, src, args, be.matmul_precision),
        }
        if tf32:
            cases["transposed copy of B (time as TFLOP/s)"] = \
                lambda b=b: be.contiguous(b._data.transpose((1, 0)))
        for fn in cases.values():  # selection and compilation first
            fn()
        times: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(5):
            for k, fn in cases.items():
                times[k].append(timer(fn))
        for k, ts in times.items():
            best, mid = flop / min(ts) / 1e9, flop / statistics.median(ts) / 1e9
            print(f"{name} {k:34} {best:12.1f} {mid:8.1f}   {min(ts) * 1e3:7.1f} us")
        del a, b, ta, tb, out, bt


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from with_env import as_child

    as_child(__file__, child)
