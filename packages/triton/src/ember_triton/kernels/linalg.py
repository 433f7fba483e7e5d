"""Batched matmul: ``tl.dot`` on tensor cores for float16/bfloat16/float32, and an exact
multiply-add path for float64 and integers.  Two batch axes with their own strides cover
broadcast batches (and grouped convolutions) without copies."""

import triton
import triton.language as tl


@triton.jit
def matmul(c, a, b, M, N, K, B2, sa1, sa2, sam, sak, sb1, sb2, sbk, sbn,
           DOT: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr, UPCAST: tl.constexpr,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    bid = tl.program_id(1).to(tl.int64)
    num_n = tl.cdiv(N, BN)
    pm = pid // num_n
    pn = pid % num_n
    b1 = bid // B2
    b2 = bid % B2
    a_base = a + b1 * sa1 + b2 * sa2
    b_base = b + b1 * sb1 + b2 * sb2
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), ACC)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        av = tl.load(a_base + rm[:, None] * sam + rk[None, :] * sak,
                     mask=(rm < M)[:, None] & (rk < K)[None, :], other=0)
        bv = tl.load(b_base + rk[:, None] * sbk + rn[None, :] * sbn,
                     mask=(rk < K)[:, None] & (rn < N)[None, :], other=0)
        if UPCAST:  # the interpreter holds bfloat16 as raw bits: multiply in float32
            av = av.to(tl.float32)
            bv = bv.to(tl.float32)
        if DOT:
            acc = tl.dot(av, bv, acc, input_precision=PRECISION)
        else:
            acc += tl.sum(av.to(ACC)[:, :, None] * bv.to(ACC)[None, :, :], axis=1)
    c_ptr = c + bid * M * N + rm[:, None] * N + rn[None, :]
    tl.store(c_ptr, acc.to(c.dtype.element_ty), mask=(rm < M)[:, None] & (rn < N)[None, :])
