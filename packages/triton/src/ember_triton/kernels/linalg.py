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


@triton.jit
def device_fence(x, ASM: tl.constexpr):
    """``x``, after this thread's memory operations are ordered at device scope and its
    generic writes before later TMA reads (``fence.acq_rel.gpu``, ``fence.proxy.async``).
    ASM is false on the interpreter, which has no inline assembly and runs one program at a
    time."""
    if ASM:
        x = tl.inline_asm_elementwise(
            "fence.acq_rel.gpu;\n\tfence.proxy.async.global;\n\tmov.b32 $0, $1;", "=r,r", [x],
            dtype=tl.int32, is_pure=False, pack=1)
    return x


@triton.jit
def tb_round(r, num_m, num_n, cpp, STEP, GN: tl.constexpr):
    """Round ``r`` of `matmul_tma_tb`'s transposing work: B's column panels ``[plo, phi)``,
    those the programs' ``r``-th tiles are the first to need (tiles go down bands of GN of
    C's columns), as ``total`` chunks in shares of ``per`` (share ``s`` is chunks
    ``[s * per, ...)``)."""
    plo = tl.minimum(tl.cdiv(r * STEP, GN * num_m) * GN, num_n)
    phi = tl.minimum(tl.cdiv((r + 1) * STEP, GN * num_m) * GN, num_n)
    total = (phi - plo) * cpp
    return plo, total, tl.cdiv(total, STEP)


