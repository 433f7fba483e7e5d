"""Can the persistent TMA matmul go faster in bf16/fp16?  Times, at 4096³ and 8192³, variants
of ``kernels/linalg.py::matmul_tma`` (its tile loop, B N-major) with a warp-specialised K loop
(``tl.range(warp_specialize=True)``), with the C tile stored through a tensor descriptor
instead of masked pointer stores, and both, beside the kernel itself and torch (cuBLAS), in
interleaved rounds with CUDA events (``python benchmarks/gpu/half_variants.py``)."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _kernel():  # type: ignore[no-untyped-def]
    import triton
    import triton.language as tl

    from ember_triton.kernels.linalg import grouped_tile

    @triton.jit
    def mm(c, a, b, M, N, K, STEP, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
           GROUP_M: tl.constexpr, WS: tl.constexpr, DESC_STORE: tl.constexpr,
           FLATTEN: tl.constexpr):
        a_desc = tl.make_tensor_descriptor(a, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
        b_desc = tl.make_tensor_descriptor(b, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
        c_desc = tl.make_tensor_descriptor(c, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
        num_m = tl.cdiv(M, BM)
        num_n = tl.cdiv(N, BN)
        k_tiles = tl.cdiv(K, BK)
        for tile in tl.range(tl.program_id(0), num_m * num_n, STEP, flatten=FLATTEN,
                             warp_specialize=WS):
            pm, pn = grouped_tile(tile, num_m, num_n, GROUP_M)
            om = pm * BM
            on = pn * BN
            acc = tl.zeros((BM, BN), tl.float32)
            for kk in range(0, k_tiles):
                acc = tl.dot(a_desc.load([om, kk * BK]), b_desc.load([kk * BK, on]), acc)
            if DESC_STORE:
                c_desc.store([om, on], acc.to(c.dtype.element_ty))
            else:
                rm = om + tl.arange(0, BM)
                rn = on + tl.arange(0, BN)
                c_ptrs = c + rm.to(tl.int64)[:, None] * N + rn[None, :]
                tl.store(c_ptrs, acc.to(c.dtype.element_ty),
                         mask=(rm < M)[:, None] & (rn < N)[None, :])

    return mm


def child() -> None:
    import numpy as np
    import torch

    import ember
    import ember_triton.linalg as la

    d = ember.device("cuda:0")
    be = d.backend
    be.memory.use_scratch()
    timer = be.memory.timer
    mm = _kernel()
    rows: list[tuple[str, float, float, str]] = []
    for n in (4096, 8192):
        flop = 2 * n ** 3
        for name, dt, tdt in (("bf16", ember.bfloat16, torch.bfloat16),
                              ("fp16", ember.float16, torch.float16)):
            a = ember.randn((n, n), dtype=dt, device=d)
            b = ember.randn((n, n), dtype=dt, device=d)
            ta = torch.from_numpy(a.to(dtype=ember.float32).numpy()).cuda().to(tdt)
            tb = torch.from_numpy(b.to(dtype=ember.float32).numpy()).cuda().to(tdt)
            ref = (ta[:256].double() @ tb.double()).cpu().numpy()
            out = be.empty((n, n), a._data.dtype)
            A, B, C = a._data, b._data, out
            args = (n, n, n, 1, 0, 0, n, 1, 0, 0, n, 1)

            def err(ref=ref, out=out) -> str:  # type: ignore[no-untyped-def]
                got = be.to_numpy(out, ember.float32)[:256].astype(np.float64)
                return f"{float(abs(got - ref).max() / abs(ref).max()):.1e}"

            cfg0 = la._TMA_CONFIGS["half"][0]
            cases = {"torch": lambda ta=ta, tb=tb: ta @ tb,
                     f"matmul_tma {cfg0}": lambda out=out, A=A, B=B, args=args, cfg0=cfg0:
                         la._tma_matmul(be, cfg0, out, A, B, args, "ieee")}
            for ws, store, flat, cfg in [  # Triton 3.6 warp-specialises 4-warp loops only
                    (False, True, True, (128, 256, 64, 8, 8, 3)),
                    (True, True, False, (128, 128, 64, 8, 4, 4)),
                    (True, True, False, (128, 256, 64, 8, 4, 3)),
                    (True, False, False, (128, 256, 64, 8, 4, 3)),
                    (True, True, False, (256, 128, 64, 8, 4, 3))]:
                bm, bn, bk, g, w, s = cfg
                step = min((n // bm) * (n // bn), be.processors)
                label = f"ws={int(ws)} desc_store={int(store)} flat={int(flat)} {cfg}"
                cases[label] = lambda bm=bm, bn=bn, bk=bk, g=g, w=w, s=s, ws=ws, store=store, \
                    flat=flat, step=step, A=A, B=B, C=C, n=n: mm[(step,)](
                        C.arg(), A.arg(), B.arg(), n, n, n, step, BM=bm, BN=bn, BK=bk,
                        GROUP_M=g, WS=ws, DESC_STORE=store, FLATTEN=flat, num_warps=w,
                        num_stages=s)
            errs: dict[str, str] = {}
            for k, fn in cases.items():
                try:
                    res = fn()
                    if k == "torch":
                        got = res[:256].double().cpu().numpy()
                        errs[k] = f"{float(abs(got - ref).max() / abs(ref).max()):.1e}"
                    else:
                        errs[k] = err()
                except Exception as exc:
                    errs[k] = f"failed: {type(exc).__name__}: {exc}"[:160]
            live = {k: fn for k, fn in cases.items() if not errs[k].startswith("failed")}
            times: dict[str, list[float]] = {k: [] for k in live}
            for _ in range(5):
                for k, fn in live.items():
                    times[k].append(timer(fn))
            t_torch = statistics.median(times["torch"])
            for k in cases:
                if k in times:
                    rows.append((f"{n} {name} {k}", flop / min(times[k]) / 1e9,
                                 t_torch / statistics.median(times[k]), errs[k]))
                else:
                    rows.append((f"{n} {name} {k}", 0.0, 0.0, errs[k]))
            del a, b, ta, tb, out, A, B, C
    print(f"{'case':62} {'TFLOP/s':>8} {'vs torch':>8}  rel err (median ratio of 5 rounds)")
    for label, tf, ratio, e in rows:
        print(f"{label:62} {tf:8.1f} {ratio:8.3f}  {e}")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from with_env import as_child

    as_child(__file__, child)
