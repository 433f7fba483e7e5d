"""tf32 ``a @ b`` with B's K-major copy in panels beside the matmul (`_tma_panel_matmul`),
against the whole copy first (`_tma_matmul`), the kernel alone on a B already K-major, and
torch (``python benchmarks/gpu/tf32_panels.py``).

For 4096³ and 8192³: each panel config ``(PANELS, TP, TB)`` on the 128x256x32 TMA tiles,
checked against torch's product (relative error over the first 128 rows), then all cases in
five rotated rounds (`ember_triton`'s device timer), TFLOP/s (best) and the median ratio of
torch's time to each one's.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BASE = (128, 256, 32, 8, 8, 3, 0)
PANELS = [(2, 4, 128), (4, 4, 128), (2, 4, 64), (4, 4, 64), (2, 2, 128), (4, 2, 128),
          (2, 6, 128), (8, 4, 128), (4, 8, 128)]


def child() -> None:
    import numpy as np
    import torch

    import ember
    from ember_triton.linalg import _tma_matmul, _tma_panel_matmul

    torch.backends.cuda.matmul.allow_tf32 = True
    d = ember.device("cuda:0")
    be = d.backend
    timer = be.memory.timer
    print(f"torch {torch.__version__}; {be.processors} multiprocessors", flush=True)
    table = []
    for n in (4096, 8192):
        a = ember.randn((n, n), dtype=ember.float32, device=d)
        b = ember.randn((n, n), dtype=ember.float32, device=d)
        out = be.empty((n, n), a._data.dtype)
        ta = torch.from_numpy(a.numpy()).cuda()
        tb = torch.from_numpy(b.numpy()).cuda()
        ref = (ta[:128] @ tb).double().cpu().numpy()
        args = (n, n, n, 1, 0, 0, n, 1, 0, 0, n, 1)
        bt = be.contiguous(b._data.transpose((1, 0)))
        kargs = (n, n, n, 1, 0, 0, n, 1, 0, 0, 1, n)
        cases = {
            "torch": lambda ta=ta, tb=tb: ta @ tb,
            "copy + tma": lambda a=a, b=b, out=out, args=args: _tma_matmul(
                be, BASE, out, a._data, b._data, args, "tf32"),
            "tma alone (B K-major)": lambda a=a, bt=bt, out=out, kargs=kargs: _tma_matmul(
                be, BASE, out, a._data, bt, kargs, "tf32"),
        }
        for p, tp, tb_ in PANELS:
            cfg = (*BASE, p, tp, tb_)

            def run(cfg=cfg, a=a, b=b, out=out, args=args) -> None:
                _tma_panel_matmul(be, cfg, out, a._data, b._data, args)

            try:
                run()
                be.synchronize()
            except Exception as exc:
                print(f"{n} panels {p} tp {tp} tb {tb_}: failed {exc!r}"[:300], flush=True)
                continue
            got = be.to_numpy(out, ember.float32)[:128].astype(np.float64)
            err = float(abs(got - ref).max() / abs(ref).max())
            print(f"{n} panels {p} tp {tp} tb {tb_}: rel err {err:.1e}", flush=True)
            cases[f"panels {p} tp {tp} tb {tb_}" + ("" if err < 1e-2 else " WRONG")] = run
        for _ in range(20 if n == 4096 else 5):  # the sustained clock
            ta @ tb
        order = list(cases.items())
        ms: dict[str, list[float]] = {k: [] for k in cases}
        for r in range(5):
            for k, fn in order[r % len(order):] + order[:r % len(order)]:
                ms[k].append(timer(fn))
        for k, ts in ms.items():
            ratio = statistics.median(t / x for t, x in zip(ms["torch"], ts, strict=True))
            line = (f"{n}^3 {k:28} {2 * n ** 3 / min(ts) / 1e9:8.1f} TFLOP/s  "
                    f"{min(ts) * 1e3:8.1f} us  torch/this {ratio:6.3f}")
            print(line, flush=True)
            table.append(line)
        del a, b, out, ta, tb, bt
    print("\n".join(table))


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from with_env import as_child

    as_child(__file__, child)
