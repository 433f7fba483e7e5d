"""Movement kernels that need more than a strided copy: triangles and sort ranks."""

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
