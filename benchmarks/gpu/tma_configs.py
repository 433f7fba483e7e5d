"""Which tile configs suit `matmul_tma`?  Times ember's persistent TMA matmul kernel alone (B
already in the layout it reads: K-major for tf32, row-major for the half types) over a grid
of configs, with the tile and K loops flattened or not, at 4096³ and 8192³, beside cuBLAS
through CuPy (``python benchmarks/gpu/tma_configs.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CONFIGS = {
    "tf32": [(128, 256, 32, 8, 8, 3), (128, 256, 32, 8, 8, 4), (128, 128, 32, 8, 4, 4),
             (128, 128, 32, 8, 4, 5), (256, 128, 32, 8, 8, 3), (128, 256, 16, 8, 8, 6),
             (128, 128, 64, 8, 8, 3), (128, 256, 32, 16, 8, 3)],
    "bf16": [(128, 256, 64, 8, 8, 3), (128, 256, 64, 8, 8, 4), (256, 128, 64, 8, 8, 3),
             (128, 128, 64, 8, 4, 4), (128, 256, 64, 16, 8, 3), (128, 128, 128, 8, 8, 3)],
}


def child() -> None:
    import cupy as cp
    import numpy as np

    import ember

    d = ember.device("cuda:0")
    be = d.backend
    timer = be.memory.timer
    kern = be.module("linalg").matmul_tma
    be.memory.use_scratch()
    rows = []
    for name, dt in (("tf32", ember.float32), ("bf16", ember.bfloat16)):
        for n in (4096, 8192):
            flop = 2 * n ** 3
            a = ember.randn((n, n), dtype=dt, device=d)
            b = ember.randn((n, n), dtype=dt, device=d)
            out = ember.empty((n, n), dtype=dt, device=d)
            A, B, C = a._data, b._data, out._data
            kmajor = name == "tf32"
            src = be.contiguous(B.transpose((1, 0))) if kmajor else B
            sbk, sbn = (1, n) if kmajor else (n, 1)
            precision = "tf32" if kmajor else "ieee"
            ref = a.numpy()[:128].astype(np.float64) @ b.numpy().astype(np.float64)
            ca = cp.asarray(a.numpy().astype(np.float32)) if kmajor else None
            with cp.cuda.Device(0):
                if kmajor:
                    cb = cp.asarray(b.numpy())
                    blas = timer(lambda ca=ca, cb=cb: ca @ cb)
                else:
                    blas = float("nan")
            for cfg in CONFIGS[name]:
                for flatten in (False, True):
                    bm, bn, bk, g, w, s = cfg
                    step = min((n // bm) * (n // bn), be.processors)

                    def call(bm=bm, bn=bn, bk=bk, g=g, w=w, s=s, step=step, flatten=flatten,
                             A=A, C=C, src=src, sbk=sbk, sbn=sbn, precision=precision,
                             kmajor=kmajor, n=n):  # type: ignore[no-untyped-def]
                        kern[(step,)](C.arg(), A.arg(), src.arg(), C.arg(), n, n, n, n, sbk, sbn,
                                      step, PRECISION=precision, UPCAST=False, BM=bm, BN=bn,
                                      BK=bk, GROUP_M=g, HAS_BIAS=False, B_KMAJOR=kmajor,
                                      FLATTEN=flatten, num_warps=w, num_stages=s)
                    try:
                        call()
                        ms = timer(call)
                        got = out.numpy()[:128].astype(np.float64)
                        err = float(abs(got - ref).max() / abs(ref).max())
                        rows.append((name, n, cfg, flatten, flop / ms / 1e9, err, blas))
                    except Exception as exc:
                        rows.append((name, n, cfg, flatten, 0.0, float("nan"), blas))
                        print(f"{name} {n} {cfg} flatten={flatten}: {exc!r}"[:300])
            del a, b, out, src
    print(f"{'dtype':5} {'n':>5} {'config':26} {'flat':5} {'TFLOP/s':>8} {'err':>8} "
          f"{'vs cuBLAS(cupy)':>15}")
    for name, n, cfg, flatten, tf, err, blas in rows:
        ratio = (tf / (2 * n ** 3 / blas / 1e9)) if blas == blas else float("nan")
        print(f"{name:5} {n:5} {cfg!s:26} {flatten!s:5} {tf:8.1f} {err:8.1e} {ratio:15.3f}")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from with_env import as_child

    as_child(__file__, child)
