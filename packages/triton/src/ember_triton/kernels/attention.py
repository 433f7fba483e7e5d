"""Fused scaled-dot-product attention in the manner of FlashAttention-2.

Forward (`attn_fwd`): one program per block of ``BLOCK_M`` query rows of one batch entry; it
walks the keys in ``BLOCK_N`` blocks with an online softmax in float32 (float64 for float64
inputs), so the ``[L, S]`` scores never reach memory, and writes the output and each row's
logsumexp.  Scores are kept in base-2 units: the softmax scale and ``log2(e)`` are one factor
(``qk_scale``) and the exponentials are ``exp2``.  Key blocks that need no mask (inside the
rows, below the causal diagonal) run in a loop without one; only the diagonal and the ragged
tail go through the masked loop, and causal programs skip the blocks past the diagonal.

Backward: `attn_bwd_delta` computes ``delta = rowsum(dO * O)``; `attn_bwd_dkdv` holds one key
block and walks the query blocks, accumulating ``dK`` and ``dV``; `attn_bwd_dq` holds one query
block and walks the key blocks.  Both rebuild ``p = exp2(s - lse)`` from the forward's
logsumexp; neither uses atomics, so gradients are deterministic.

Operands are addressed through two batch strides (``B2`` is the inner batch extent), a row
stride and a unit stride along the head dimension; a mask has strides on all four axes (0 where
it broadcasts): ``MASK`` is 0 (none), 1 (bool, True = may attend) or 2 (additive).  ``DOT``
selects ``tl.dot``, else an exact multiply-add (float64 on GPUs); ``UPCAST`` widens bfloat16
to float32 before products (the interpreter holds bfloat16 as raw bits).  ``WIDE``: float64
inputs, computed in float64 with natural exponentials.
"""

import triton
import triton.language as tl

NEG_INF = tl.constexpr(float("-inf"))


@triton.jit
def _mm(a, b, acc, DOT: tl.constexpr, PRECISION: tl.constexpr):
    """``acc + a @ b``."""
    if DOT:
        r = tl.dot(a, b, acc, input_precision=PRECISION)
    else:
        r = acc + tl.sum(a[:, :, None] * b[None, :, :], axis=1)
    return r


@triton.jit
def _operand(x, like, UPCAST: tl.constexpr):
    """``x`` (float32 probabilities or gradients) rounded to ``like``'s dtype for a product
    with it, as the GPU computes; under UPCAST rounded to bfloat16 and widened back."""
    if UPCAST:
        r = x.to(tl.bfloat16).to(tl.float32)
    else:
        r = x.to(like.dtype)
    return r


@triton.jit
def _load(ptrs, rmask, cmask, ROWS: tl.constexpr, COLS: tl.constexpr, UPCAST: tl.constexpr):
    """A 2-D tile; ROWS / COLS say whether its rows / columns need their bounds checked."""
    if ROWS and COLS:
        t = tl.load(ptrs, mask=rmask[:, None] & cmask[None, :], other=0)
    elif ROWS:
        t = tl.load(ptrs, mask=rmask[:, None], other=0)
    elif COLS:
        t = tl.load(ptrs, mask=cmask[None, :], other=0)
    else:
        t = tl.load(ptrs)
    if UPCAST:
        t = t.to(tl.float32)
    return t


@triton.jit
def _exp(x, WIDE: tl.constexpr):
    if WIDE:
        r = tl.exp(x)
    else:
        r = tl.exp2(x)
    return r


@triton.jit
def _log(x, WIDE: tl.constexpr):
    if WIDE:
        r = tl.log(x)
    else:
        r = tl.log2(x)
    return r


@triton.jit
def _bias(s, ptrs, ok, unit, MASK: tl.constexpr):
    """Scores ``s`` with the user mask tile at ``ptrs`` (read where ``ok``) applied: bool gives
    -inf where False, an additive mask is added in ``unit``s."""
    mk = tl.load(ptrs, mask=ok, other=0)
    if MASK == 1:
        s = tl.where(mk != 0, s, NEG_INF)
    else:
        s = s + mk.to(s.dtype) * unit
    return s


