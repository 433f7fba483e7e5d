"""Why is the tf32 matmul slow with Triton alone?  Compiles ember's ``matmul_dot`` for fp32
inputs at 4096³ under several tile configs and precisions, and a textbook Triton matmul beside
it; prints, per variant, the MMA version in the TTGIR, the wgmma / mma.sync count in the PTX,
shared memory, spills and TFLOP/s, with cuBLAS (through CuPy) as the yardstick
(``python benchmarks/gpu/tf32_probe.py``)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _textbook():  # type: ignore[no-untyped-def]
    import triton
    import triton.language as tl

    @triton.jit
    def mm(c, a, b, M, N, K, sam, sak, sbk, sbn, PRECISION: tl.constexpr, BM: tl.constexpr,
           BN: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr):
        pm = tl.program_id(0) // tl.cdiv(N, BN)
        pn = tl.program_id(0) % tl.cdiv(N, BN)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), tl.float32)
        a_ptrs = a + rm[:, None] * sam + rk[None, :] * sak
        if BT:  # B given as B^T (N x K, K contiguous): load an N x K tile and transpose it
            b_ptrs = b + rn[:, None] * sbn + rk[None, :] * sbk
        else:
            b_ptrs = b + rk[:, None] * sbk + rn[None, :] * sbn
        for _ in range(0, tl.cdiv(K, BK)):
            av = tl.load(a_ptrs)
            if BT:
                bv = tl.trans(tl.load(b_ptrs))
            else:
                bv = tl.load(b_ptrs)
            acc = tl.dot(av, bv, acc, input_precision=PRECISION)
            a_ptrs += BK * sak
            b_ptrs += BK * sbk
        tl.store(c + rm[:, None] * N + rn[None, :], acc)

    return mm


def _describe(compiled) -> str:  # type: ignore[no-untyped-def]
    ttgir = compiled.asm.get("ttgir", "")
    ptx = compiled.asm.get("ptx", "")
    versions = sorted(set(re.findall(r"nvidia_mma<\{versionMajor = (\d)", ttgir)))
    md = compiled.metadata
    return (f"mma v{'/'.join(versions) or '-'}, wgmma {ptx.count('wgmma.mma_async')}, "
            f"mma.sync {ptx.count('mma.sync')}, cvt.tf32 {ptx.count('cvt.rna.tf32')}, "
            f"cp.async {ptx.count('cp.async.cg') + ptx.count('cp.async.ca')}, "
            f"tma {ptx.count('cp.async.bulk.tensor')}, shared {getattr(md, 'shared', '?')}, "
            f"spills {getattr(compiled, 'n_spills', '?')}")


def child() -> None:
    import cupy as cp

    import ember

    d = ember.device("cuda:0")
    be = d.backend
    timer = be.memory.timer
    n = 4096
    flop = 2 * n ** 3
    a = ember.randn((n, n), device=d)
    b = ember.randn((n, n), device=d)
    out = ember.zeros((n, n), device=d)
    A, B, C = (t._data for t in (a, b, out))
    # B^T as a row-major copy (Tensor.contiguous() keeps a transposed view as it is)
    BT = be.contiguous(B.transpose((1, 0)))
    ca = cp.asarray(a.numpy())
    cb = cp.asarray(b.numpy())
    rows = []
    kern = be.module("linalg").matmul_dot
    args = (n, n, n, 1, 0, 0, n, 1, 0, 0, n, 1)
    ref = a.numpy().astype("float64") @ b.numpy().astype("float64")
    refs = {"A@B": ref, "A@B^T": a.numpy().astype("float64") @ b.numpy().astype("float64").T}

    def errors() -> str:
        o = out.numpy()
        return " ".join(f"{k} {float(abs(o - r).max() / abs(r).max()):.1e}"
                        for k, r in refs.items())
    kmaj = (n, n, n, 1, 0, 0, n, 1, 0, 0, 1, n)
    for precision, cfg, bargs, kmaj_b in [
            ("tf32", (128, 128, 32, 8, 4, 3), args, False),
            ("tf32", (128, 128, 32, 8, 4, 3), kmaj, False),
            ("tf32", (128, 128, 32, 8, 4, 3), kmaj, True),
            ("tf32", (128, 256, 32, 8, 8, 3), kmaj, True),
            ("tf32", (128, 256, 32, 8, 8, 4), kmaj, True),
            ("tf32", (256, 128, 32, 8, 8, 3), kmaj, True),
            ("tf32", (128, 128, 64, 8, 8, 3), kmaj, True),
            ("tf32", (128, 128, 32, 8, 8, 4), kmaj, True),
            ("tf32", (128, 256, 16, 8, 8, 5), kmaj, True)]:
        bm, bn, bk, g, w, s = cfg
        grid = ((n // bm) * (n // bn), 1)

        src0 = B if bargs is args else BT

        def call(bm=bm, bn=bn, bk=bk, g=g, w=w, s=s, grid=grid, precision=precision,
                 bargs=bargs, src0=src0, kmaj_b=kmaj_b):
            return kern[grid](C.arg(), A.arg(), src0.arg(), C.arg(), *bargs, n, PRECISION=precision,
                              UPCAST=False, WIDE=False, BM=bm, BN=bn, BK=bk, GROUP_M=g,
                              EVEN_K=True, HAS_BIAS=False, B_KMAJOR=kmaj_b, num_warps=w,
                              num_stages=s)
        try:
            compiled = call()
            ms = timer(call)
            tag = ("B row-major" if bargs is args else "B K-major") + (" T" if kmaj_b else "")
            rows.append((f"ember {precision} {tag} {cfg}", flop / ms / 1e9, errors(),
                         _describe(compiled)))
        except Exception as exc:
            rows.append((f"ember {precision} {cfg}", 0.0, "", f"failed: {exc!r}"[:200]))
    mm = _textbook()
    for bt_mode, cfg, prec in [(False, (128, 128, 32, 4, 3), "tf32"),
                               (True, (128, 128, 32, 4, 3), "tf32"),
                               (True, (128, 128, 32, 4, 3), "ieee"),
                               (True, (128, 256, 32, 8, 3), "tf32"),
                               (True, (128, 256, 32, 8, 4), "tf32"),
                               (True, (256, 128, 32, 8, 3), "tf32"),
                               (True, (128, 128, 32, 4, 4), "tf32"),
                               (True, (128, 128, 32, 8, 4), "tf32"),
                               (True, (128, 256, 16, 8, 5), "tf32")]:
        bm, bn, bk, w, s = cfg
        src = BT if bt_mode else B
        sbk, sbn = (1, n) if bt_mode else (n, 1)

        def call2(bm=bm, bn=bn, bk=bk, w=w, s=s, src=src, sbk=sbk, sbn=sbn, bt_mode=bt_mode,
                  prec=prec):
            return mm[((n // bm) * (n // bn),)](C.arg(), A.arg(), src.arg(), n, n, n, n, 1, sbk,
                                                 sbn, PRECISION=prec, BM=bm, BN=bn, BK=bk,
                                                 BT=bt_mode, num_warps=w, num_stages=s)
        try:
            compiled = call2()
            ms = timer(call2)
            rows.append((f"textbook {prec} BT={bt_mode} {cfg}", flop / ms / 1e9, errors(),
                         _describe(compiled)))
        except Exception as exc:
            rows.append((f"textbook {prec} BT={bt_mode} {cfg}", 0.0, "", f"failed: {exc!r}"[:200]))
    be.matmul_precision, be.use_cublas = "tf32", False
    for cfg in [(128, 128, 32, 8, 4, 3), (128, 256, 32, 8, 8, 3)]:
        import ember_triton.linalg as la

        def whole(cfg=cfg) -> None:
            la._triton_matmul(be, cfg, C, A, B, args, 1, "tf32")
        ms = timer(whole)
        rows.append((f"ember a @ b (copies B K-major) {cfg}", flop / ms / 1e9, errors(), ""))
    with cp.cuda.Device(0):
        cp_ms = timer(lambda: ca @ cb)
    rows.append(("cupy matmul (tf32 if enabled)", flop / cp_ms / 1e9, "", ""))
    print(f"{'variant':56} {'TFLOP/s':>8} {'rel err':>26}  notes")
    for name, tf, err, note in rows:
        print(f"{name:56} {tf:8.1f} {err:>26}  {note}")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from with_env import as_child

    as_child(__file__, child)
