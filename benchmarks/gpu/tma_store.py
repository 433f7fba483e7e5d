"""Does `matmul_tma` gain from storing C through a tensor descriptor (``TMA_STORE``)?
(``python benchmarks/gpu/tma_store.py``)

With ``TMA_STORE`` the epilogue writes C's tile in two halves through one half-tile buffer in
shared memory and asynchronous TMA stores, which drain under the next tile's loads; without
it, masked pointer stores.  For tf32 the 128x256 tiles cannot flatten the tile and K loops
(shared memory), so their epilogue does not overlap the next tile otherwise.  Times the
kernel alone (B already in the layout it reads) for the tf32 and bf16 configs of
`linalg._TMA_CONFIGS` at 4096³ and 8192³, both ways, with torch, in five rotated rounds;
prints TFLOP/s (best), the median ratio torch / this, and each result's error against torch.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child() -> None:
    import torch

    import ember
    from ember_triton.linalg import _TMA_CONFIGS

    d = ember.device("cuda:0")
    be = d.backend
    timer = be.memory.timer
    kern = be.module("linalg").matmul_tma
    be.memory.use_scratch()
    table = []
    for name, dt, tdt in (("tf32", ember.float32, torch.float32),
                          ("bf16", ember.bfloat16, torch.bfloat16)):
        torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
        for n in (4096, 8192):
            ta = torch.randn(n, n, device="cuda", dtype=tdt)
            tb = torch.randn(n, n, device="cuda", dtype=tdt)
            a = ember.tensor(ta.float().cpu().numpy(), dtype=dt, device=d)
            b = ember.tensor(tb.float().cpu().numpy(), dtype=dt, device=d)
            out = ember.empty((n, n), dtype=dt, device=d)
            kmajor = name == "tf32"
            src = be.contiguous(b._data.transpose((1, 0))) if kmajor else b._data
            ref = (ta[:256] @ tb).float()
            cases = {"torch": lambda ta=ta, tb=tb: ta @ tb}
            for cfg in _TMA_CONFIGS["tf32" if kmajor else "half"][:3]:
                bm, bn, bk, g, w, s, flatten = cfg
                step = min((n // bm) * (n // bn), be.processors)
                args = (out._data.arg(), a._data.arg(), src.arg(), out._data.arg(), n, n, n, n,
                        *((1, n) if kmajor else (n, 1)), step)
                for store in (False, True):
                    meta = dict(PRECISION="tf32" if kmajor else "ieee", UPCAST=False, BM=bm,
                                BN=bn, BK=bk, GROUP_M=g, HAS_BIAS=False, B_KMAJOR=kmajor,
                                FLATTEN=bool(flatten), TMA_STORE=store, num_warps=w,
                                num_stages=s)

                    def run(step=step, args=args, meta=meta) -> None:
                        kern[(step,)](*args, **meta)

                    label = f"{cfg} {'tma store' if store else 'pointer store'}"
                    try:
                        out._data.memory.synchronize()
                        run()
                        got = torch.from_numpy(out.to(dtype=ember.float32).numpy()[:256]).cuda()
                    except Exception as exc:
                        print(f"{name} {n} {label}: failed {exc!r}"[:300], flush=True)
                        continue
                    err = float((got - ref).abs().max() / ref.abs().max())
                    print(f"{name} {n} {label}: rel err {err:.1e}", flush=True)
                    cases[label + ("" if err < 2e-2 else " WRONG")] = run
            for _ in range(20 if n == 4096 else 5):  # the sustained clock
                ta @ tb
            order = list(cases.items())
            ms: dict[str, list[float]] = {k: [] for k in cases}
            for r in range(5):
                for k, fn in order[r % len(order):] + order[:r % len(order)]:
                    ms[k].append(timer(fn))
            for k, ts in ms.items():
                ratio = statistics.median(t / x for t, x in zip(ms["torch"], ts, strict=True))
                line = f"{name} {n}^3 {k:48} {2 * n ** 3 / min(ts) / 1e9:8.1f} {ratio:7.3f}x"
                print(line, flush=True)
                table.append(line)
            del a, b, out, src, ta, tb
    print(f"{'case':60} {'TFLOP/s':>8} {'torch/this (median)':>8}")
    print("\n".join(table))


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from with_env import as_child

    as_child(__file__, child)