@triton.jit
def _keep(s, rows, cols, L, S, CAUSAL: tl.constexpr):
    """-inf outside the keys (and, when CAUSAL, above the diagonal ``j > i``)."""
    keep = (cols < S)[None, :]
    if CAUSAL:
        keep = keep & (cols[None, :] <= rows[:, None])
    return tl.where(keep, s, NEG_INF)


@triton.jit
def _key_range(start_m, S, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """``(lo, hi)``: key blocks ``[0, lo)`` need no mask for query rows from ``start_m``, those
    in ``[lo, hi)`` are masked (diagonal, ragged end) and those past ``hi`` are skipped."""
    full = S // BLOCK_N * BLOCK_N
    if CAUSAL:
        lo = tl.minimum((start_m + 1) // BLOCK_N * BLOCK_N, full)
        hi = tl.minimum(start_m + BLOCK_M, S)
    else:
        lo = full
        hi = S
    return lo, hi


# -- forward ----------------------------------------------------------------------------------


@triton.jit
def _fwd_blocks(acc, l_i, m_i, q, k_base, v_base, m_base, rows, lo, hi, L, S, D, DV, skn, svn,
                smm, smn, qk_scale, unit, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                MASK: tl.constexpr, WIDE: tl.constexpr, DOT: tl.constexpr,
                PRECISION: tl.constexpr, UPCAST: tl.constexpr, EVEN_D: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    offs_e = tl.arange(0, BLOCK_DV)
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        k = _load(k_base + cols[:, None] * skn + offs_d[None, :], cols < S, offs_d < D,
                  MASKED, not EVEN_D, UPCAST)
        s = _mm(q, tl.trans(k), tl.zeros((q.shape[0], BLOCK_N), acc.dtype), DOT, PRECISION)
        s = s * qk_scale
        if MASK != 0:
            s = _bias(s, m_base + rows[:, None] * smm + cols[None, :] * smn,
                      (rows < L)[:, None] & (cols < S)[None, :], unit, MASK)
        if MASKED:
            s = _keep(s, rows, cols, L, S, CAUSAL)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        if MASK != 0:  # rows masked so far: exponents of -inf, not nan
            m_use = tl.where(m_new == NEG_INF, 0.0, m_new)
        else:
            m_use = m_new
        p = _exp(s - m_use[:, None], WIDE)
        alpha = _exp(m_i - m_use, WIDE)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = _load(v_base + cols[:, None] * svn + offs_e[None, :], cols < S, offs_e < DV,
                  MASKED, not EVEN_D, UPCAST)
        acc = _mm(_operand(p, v, UPCAST), v, acc * alpha[:, None], DOT, PRECISION)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def attn_fwd(out, lse, q, k, v, mask, L, S, D, DV, B2, sq1, sq2, sqm, sk1, sk2, skn, sv1, sv2,
             svn, so1, so2, som, sm1, sm2, smm, smn, sc, UNIT: tl.constexpr, CAUSAL: tl.constexpr,
             MASK: tl.constexpr,
             WIDE: tl.constexpr, DOT: tl.constexpr, PRECISION: tl.constexpr,
             UPCAST: tl.constexpr, EVEN_D: tl.constexpr, BLOCK_M: tl.constexpr,
             BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    """``out[b, i] = softmax_j(q k^T scale + bias) v`` and ``lse[b, i]`` (natural log) for a
    block of rows; ``sc`` points at the scale, UNIT is log2(e) (1 under WIDE); ``out`` is
    addressed through its strides ``so*`` (laid out as ``q``: see `attention._dense_like`)."""
    unit = UNIT
    qk_scale = tl.load(sc) * unit
    pm = tl.program_id(0)
    if CAUSAL:  # the longest rows first: they finish with the rest of the grid
        pm = tl.num_programs(0) - 1 - pm
    bid = tl.program_id(1).to(tl.int64)
    b1 = bid // B2
    b2 = bid % B2
    start_m = pm * BLOCK_M
    rows = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_e = tl.arange(0, BLOCK_DV)
    qt = _load(q + b1 * sq1 + b2 * sq2 + rows[:, None] * sqm + offs_d[None, :], rows < L,
               offs_d < D, True, not EVEN_D, UPCAST)
    k_base = k + b1 * sk1 + b2 * sk2
    v_base = v + b1 * sv1 + b2 * sv2
    m_base = mask + b1 * sm1 + b2 * sm2
    if WIDE:
        acc = tl.zeros((BLOCK_M, BLOCK_DV), tl.float64)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_DV), tl.float32)
    l_i = tl.sum(acc, 1)
    m_i = l_i + NEG_INF
    lo, hi = _key_range(start_m, S, CAUSAL, BLOCK_M, BLOCK_N)
    acc, l_i, m_i = _fwd_blocks(acc, l_i, m_i, qt, k_base, v_base, m_base, rows, 0, lo, L, S,
                                D, DV, skn, svn, smm, smn, qk_scale, unit, False, CAUSAL, MASK,
                                WIDE, DOT, PRECISION, UPCAST, EVEN_D, BLOCK_N, BLOCK_D,
                                BLOCK_DV)
    acc, l_i, m_i = _fwd_blocks(acc, l_i, m_i, qt, k_base, v_base, m_base, rows, lo, hi, L, S,
                                D, DV, skn, svn, smm, smn, qk_scale, unit, True, CAUSAL, MASK,
                                WIDE, DOT, PRECISION, UPCAST, EVEN_D, BLOCK_N, BLOCK_D,
                                BLOCK_DV)
    # a row that may attend nowhere gives nan (0 / 0), as softmax of a row of -inf does
    o = acc / l_i[:, None]
    row_lse = (m_i + _log(l_i, WIDE)) / unit
    if MASK != 0:
        row_lse = tl.where(l_i == 0, float("nan"), row_lse)
    out_ptrs = out + b1 * so1 + b2 * so2 + rows[:, None] * som + offs_e[None, :]
    tl.store(out_ptrs, o.to(out.dtype.element_ty),
             mask=(rows < L)[:, None] & (offs_e < DV)[None, :])
    tl.store(lse + bid * L + rows, row_lse.to(lse.dtype.element_ty), mask=rows < L)


# -- backward ---------------------------------------------------------------------------------


@triton.jit
def attn_bwd_delta(delta, o, g, L, DV, B2, so1, so2, som, sg1, sg2, sgm, WIDE: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_DV: tl.constexpr):
    """``delta[b, i] = sum_e dO[b, i, e] * O[b, i, e]`` (float32; float64 under WIDE)."""
    bid = tl.program_id(1).to(tl.int64)
    b1 = bid // B2
    b2 = bid % B2
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_e = tl.arange(0, BLOCK_DV)
    m = (rows < L)[:, None] & (offs_e < DV)[None, :]
    ot = tl.load(o + b1 * so1 + b2 * so2 + rows[:, None] * som + offs_e[None, :], mask=m, other=0)
    gt = tl.load(g + b1 * sg1 + b2 * sg2 + rows[:, None] * sgm + offs_e[None, :], mask=m, other=0)
    if WIDE:
        d = tl.sum(ot.to(tl.float64) * gt.to(tl.float64), 1)
    else:
        d = tl.sum(ot.to(tl.float32) * gt.to(tl.float32), 1)
    tl.store(delta + bid * L + rows, d, mask=rows < L)


@triton.jit
def _dkdv_blocks(dk, dv, k, v, q_base, g_base, lse_base, delta_base, m_base, cols, lo, hi, L, S,
                 D, DV, sqm, sgm, smm, smn, qk_scale, unit, MASKED: tl.constexpr,
                 CAUSAL: tl.constexpr, MASK: tl.constexpr, WIDE: tl.constexpr,
                 DOT: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                 EVEN_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
                 BLOCK_DV: tl.constexpr):
    """Add the query blocks ``[lo, hi)`` to one key block's ``dk`` (unscaled) and ``dv``; the
    scores are held transposed, ``[keys, queries]``."""
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_e = tl.arange(0, BLOCK_DV)
    for start_m in range(lo, hi, BLOCK_M):
        rows = start_m + offs_m
        q = _load(q_base + rows[:, None] * sqm + offs_d[None, :], rows < L, offs_d < D, MASKED,
                  not EVEN_D, UPCAST)
        g = _load(g_base + rows[:, None] * sgm + offs_e[None, :], rows < L, offs_e < DV, MASKED,
                  not EVEN_D, UPCAST)
        if MASKED:
            lse_r = tl.load(lse_base + rows, mask=rows < L, other=0)
            delta_r = tl.load(delta_base + rows, mask=rows < L, other=0)
        else:
            lse_r = tl.load(lse_base + rows)
            delta_r = tl.load(delta_base + rows)
        st = _mm(k, tl.trans(q), tl.zeros((k.shape[0], BLOCK_M), dk.dtype), DOT, PRECISION)
        st = st * qk_scale
        if MASK != 0:
            st = _bias(st, m_base + rows[None, :] * smm + cols[:, None] * smn,
                       (rows < L)[None, :] & (cols < S)[:, None], unit, MASK)
        if MASKED:
            keep = (rows < L)[None, :]
            if CAUSAL:
                keep = keep & (cols[:, None] <= rows[None, :])
            st = tl.where(keep, st, NEG_INF)
        pt = _exp(st - (lse_r * unit).to(st.dtype)[None, :], WIDE)
        dv = _mm(_operand(pt, g, UPCAST), g, dv, DOT, PRECISION)
        dpt = _mm(v, tl.trans(g), tl.zeros((k.shape[0], BLOCK_M), dk.dtype), DOT, PRECISION)
        dst = pt * (dpt - delta_r.to(dpt.dtype)[None, :])
        dk = _mm(_operand(dst, q, UPCAST), q, dk, DOT, PRECISION)
    return dk, dv


@triton.jit
def attn_bwd_dkdv(dk, dv, sdk1, sdk2, sdkn, sdv1, sdv2, sdvn, q, k, v, g, lse, delta, mask, L,
                  S, D, DV, B2, sq1, sq2, sqm, sk1, sk2, skn, sv1, sv2, svn, sg1, sg2, sgm,
                  sm1, sm2, smm, smn, sc,
                  UNIT: tl.constexpr, CAUSAL: tl.constexpr, MASK: tl.constexpr, WIDE: tl.constexpr,
                  DOT: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                  EVEN_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    """``dk`` and ``dv`` of one block of ``BLOCK_N`` keys (outputs addressed through their
    strides ``sdk*`` / ``sdv*``)."""
    unit = UNIT
    scale = tl.load(sc)
    qk_scale = scale * unit
    bid = tl.program_id(1).to(tl.int64)
    b1 = bid // B2
    b2 = bid % B2
    start_n = tl.program_id(0) * BLOCK_N
    cols = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    offs_e = tl.arange(0, BLOCK_DV)
    kt = _load(k + b1 * sk1 + b2 * sk2 + cols[:, None] * skn + offs_d[None, :], cols < S,
               offs_d < D, True, not EVEN_D, UPCAST)
    vt = _load(v + b1 * sv1 + b2 * sv2 + cols[:, None] * svn + offs_e[None, :], cols < S,
               offs_e < DV, True, not EVEN_D, UPCAST)
    if WIDE:
        dk_acc = tl.zeros((BLOCK_N, BLOCK_D), tl.float64)
        dv_acc = tl.zeros((BLOCK_N, BLOCK_DV), tl.float64)
    else:
        dk_acc = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
        dv_acc = tl.zeros((BLOCK_N, BLOCK_DV), tl.float32)
    q_base = q + b1 * sq1 + b2 * sq2
    g_base = g + b1 * sg1 + b2 * sg2
    lse_base = lse + bid * L
    delta_base = delta + bid * L
    m_base = mask + b1 * sm1 + b2 * sm2
    # query blocks: [lo, mid) masked (the diagonal), [mid, full) unmasked, [max(full, lo), L)
    # masked (the ragged end); causal programs start at the diagonal
    full = L // BLOCK_M * BLOCK_M
    if CAUSAL:
        lo = start_n // BLOCK_M * BLOCK_M
        diag = tl.cdiv(start_n + BLOCK_N - 1, BLOCK_M) * BLOCK_M
        mid = tl.maximum(tl.minimum(diag, full), lo)
    else:
        lo = 0
        mid = 0
    dk_acc, dv_acc = _dkdv_blocks(dk_acc, dv_acc, kt, vt, q_base, g_base, lse_base, delta_base,
                                  m_base, cols, lo, mid, L, S, D, DV, sqm, sgm, smm, smn,
                                  qk_scale, unit, True, CAUSAL, MASK, WIDE, DOT, PRECISION,
                                  UPCAST, EVEN_D, BLOCK_M, BLOCK_D, BLOCK_DV)
    dk_acc, dv_acc = _dkdv_blocks(dk_acc, dv_acc, kt, vt, q_base, g_base, lse_base, delta_base,
                                  m_base, cols, mid, full, L, S, D, DV, sqm, sgm, smm, smn,
                                  qk_scale, unit, False, CAUSAL, MASK, WIDE, DOT, PRECISION,
                                  UPCAST, EVEN_D, BLOCK_M, BLOCK_D, BLOCK_DV)
    dk_acc, dv_acc = _dkdv_blocks(dk_acc, dv_acc, kt, vt, q_base, g_base, lse_base, delta_base,
                                  m_base, cols, tl.maximum(full, lo), L, L, S, D, DV, sqm, sgm,
                                  smm, smn, qk_scale, unit, True, CAUSAL, MASK, WIDE, DOT,
                                  PRECISION, UPCAST, EVEN_D, BLOCK_M, BLOCK_D, BLOCK_DV)
    dk_acc = dk_acc * scale
    tl.store(dk + b1 * sdk1 + b2 * sdk2 + cols[:, None] * sdkn + offs_d[None, :],
             dk_acc.to(dk.dtype.element_ty), mask=(cols < S)[:, None] & (offs_d < D)[None, :])
    tl.store(dv + b1 * sdv1 + b2 * sdv2 + cols[:, None] * sdvn + offs_e[None, :],
             dv_acc.to(dv.dtype.element_ty),
             mask=(cols < S)[:, None] & (offs_e < DV)[None, :])


@triton.jit
def _dq_blocks(dq, q, g, lse_r, delta_r, k_base, v_base, m_base, rows, lo, hi, L, S, D, DV, skn,
               svn, smm, smn, qk_scale, unit, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
               MASK: tl.constexpr, WIDE: tl.constexpr, DOT: tl.constexpr,
               PRECISION: tl.constexpr, UPCAST: tl.constexpr, EVEN_D: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    """Add the key blocks ``[lo, hi)`` to one query block's ``dq`` (unscaled)."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    offs_e = tl.arange(0, BLOCK_DV)
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        k = _load(k_base + cols[:, None] * skn + offs_d[None, :], cols < S, offs_d < D, MASKED,
                  not EVEN_D, UPCAST)
        v = _load(v_base + cols[:, None] * svn + offs_e[None, :], cols < S, offs_e < DV, MASKED,
                  not EVEN_D, UPCAST)
        s = _mm(q, tl.trans(k), tl.zeros((q.shape[0], BLOCK_N), dq.dtype), DOT, PRECISION)
        s = s * qk_scale
        if MASK != 0:
            s = _bias(s, m_base + rows[:, None] * smm + cols[None, :] * smn,
                      (rows < L)[:, None] & (cols < S)[None, :], unit, MASK)
        if MASKED:
            s = _keep(s, rows, cols, L, S, CAUSAL)
        p = _exp(s - lse_r[:, None], WIDE)
        dp = _mm(g, tl.trans(v), tl.zeros((q.shape[0], BLOCK_N), dq.dtype), DOT, PRECISION)
        ds = p * (dp - delta_r[:, None])
        dq = _mm(_operand(ds, k, UPCAST), k, dq, DOT, PRECISION)
    return dq


@triton.jit
def attn_bwd_dq(dq, sdq1, sdq2, sdqm, q, k, v, g, lse, delta, mask, L, S, D, DV, B2, sq1, sq2,
                sqm, sk1, sk2, skn, sv1, sv2, svn, sg1, sg2, sgm, sm1, sm2, smm, smn, sc,
                UNIT: tl.constexpr,
                CAUSAL: tl.constexpr, MASK: tl.constexpr, WIDE: tl.constexpr,
                DOT: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                EVEN_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    """``dq`` of one block of ``BLOCK_M`` query rows (addressed through its strides
    ``sdq*``)."""
    unit = UNIT
    scale = tl.load(sc)
    qk_scale = scale * unit
    pm = tl.program_id(0)
    if CAUSAL:
        pm = tl.num_programs(0) - 1 - pm
    bid = tl.program_id(1).to(tl.int64)
    b1 = bid // B2
    b2 = bid % B2
    start_m = pm * BLOCK_M
    rows = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_e = tl.arange(0, BLOCK_DV)
    qt = _load(q + b1 * sq1 + b2 * sq2 + rows[:, None] * sqm + offs_d[None, :], rows < L,
               offs_d < D, True, not EVEN_D, UPCAST)
    gt = _load(g + b1 * sg1 + b2 * sg2 + rows[:, None] * sgm + offs_e[None, :], rows < L,
               offs_e < DV, True, not EVEN_D, UPCAST)
    if WIDE:
        dq_acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float64)
    else:
        dq_acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    lse_r = (tl.load(lse + bid * L + rows, mask=rows < L, other=0) * unit).to(dq_acc.dtype)
    delta_r = tl.load(delta + bid * L + rows, mask=rows < L, other=0).to(dq_acc.dtype)
    k_base = k + b1 * sk1 + b2 * sk2
    v_base = v + b1 * sv1 + b2 * sv2
    m_base = mask + b1 * sm1 + b2 * sm2
    lo, hi = _key_range(start_m, S, CAUSAL, BLOCK_M, BLOCK_N)
    dq_acc = _dq_blocks(dq_acc, qt, gt, lse_r, delta_r, k_base, v_base, m_base, rows, 0, lo, L, S,
                        D, DV, skn, svn, smm, smn, qk_scale, unit, False, CAUSAL, MASK, WIDE,
                        DOT, PRECISION, UPCAST, EVEN_D, BLOCK_N, BLOCK_D, BLOCK_DV)
    dq_acc = _dq_blocks(dq_acc, qt, gt, lse_r, delta_r, k_base, v_base, m_base, rows, lo, hi, L,
                        S, D, DV, skn, svn, smm, smn, qk_scale, unit, True, CAUSAL, MASK, WIDE,
                        DOT, PRECISION, UPCAST, EVEN_D, BLOCK_N, BLOCK_D, BLOCK_DV)
    dq_acc = dq_acc * scale
    tl.store(dq + b1 * sdq1 + b2 * sdq2 + rows[:, None] * sdqm + offs_d[None, :],
             dq_acc.to(dq.dtype.element_ty),
             mask=(rows < L)[:, None] & (offs_d < D)[None, :])
