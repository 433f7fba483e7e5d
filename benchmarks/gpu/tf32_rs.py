"""TF32 matmul with B as it is: `matmul_tma`'s SWAP mode (``C^T = B^T A^T``, B^T's tile rounded
to tf32 in registers and fed to wgmma from there) against the K-major copy of B it replaces,
torch (cuBLAS) beside them, each config timed alone in interleaved rounds with CUDA events
(``python benchmarks/gpu/tf32_rs.py``)."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child() -> None:
    import numpy as np
    import torch

    import ember
    import ember_triton.linalg as la

    d = ember.device("cuda:0")
    be = d.backend
    be.matmul_precision = "tf32"
    torch.backends.cuda.matmul.allow_tf32 = True
    timer = be.memory.timer
    rows: list[tuple[str, float, float, str]] = []
    for n in (4096, 8192):
        flop = 2 * n ** 3
        a = ember.randn((n, n), device=d)
        b = ember.randn((n, n), device=d)
        ta = torch.from_numpy(a.numpy()).cuda()
        tb = torch.from_numpy(b.numpy()).cuda()
        ref = (ta[:512].double() @ tb.double()).cpu().numpy()
        out = be.empty((n, n), a._data.dtype)
        args = (n, n, n, 1, 0, 0, n, 1, 0, 0, n, 1)
        assert la.tma_fits(a._data, b._data, args, "tf32") and la.tma_swaps(args, "tf32")

        def err(o=out) -> str:  # type: ignore[no-untyped-def]
            got = be.to_numpy(o, ember.float32)[:512].astype(np.float64)
            return f"{float(abs(got - ref).max() / abs(ref).max()):.1e}"

        def mm(cublas: bool, a=a, b=b):  # type: ignore[no-untyped-def]
            be.use_cublas = cublas
            return a @ b

        cases = {"torch": lambda ta=ta, tb=tb: ta @ tb}
        for cfg in la._TMA_RS_CONFIGS:
            cases[f"swap {cfg}"] = lambda cfg=cfg, out=out, a=a, b=b: la._tma_matmul(
                be, cfg, out, a._data, b._data, args, "tf32", None, True)
        cfg0 = la._TMA_CONFIGS["tf32"][0]
        cases[f"copy B + tma {cfg0}"] = lambda out=out, a=a, b=b: la._tma_matmul(
            be, cfg0, out, a._data, b._data, args, "tf32")
        cases["ember a @ b, Triton alone"] = lambda: mm(False)
        cases["ember a @ b, selected"] = lambda: mm(True)
        errs: dict[str, str] = {}
        for k, fn in cases.items():  # selection and compilation first
            try:
                res = fn()
                if k == "torch":
                    got = res[:512].double().cpu().numpy()
                    errs[k] = f"{float(abs(got - ref).max() / abs(ref).max()):.1e}"
                elif k.startswith(("swap", "copy")):
                    errs[k] = err()
                else:
                    errs[k] = err(res._data)
            except Exception as exc:  # a config that does not compile: report, go on
                errs[k] = f"failed: {exc!r}"[:200]
        live = {k: fn for k, fn in cases.items() if not errs[k].startswith("failed")}
        times: dict[str, list[float]] = {k: [] for k in live}
        for _ in range(5):
            for k, fn in live.items():
                times[k].append(timer(fn))
        t_torch = statistics.median(times["torch"])
        for k in cases:
            if k not in times:
                rows.append((f"{n} {k}", 0.0, 0.0, errs[k]))
                continue
            ts = times[k]
            rows.append((f"{n} {k}", flop / min(ts) / 1e9,
                         t_torch / statistics.median(ts), errs[k]))
        be.use_cublas = True
        del a, b, ta, tb, out
    print(f"{'case':46} {'TFLOP/s':>8} {'vs torch':>8}  rel err (median ratio of 5 rounds)")
    for name, tf, ratio, e in rows:
        print(f"{name:46} {tf:8.1f} {ratio:8.3f}  {e}")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from with_env import as_child

    as_child(__file__, child)
