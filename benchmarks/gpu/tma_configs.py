"""Which tile configs suit `matmul_tma`?  Times ember's persistent TMA matmul kernel alone (B
already in the layout it reads: K-major for tf32, row-major for bf16) over a list of configs
(tile and K loops flattened or not) at 4096³ and 8192³, in TFLOP/s; no peer (torch's cuBLAS
figures are in ``perf.py``).  A tuning benchmark: ``linalg._TMA_CONFIGS`` comes from it, so run
it again after a Triton upgrade or on a new GPU model:

    python benchmarks/gpu/tma_configs.py    # puts ember on the path itself (with_env.as_child)
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: ``(BM, BN, BK, GROUP_M, num_warps, num_stages, FLATTEN)``, as ``linalg._TMA_CONFIGS``.
#: Measured on the H200 (2026-12-03 17:01 UTC): flattening gains 1-4% where shared memory
#: allows it (not with 128x256 float32 tiles); storing the epilogue in two halves, which
#: lets those flatten, gained nothing (389-392 TFLOP/s either way) and was dropped.
CONFIGS = {
    "tf32": [(128, 256, 32, 8, 8, 3, 0), (128, 256, 32, 16, 8, 3, 0), (128, 256, 32, 8, 8, 4, 0),
             (128, 128, 32, 8, 4, 5, 1), (256, 128, 32, 8, 8, 3, 0)],
    "bf16": [(128, 256, 64, 8, 8, 3, 1), (128, 256, 64, 16, 8, 3, 1), (128, 256, 64, 8, 8, 4, 1),
             (256, 128, 64, 8, 8, 3, 1), (128, 128, 64, 8, 4, 4, 1)],
}


def child() -> None:
    import numpy as np

    import ember

    d = ember.device("cuda:0")
    be = d.backend
    timer = be.memory.timer
    kern = be.module("linalg").matmul_tma
    be.memory.use_scratch()
    print(f"{'dtype':5} {'n':>5} {'config':30} {'TFLOP/s':>8} {'rel err':>8}")
    for name, dt in (("tf32", ember.float32), ("bf16", ember.bfloat16)):
        for n in (4096, 8192):
            a = ember.randn((n, n), dtype=dt, device=d)
            b = ember.randn((n, n), dtype=dt, device=d)
            out = ember.empty((n, n), dtype=dt, device=d)
            kmajor = name == "tf32"
            src = be.contiguous(b._data.transpose((1, 0))) if kmajor else b._data
            ref = a.numpy()[:128].astype(np.float64) @ b.numpy().astype(np.float64)
            for cfg in CONFIGS[name]:
                bm, bn, bk, g, w, s, flatten = cfg
                step = min((n // bm) * (n // bn), be.processors)
                args = (out._data.arg(), a._data.arg(), src.arg(), out._data.arg(), n, n, n, n,
                        *((1, n) if kmajor else (n, 1)), step)
                meta = dict(PRECISION="tf32" if kmajor else "ieee", UPCAST=False, BM=bm, BN=bn,
                            BK=bk, GROUP_M=g, HAS_BIAS=False, B_KMAJOR=kmajor,
                            FLATTEN=bool(flatten), num_warps=w, num_stages=s)
                try:
                    ms = timer(lambda step=step, args=args, meta=meta: kern[(step,)](*args,
                                                                                  **meta))
                except Exception as exc:
                    print(f"{name:5} {n:5} {cfg!s:30} failed: {exc!r}"[:200])
                    continue
                got = out.numpy()[:128].astype(np.float64)
                err = float(abs(got - ref).max() / abs(ref).max())
                print(f"{name:5} {n:5} {cfg!s:30} {2 * n ** 3 / ms / 1e9:8.1f} {err:8.1e}")
            del a, b, out, src


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from with_env import as_child

    as_child(__file__, child)
