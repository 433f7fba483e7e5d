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


@triton.jit
def grouped_tile(t, num_m, num_n, GROUP_M: tl.constexpr):
    """Output tile ``t``'s ``(row, column)`` among ``num_m x num_n`` tiles, numbered down
    groups of GROUP_M tile rows, so that neighbouring tiles share A and B tiles in L2."""
    per_group = GROUP_M * num_n
    first_m = (t // per_group) * GROUP_M
    rows = tl.minimum(num_m - first_m, GROUP_M)
    return first_m + (t % per_group) % rows, (t % per_group) // rows


@triton.jit
def matmul_dot(c, a, b, bias, M, N, K, B2, sa1, sa2, sam, sak, sb1, sb2, sbk, sbn, KS,
               PRECISION: tl.constexpr, UPCAST: tl.constexpr, WIDE: tl.constexpr,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
               EVEN_K: tl.constexpr, HAS_BIAS: tl.constexpr, B_KMAJOR: tl.constexpr):
    """Tensor-core matmul (float16/bfloat16/float32), one BMxBN tile of C per program.

    Programs walk C in groups of GROUP_M tile rows, so neighbouring programs share A and B
    tiles in L2.  Row and column indices wrap (``% M``) instead of masking the loads; only
    the K tail is masked (EVEN_K drops that mask) and only the store masks M and N.
    WIDE computes offsets in int64 (operands of 2**31 elements or more).  HAS_BIAS adds
    ``bias[N]`` to every row in the epilogue, in float32 before the result is rounded.
    B_KMAJOR loads B (whose K axis is contiguous) as BN x BK tiles and transposes them in
    registers: the layout tf32 tensor-core instructions read without a shuffle.

    Split-K: program ``(_, _, s)`` sums K from ``s * KS`` over at most ``KS`` (a multiple of
    BK) and writes its float32 partial to slice ``s`` of ``c`` (``[splits, batch, M, N]``);
    `split_k_sum` adds the slices.  With one split, ``KS`` is K.
    """
    bid = tl.program_id(1).to(tl.int64)
    pm, pn = grouped_tile(tl.program_id(0), tl.cdiv(M, BM), tl.cdiv(N, BN), GROUP_M)
    pk = tl.program_id(2)
    b1 = bid // B2
    b2 = bid % B2
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    am = tl.max_contiguous(tl.multiple_of(rm % M, BM), BM)
    bn = tl.max_contiguous(tl.multiple_of(rn % N, BN), BN)
    rk = tl.arange(0, BK)
    k_first = pk * KS
    k_len = tl.minimum(KS, K - k_first)
    if WIDE:
        am = am.to(tl.int64)
        bn = bn.to(tl.int64)
        rk = rk.to(tl.int64)
        k_first = k_first.to(tl.int64)
    a_ptrs = a + b1 * sa1 + b2 * sa2 + am[:, None] * sam + (k_first + rk)[None, :] * sak
    if B_KMAJOR:
        b_ptrs = b + b1 * sb1 + b2 * sb2 + bn[:, None] * sbn + (k_first + rk)[None, :] * sbk
    else:
        b_ptrs = b + b1 * sb1 + b2 * sb2 + (k_first + rk)[:, None] * sbk + bn[None, :] * sbn
    acc = tl.zeros((BM, BN), tl.float32)
    for k0 in range(0, tl.cdiv(k_len, BK)):
        if EVEN_K:
            av = tl.load(a_ptrs)
            bv = tl.load(b_ptrs)
        elif B_KMAJOR:
            av = tl.load(a_ptrs, mask=rk[None, :] < k_len - k0 * BK, other=0)
            bv = tl.load(b_ptrs, mask=rk[None, :] < k_len - k0 * BK, other=0)
        else:
            av = tl.load(a_ptrs, mask=rk[None, :] < k_len - k0 * BK, other=0)
            bv = tl.load(b_ptrs, mask=rk[:, None] < k_len - k0 * BK, other=0)
        if B_KMAJOR:
            bv = tl.trans(bv)
        if UPCAST:  # the interpreter holds bfloat16 as raw bits: multiply in float32
            av = av.to(tl.float32)
            bv = bv.to(tl.float32)
        acc = tl.dot(av, bv, acc, input_precision=PRECISION)
        a_ptrs += BK * sak
        b_ptrs += BK * sbk
    if WIDE:
        rm = rm.to(tl.int64)
        rn = rn.to(tl.int64)
    if HAS_BIAS:  # masked, not through the wrapped `bn`: its contiguity hint breaks at N
        acc += tl.load(bias + rn, mask=rn < N, other=0).to(tl.float32)[None, :]
    slab = pk * tl.num_programs(1) + bid  # the split's slice, then the batch entry
    c_ptrs = c + slab * M * N + rm[:, None] * N + rn[None, :]
    tl.store(c_ptrs, acc.to(c.dtype.element_ty), mask=(rm < M)[:, None] & (rn < N)[None, :])


@triton.jit
def split_k_sum(out, parts, bias, total, N, SPLITS, HAS_BIAS: tl.constexpr,
                BLOCK: tl.constexpr):
    """``out = sum(parts[s] for s in range(SPLITS)) (+ bias[N] per row)``, summed in split
    order in float32 (the same result every run), then rounded to ``out``'s dtype."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    acc = tl.load(parts + offs, mask=mask, other=0)
    for s in range(1, SPLITS):
        acc += tl.load(parts + s * total + offs, mask=mask, other=0)
    if HAS_BIAS:
        acc += tl.load(bias + offs % N, mask=mask, other=0).to(tl.float32)
    tl.store(out + offs, acc.to(out.dtype.element_ty), mask=mask)


@triton.jit
def matmul_tma(c, a, b, bias, M, N, K, sam, sbk, sbn, STEP,
               PRECISION: tl.constexpr, UPCAST: tl.constexpr, BM: tl.constexpr,
               BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
               HAS_BIAS: tl.constexpr, B_KMAJOR: tl.constexpr, FLATTEN: tl.constexpr):
    """2-D tensor-core matmul on Hopper's TMA: persistent programs walk C's tiles
    (``STEP`` programs, tile ``t`` to program ``t % STEP``, GROUP_M tile rows at a time for L2),
    loading A (K contiguous) and B as tiles through tensor descriptors; out-of-range rows,
    columns and K steps load as zeros, so no masks.  B is ``K x N`` with N contiguous, or with
    B_KMAJOR given as its ``N x K`` transpose with K contiguous: the only layout 32-bit (tf32)
    wgmma reads from shared memory without a shuffle.  The epilogue adds ``bias[N]`` in float32
    (HAS_BIAS) and stores with masks, in 64-bit offsets."""
    a_desc = tl.make_tensor_descriptor(a, shape=[M, K], strides=[sam, 1], block_shape=[BM, BK])
    if B_KMAJOR:
        b_desc = tl.make_tensor_descriptor(b, shape=[N, K], strides=[sbn, 1],
                                           block_shape=[BN, BK])
    else:
        b_desc = tl.make_tensor_descriptor(b, shape=[K, N], strides=[sbk, 1],
                                           block_shape=[BK, BN])
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    k_tiles = tl.cdiv(K, BK)
    # FLATTEN merges the tile and K loops for the software pipeliner, so a tile's epilogue
    # overlaps the next tile's first loads
    for tile in tl.range(tl.program_id(0), num_m * num_n, STEP, flatten=FLATTEN):
        pm, pn = grouped_tile(tile, num_m, num_n, GROUP_M)
        om = pm * BM
        on = pn * BN
        acc = tl.zeros((BM, BN), tl.float32)
        for kk in range(0, k_tiles):
            av = a_desc.load([om, kk * BK])
            if B_KMAJOR:
                bv = tl.trans(b_desc.load([on, kk * BK]))
            else:
                bv = b_desc.load([kk * BK, on])
            if UPCAST:  # the interpreter holds bfloat16 as raw bits: multiply in float32
                av = av.to(tl.float32)
                bv = bv.to(tl.float32)
            acc = tl.dot(av, bv, acc, input_precision=PRECISION)
        rm = om + tl.arange(0, BM)
        rn = on + tl.arange(0, BN)
        if HAS_BIAS:
            acc += tl.load(bias + rn, mask=rn < N, other=0).to(tl.float32)[None, :]
        c_ptrs = c + rm.to(tl.int64)[:, None] * N + rn[None, :]
        tl.store(c_ptrs, acc.to(c.dtype.element_ty), mask=(rm < M)[:, None] & (rn < N)[None, :])