@triton.jit
def tb_chunk(b, bt, K, N, sbk, q, qend, plo, cpp, BN: tl.constexpr, CK: tl.constexpr,
             CN: tl.constexpr):
    """Source and destination pointers and mask of chunk ``q`` (counted from panel ``plo``;
    all masked off unless ``q < qend``): ``CK x CN`` elements of B (``K x N``, row stride
    ``sbk``), to ``bt`` (``N x K``, row-major); chunks go across a panel's BN columns, then
    down K."""
    cpr: tl.constexpr = BN // CN
    rk = ((q % cpp) // cpr) * CK + tl.arange(0, CK)
    rn = (plo + q // cpp) * BN + (q % cpr) * CN + tl.arange(0, CN)
    # (a block compared, not a scalar condition: the interpreter's masks must stay bool)
    mask = (rk < K)[:, None] & (rn < N)[None, :] & (tl.zeros([CK, 1], tl.int32) + q < qend)
    rk = rk.to(tl.int64)
    rn = rn.to(tl.int64)
    return b + rk[:, None] * sbk + rn[None, :], bt + rn[None, :] * K + rk[:, None], mask


@triton.jit(noinline=True)
def tb_release(flags, plo, q0, cnt, cpp, ASM: tl.constexpr):
    """Count chunks ``[q0, q0 + cnt)`` done in their panels' counters, after every thread's
    stores of them (a device fence each, then the program's barrier)."""
    device_fence(q0, ASM)
    tl.debug_barrier()
    for pp in range(q0 // cpp, (q0 + cnt - 1) // cpp + 1):
        n = tl.minimum(q0 + cnt, (pp + 1) * cpp) - tl.maximum(q0, pp * cpp)
        tl.atomic_add(flags + plo + pp, n, sem="release", scope="gpu")


@triton.jit(noinline=True)
def tb_share(b, bt, K, N, sbk, plo, q0, cnt, cpp, BN: tl.constexpr, CK: tl.constexpr,
             CN: tl.constexpr):
    """Chunks ``[q0, q0 + cnt)`` one after another (a stolen share, or what a tile's K loop
    had no steps left for)."""
    for j in range(0, cnt):
        src, dst, msk = tb_chunk(b, bt, K, N, sbk, q0 + j, q0 + cnt, plo, cpp, BN, CK, CN)
        tl.store(dst, tl.load(src, mask=msk), mask=msk)


@triton.jit(noinline=True)
def tb_wait(b, bt, flags, claims, pn, num_m, num_n, cpp, K, N, sbk, STEP, GN: tl.constexpr,
            BN: tl.constexpr, CK: tl.constexpr, CN: tl.constexpr, AHEAD: tl.constexpr,
            ASM: tl.constexpr):
    """Wait until panel ``pn`` of ``bt`` is written.  A program that waits long does the
    unclaimed shares of that panel itself, so the wait ends even when their owners have no
    multiprocessor yet (a GPU shared with other work)."""
    done = tl.atomic_add(flags + pn, 0, sem="acquire", scope="gpu")
    spins = done * 0
    while done < cpp:
        spins += 1
        if spins == 64:
            r = ((pn // GN) * GN * num_m) // STEP
            plo, total, per = tb_round(r, num_m, num_n, cpp, STEP, GN)
            for s in range(((pn - plo) * cpp) // per, ((pn - plo + 1) * cpp - 1) // per + 1):
                if tl.atomic_xchg(claims + (r - AHEAD) * STEP + s, 1) == 0:
                    cnt = tl.minimum(per, total - s * per)
                    tb_share(b, bt, K, N, sbk, plo, s * per, cnt, cpp, BN, CK, CN)
                    tb_release(flags, plo, s * per, cnt, cpp, ASM)
        done = tl.atomic_add(flags + pn, 0, sem="acquire", scope="gpu")
    device_fence(done, ASM)  # and the TMA loads of the panel after the counter


@triton.jit
def matmul_tma_tb(c, a, b, bt, sync, bias, M, N, K, sam, sbk, STEP, PRE,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, HAS_BIAS: tl.constexpr,
                  GN: tl.constexpr, AHEAD: tl.constexpr, EVERY: tl.constexpr, CK: tl.constexpr,
                  CN: tl.constexpr, ASM: tl.constexpr):
    """tf32 ``C = A @ B`` for an N-major B (``K x N``, row stride ``sbk``) without a pass of
    its own to copy B K-major (32-bit wgmma reads only K-major shared memory): the programs
    write that copy, ``bt`` (``N x K``), as they go.

    Persistent programs walk C's tiles down its columns (``STEP`` programs, tile ``t`` to
    program ``t % STEP``), so the programs' ``w``-th tiles, wave ``w``, need B's column panels
    (BN columns each) from about ``w * STEP / num_m`` on.  The panels the first AHEAD waves
    need, ``[0, PRE)``, are written before the launch; during wave ``w`` every program also
    writes its share of the panels wave ``w + AHEAD`` is the first to need, one ``CK x CN``
    chunk every EVERY K steps (loaded that many steps before it is stored, so the load's
    latency hides behind the tensor cores), and counts them in the panel's counter (``sync[:num_n]``, zeroed).
    A tile waits for its panel's count (`tb_wait`); a share is claimed first
    (``sync[num_n:]``, zeroed, one word per wave and program) so that a waiting program can
    take over shares nobody started.  Otherwise `matmul_tma`: A and ``bt`` through tensor
    descriptors, the epilogue adds ``bias[N]`` (HAS_BIAS) and stores with masks."""
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    k_tiles = tl.cdiv(K, BK)
    cpp = tl.cdiv(K, CK) * (BN // CN)  # chunks per panel
    flags = sync
    claims = sync + num_n
    a_desc = tl.make_tensor_descriptor(a, shape=[M, K], strides=[sam, 1], block_shape=[BM, BK])
    bt_desc = tl.make_tensor_descriptor(bt, shape=[N, K], strides=[K, 1],
                                        block_shape=[BN, BK])
    wave = pid * 0
    for tile in range(pid, num_m * num_n, STEP):
        if GN == 0:  # all of B copied first: `matmul_tma`'s order
            pm, pn = grouped_tile(tile, num_m, num_n, 8)
        else:
            band = tile // (GN * num_m)
            cols = tl.minimum(num_n - band * GN, GN)
            pm = (tile % (GN * num_m)) // cols
            pn = band * GN + (tile % (GN * num_m)) % cols
        om = pm * BM
        on = pn * BN
        if AHEAD > 0:
            if pn >= PRE:
                tb_wait(b, bt, flags, claims, pn, num_m, num_n, cpp, K, N, sbk, STEP, GN, BN,
                        CK, CN, AHEAD, ASM)
            plo, total, per = tb_round(wave + AHEAD, num_m, num_n, cpp, STEP,
                                       tl.maximum(GN, 1))
            q0 = pid * per
            cnt = tl.maximum(tl.minimum(per, total - q0), 0)
            if cnt > 0:
                if tl.atomic_xchg(claims + wave * STEP + pid, 1) != 0:
                    cnt = cnt * 0  # taken over by a program that could not wait
            src, _, msk = tb_chunk(b, bt, K, N, sbk, q0, q0 + cnt, plo, cpp, BN, CK, CN)
            v = tl.load(src, mask=msk)
        acc = tl.zeros((BM, BN), tl.float32)
        for kk in range(0, k_tiles):
            av = a_desc.load([om, kk * BK])
            bv = bt_desc.load([on, kk * BK])
            acc = tl.dot(av, tl.trans(bv), acc, input_precision="tf32")
            if AHEAD > 0 and EVERY > 0:
                if kk % EVERY == EVERY - 1:
                    # only the chunk's values live across the K steps: its pointers and mask
                    # are made again from scalars (registers are what the matmul runs short of)
                    j = q0 + kk // EVERY
                    _, dst, msk = tb_chunk(b, bt, K, N, sbk, j, q0 + cnt, plo, cpp, BN, CK, CN)
                    tl.store(dst, v, mask=msk)
                    src, _, msk = tb_chunk(b, bt, K, N, sbk, j + 1, q0 + cnt, plo, cpp, BN, CK,
                                           CN)
                    v = tl.load(src, mask=msk)
        if AHEAD > 0:
            if cnt > 0:
                _, dst, msk = tb_chunk(b, bt, K, N, sbk, q0 + k_tiles // tl.maximum(EVERY, 1),
                                       q0 + cnt, plo, cpp, BN, CK, CN)
                tl.store(dst, v, mask=msk)
                done = k_tiles // tl.maximum(EVERY, 1) + 1  # chunks stored so far
                if cnt > done:
                    tb_share(b, bt, K, N, sbk, plo, q0 + done, cnt - done, cpp, BN, CK, CN)
                tb_release(flags, plo, q0, cnt, cpp, ASM)
        wave += 1
        rm = om + tl.arange(0, BM)
        rn = on + tl.arange(0, BN)
        if HAS_BIAS:
            acc += tl.load(bias + rn, mask=rn < N, other=0).to(tl.float32)[None, :]
        c_ptrs = c + rm.to(tl.int64)[:, None] * N + rn[None, :]
        tl.store(c_ptrs, acc.to(c.dtype.element_ty), mask=(rm < M)[:, None] & (rn < N)[None, :])
