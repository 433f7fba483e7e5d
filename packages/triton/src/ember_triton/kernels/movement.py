"""Movement kernels that need more than a strided copy: triangles, sort ranks, error flags."""

import triton
import triton.language as tl


@triton.jit
def triangle(out, x, n, R, C, k, LOWER: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    col = offs % C
    row = (offs // C) % R
    v = tl.load(x + offs, mask=mask)
    if LOWER:
        keep = col - row <= k
    else:
        keep = col - row >= k
    tl.store(out + offs, tl.where(keep, v, tl.zeros_like(v)), mask=mask)


@triton.jit
def _before(a, b, ia, ib, DESCENDING: tl.constexpr, FLOAT: tl.constexpr):
    # whether (a, ia) sorts before (b, ib): nan is the largest value, ties keep index order
    if FLOAT:
        na = a != a
        nb = b != b
        if DESCENDING:
            strict = (a > b) | (na & (~nb))
        else:
            strict = (a < b) | (nb & (~na))
        same = (a == b) | (na & nb)
    else:
        if DESCENDING:
            strict = a > b
        else:
            strict = a < b
        same = a == b
    return strict | (same & (ia < ib))


@triton.jit
def rank_sort(vals, idxs, x, K, DESCENDING: tl.constexpr, FLOAT: tl.constexpr,
              BLOCK_I: tl.constexpr, BLOCK_J: tl.constexpr):
    # one row per program along axis 0: rank[i] = how many elements sort before element i;
    # element i then goes to position rank[i].  O(K^2) comparisons, stable, simple.
    row = tl.program_id(0).to(tl.int64)
    ii = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    mi = ii < K
    base = x + row * K
    xi = tl.load(base + ii, mask=mi)
    rank = tl.zeros((BLOCK_I,), tl.int64)
    for j0 in range(0, K, BLOCK_J):
        jj = j0 + tl.arange(0, BLOCK_J)
        mj = jj < K
        xj = tl.load(base + jj, mask=mj)
        b = _before(xj[None, :], xi[:, None], jj[None, :], ii[:, None], DESCENDING, FLOAT)
        b = b & mj[None, :]
        rank += tl.sum(b.to(tl.int64), axis=1)
    tl.store(vals + row * K + rank, xi, mask=mi)
    tl.store(idxs + row * K + rank, ii.to(tl.int64), mask=mi)


@triton.jit
def nonzero_rows(out, flags, csum, n, NDIM: tl.constexpr, S0, S1, S2, S3, S4, S5, S6, S7,
                 BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    f = tl.load(flags + offs, mask=mask, other=0) != 0
    pos = tl.load(csum + offs, mask=mask, other=1) - 1
    m = mask & f
    rem = offs
    if NDIM > 7:
        tl.store(out + pos * NDIM + 7, rem % S7, mask=m)
        rem = rem // S7
    if NDIM > 6:
        tl.store(out + pos * NDIM + 6, rem % S6, mask=m)
        rem = rem // S6
    if NDIM > 5:
        tl.store(out + pos * NDIM + 5, rem % S5, mask=m)
        rem = rem // S5
    if NDIM > 4:
        tl.store(out + pos * NDIM + 4, rem % S4, mask=m)
        rem = rem // S4
    if NDIM > 3:
        tl.store(out + pos * NDIM + 3, rem % S3, mask=m)
        rem = rem // S3
    if NDIM > 2:
        tl.store(out + pos * NDIM + 2, rem % S2, mask=m)
        rem = rem // S2
    if NDIM > 1:
        tl.store(out + pos * NDIM + 1, rem % S1, mask=m)
        rem = rem // S1
    tl.store(out + pos * NDIM, rem % S0, mask=m)


@triton.jit
def transpose(out, x, R, C, sr, sc, WIDE: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr):
    """``out[r, c] = x[r, c]`` for an ``R x C`` view ``x`` whose rows are not contiguous
    (typically a transpose, ``sr`` 1): each program moves one ``BR x BC`` tile, read along
    ``x``'s contiguous axis and written along ``out``'s (Triton swaps the layouts through shared
    memory), so both sides of the copy are coalesced."""
    rr = tl.program_id(0) * BR + tl.arange(0, BR)
    rc = tl.program_id(1) * BC + tl.arange(0, BC)
    if WIDE:
        rr = rr.to(tl.int64)
        rc = rc.to(tl.int64)
    mask = (rr < R)[:, None] & (rc < C)[None, :]
    v = tl.load(x + rr[:, None] * sr + rc[None, :] * sc, mask=mask)
    tl.store(out + rr[:, None] * C + rc[None, :], v, mask=mask)


@triton.jit
def _batch_offset(b, NB: tl.constexpr, B1, B2, B3, X0, X1, X2, X3, O0, O1, O2, O3):
    # the x and out offsets of index ``b`` (a scalar or a vector) over NB batch axes of sizes
    # B0 (implied), B1, ..., strides X0... in x and O0... in out; the last axis varies fastest
    xo = b * 0
    oo = b * 0
    rem = b
    if NB > 3:
        c = rem % B3
        xo += c * X3
        oo += c * O3
        rem = rem // B3
    if NB > 2:
        c = rem % B2
        xo += c * X2
        oo += c * O2
        rem = rem // B2
    if NB > 1:
        c = rem % B1
        xo += c * X1
        oo += c * O1
        rem = rem // B1
    if NB > 0:
        xo += rem * X0
        oo += rem * O0
    return xo, oo


@triton.jit
def copy_rows(out, x, R, D, B1, B2, B3, X0, X1, X2, X3, NB: tl.constexpr, WIDE: tl.constexpr,
              BR: tl.constexpr, BD: tl.constexpr):
    """``out[r, :] = x[offset(r) : offset(r) + D]``: ``R`` rows of ``D`` elements, contiguous
    in both (``permute(0, 2, 1, 3)`` of a ``[b, h, t, d]`` tensor: rows of ``d``).  Row ``r``'s
    coordinates over the NB outer axes (sizes B0 = R / (B1 B2 B3), B1, ...) give its offset in
    ``x`` through the strides ``X``; each program moves ``BR x BD`` elements, the divisions
    done once a row, loads and stores coalesced along the rows."""
    rows = tl.program_id(0) * BR + tl.arange(0, BR)
    cols = tl.program_id(1) * BD + tl.arange(0, BD)
    if WIDE:
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
    src, _ = _batch_offset(rows, NB, B1, B2, B3, X0, X1, X2, X3, X0, X1, X2, X3)
    mask = (rows < R)[:, None] & (cols < D)[None, :]
    v = tl.load(x + src[:, None] + cols[None, :], mask=mask)
    tl.store(out + rows[:, None] * D + cols[None, :], v, mask=mask)


@triton.jit
def transpose_batched(out, x, K, C, sc, ok, B1, B2, B3, X0, X1, X2, X3, O0, O1, O2, O3,
                      NB: tl.constexpr, WIDE: tl.constexpr, BK: tl.constexpr,
                      BC: tl.constexpr):
    """A batch of `transpose` tiles: ``out[..., k, ..., c] = x[..., k, ..., c]`` where ``x`` is
    contiguous along ``k`` (stride 1; ``ok`` in ``out``) and ``out`` along ``c`` (stride 1;
    ``sc`` in ``x``).  Program ``p`` moves tile ``(p % tiles_k, p // tiles_k % tiles_c)`` of
    batch entry ``p // (tiles_k tiles_c)`` (NB axes, strides ``X`` in ``x``, ``O`` in
    ``out``), read along ``k`` and written along ``c``: both sides coalesced."""
    pid = tl.program_id(0)
    tiles_k = tl.cdiv(K, BK)
    tiles_c = tl.cdiv(C, BC)
    tk = pid % tiles_k
    rest = pid // tiles_k
    tc = rest % tiles_c
    b = rest // tiles_c
    kk = tk * BK + tl.arange(0, BK)
    cc = tc * BC + tl.arange(0, BC)
    if WIDE:
        b = b.to(tl.int64)
        kk = kk.to(tl.int64)
        cc = cc.to(tl.int64)
    xo, oo = _batch_offset(b, NB, B1, B2, B3, X0, X1, X2, X3, O0, O1, O2, O3)
    mask = (kk < K)[:, None] & (cc < C)[None, :]
    v = tl.load(x + xo + kk[:, None] + cc[None, :] * sc, mask=mask)
    tl.store(out + oo + kk[:, None] * ok + cc[None, :], v, mask=mask)


@triton.jit
def check_values(err, x, n, low, high, skip, code, INSIDE: tl.constexpr, SKIP: tl.constexpr,
                 BLOCK: tl.constexpr):
    # a failed check writes its code into the device's error word unless an earlier one did
    # (the first failure stays until the host reads the word at a sync)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x + offs, mask=mask, other=0).to(tl.int64)
    if INSIDE:
        bad = (v >= low) & (v < high)
    else:
        bad = (v < low) | (v >= high)
    if SKIP:
        bad = bad & (v != skip)
    flag = tl.max((bad & mask).to(tl.int32), axis=0)
    tl.atomic_cas(err, 0, flag * code)
