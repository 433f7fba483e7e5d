"""Can Triton alone reach cuBLAS in TF32?  Times, at 4096³ and 8192³ fp32 with TF32 tensor cores,
Triton matmuls that load their tiles through Hopper's TMA (device-side tensor descriptors),
plain and persistent, with B row-major or K-major, and with the operands swapped (C^T = B^T A^T,
so the N-major operand is wgmma's A, which may come from registers), with 2-CTA clusters and
with a warp-specialised K loop; cuBLAS through CuPy is the yardstick
(``CUPY_TF32=1 python benchmarks/gpu/tf32_tma.py``).  Results: ``docs/performance.md``,
the 2026-12-03 17:01 UTC run."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _kernel():  # type: ignore[no-untyped-def]
    import triton
    import triton.language as tl

    @triton.jit
    def mm(c, a, b, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
           BT: tl.constexpr, SWAP: tl.constexpr, STEP: tl.constexpr, GROUP_M: tl.constexpr,
           WS: tl.constexpr):
        a_desc = tl.make_tensor_descriptor(a, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
        if BT:  # B given as B^T: N x K, K contiguous
            b_desc = tl.make_tensor_descriptor(b, shape=[N, K], strides=[K, 1],
                                               block_shape=[BN, BK])
        else:
            b_desc = tl.make_tensor_descriptor(b, shape=[K, N], strides=[N, 1],
                                               block_shape=[BK, BN])
        num_m = tl.cdiv(M, BM)
        num_n = tl.cdiv(N, BN)
        k_tiles = tl.cdiv(K, BK)
        width = GROUP_M * num_n
        for tile in tl.range(tl.program_id(0), num_m * num_n, STEP):
            first_m = (tile // width) * GROUP_M
            gsize = min(num_m - first_m, GROUP_M)
            om = (first_m + (tile % width) % gsize) * BM
            on = ((tile % width) // gsize) * BN
            if SWAP:
                acc = tl.zeros((BN, BM), tl.float32)
            else:
                acc = tl.zeros((BM, BN), tl.float32)
            for kk in tl.range(0, k_tiles, warp_specialize=WS):
                ok = kk * BK
                av = a_desc.load([om, ok])
                if BT:
                    bv = tl.trans(b_desc.load([on, ok]))
                else:
                    bv = b_desc.load([ok, on])
                if SWAP:
                    acc = tl.dot(tl.trans(bv), tl.trans(av), acc, input_precision="tf32")
                else:
                    acc = tl.dot(av, bv, acc, input_precision="tf32")
            c_ptrs = c + (om + tl.arange(0, BM))[:, None] * N + (on + tl.arange(0, BN))[None, :]
            if SWAP:
                tl.store(c_ptrs, tl.trans(acc))
            else:
                tl.store(c_ptrs, acc)

    @triton.jit
    def mm_ptr_swap(c, a, b, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                    GROUP_M: tl.constexpr):
        """Pointer loads, B row-major, operands swapped."""
        pid = tl.program_id(0)
        num_m = tl.cdiv(M, BM)
        num_n = tl.cdiv(N, BN)
        width = GROUP_M * num_n
        first_m = (pid // width) * GROUP_M
        gsize = min(num_m - first_m, GROUP_M)
        pm = first_m + (pid % width) % gsize
        pn = (pid % width) // gsize
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        a_ptrs = a + rm[:, None] * K + rk[None, :]
        b_ptrs = b + rk[:, None] * N + rn[None, :]
        acc = tl.zeros((BN, BM), tl.float32)
        for _ in range(0, tl.cdiv(K, BK)):
            av = tl.load(a_ptrs)
            bv = tl.load(b_ptrs)
            acc = tl.dot(tl.trans(bv), tl.trans(av), acc, input_precision="tf32")
            a_ptrs += BK
            b_ptrs += BK * N
        tl.store(c + rm[:, None] * N + rn[None, :], tl.trans(acc))

    return mm, mm_ptr_swap


def child() -> None:
    import cupy as cp
    import numpy as np
    import triton
    from tf32_probe import _describe

    import ember

    keep: list[object] = []

    class _Buf:
        def __init__(self, arr) -> None:  # type: ignore[no-untyped-def]
            self.arr = arr

        def data_ptr(self) -> int:
            return int(self.arr.data.ptr)

    def alloc(size: int, alignment: int, stream: int | None) -> _Buf:
        buf = _Buf(cp.empty(size, dtype=cp.int8))
        keep.append(buf)
        if len(keep) > 64:
            del keep[:32]
        return buf

    triton.set_allocator(alloc)
    d = ember.device("cuda:0")
    be = d.backend
    timer = be.memory.timer
    sms = be.memory.processors()
    mm, mm_ptr_swap = _kernel()
    rows: list[tuple[str, float, str, str]] = []

    def one(n: int) -> None:
        flop = 2 * n ** 3
        rng = np.random.default_rng(0)
        an = rng.standard_normal((n, n), dtype=np.float32)
        bn = rng.standard_normal((n, n), dtype=np.float32)
        a = ember.tensor(an, device=d)
        b = ember.tensor(bn, device=d)
        out = ember.zeros((n, n), device=d)
        A, B, C = (t._data for t in (a, b, out))
        BT = be.contiguous(B.transpose((1, 0)))
        # reference on 256 rows in float64 (the whole product in float64 is slow on the host)
        ref = an[:256].astype(np.float64) @ bn.astype(np.float64)

        def err() -> str:
            o = out.numpy()[:256]
            return f"{float(abs(o - ref).max() / abs(ref).max()):.1e}"

        # (label, B K-major, swapped, persistent, warp-specialised, config, CTAs per cluster)
        for label, bt, swap, persist, ws, cfg, ctas in [
                ("tma B row-major", False, False, False, False, (128, 128, 32, 8, 4, 3), 1),
                ("tma B row-major swap", False, True, False, False, (128, 128, 32, 8, 4, 3), 1),
                ("tma B K-major", True, False, False, False, (128, 128, 32, 8, 4, 3), 1),
                ("tma B K-major persistent", True, False, True, False, (128, 256, 32, 8, 8, 3),
                 1),
                ("tma B K-major persistent", True, False, True, False, (128, 128, 32, 8, 4, 4),
                 1),
                ("tma B K-major persistent, 2-CTA clusters", True, False, True, False,
                 (256, 256, 32, 8, 8, 3), 2),
                ("tma B K-major, 2-CTA clusters", True, False, False, False,
                 (256, 256, 32, 8, 8, 3), 2),
                ("tma B K-major persistent, 2-CTA clusters", True, False, True, False,
                 (256, 128, 32, 8, 4, 4), 2),
                ("tma B K-major ws", True, False, False, True, (128, 128, 32, 8, 4, 4), 1),
                ("tma B K-major persistent ws", True, False, True, True, (128, 128, 32, 8, 4, 4),
                 1),
                ("tma B K-major persistent ws", True, False, True, True, (128, 256, 32, 8, 8, 3),
                 1)]:
            bm, bn_, bk, g, w, s = cfg
            tiles = (n // bm) * (n // bn_)
            grid = (min(tiles, sms // ctas) if persist else tiles,)
            step = grid[0]
            src = BT if bt else B

            def call(bm=bm, bn_=bn_, bk=bk, g=g, w=w, s=s, grid=grid, step=step, src=src, bt=bt,
                     swap=swap, ws=ws, ctas=ctas):  # type: ignore[no-untyped-def]
                return mm[grid](C.arg(), A.arg(), src.arg(), n, n, n, BM=bm, BN=bn_, BK=bk, BT=bt,
                                SWAP=swap, STEP=step, GROUP_M=g, WS=ws, num_warps=w,
                                num_stages=s, num_ctas=ctas)
            try:
                compiled = call()
                ms = timer(call)
                rows.append((f"{n} {label} {cfg}", flop / ms / 1e9, err(), _describe(compiled)))
            except Exception as exc:
                rows.append((f"{n} {label} {cfg}", 0.0, "", f"failed: {exc!r}"[:160]))
        for cfg in [(128, 256, 32, 8, 8, 3)]:
            bm, bn_, bk, g, w, s = cfg

            def call2(bm=bm, bn_=bn_, bk=bk, g=g, w=w, s=s):  # type: ignore[no-untyped-def]
                return mm_ptr_swap[((n // bm) * (n // bn_),)](
                    C.arg(), A.arg(), B.arg(), n, n, n, BM=bm, BN=bn_, BK=bk, GROUP_M=g,
                    num_warps=w, num_stages=s)
            try:
                compiled = call2()
                ms = timer(call2)
                rows.append((f"{n} ptr B row-major swap {cfg}", flop / ms / 1e9, err(),
                             _describe(compiled)))
            except Exception as exc:
                rows.append((f"{n} ptr swap {cfg}", 0.0, "", f"failed: {exc!r}"[:300]))
        ca, cb = cp.asarray(an), cp.asarray(bn)
        cp_ms = timer(lambda: ca @ cb)
        rows.append((f"{n} cuBLAS (cupy, tf32 if enabled)", flop / cp_ms / 1e9, "", ""))
    for n in (4096,):
        one(n)
    print(f"{'variant':58} {'TFLOP/s':>8} {'rel err':>8}  notes")
    for name, tf, e, note in rows:
        print(f"{name:58} {tf:8.1f} {e:>8}  {note}")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from with_env import as_child

    as_child(__file__, child)
