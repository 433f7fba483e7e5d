"""Reductions over the last axis of a contiguous ``[M, K]`` view, arg-reductions and scans.

A program reduces ``BLOCK_M`` rows, looping over the row in ``BLOCK_K`` chunks; a second grid
axis splits long rows into ``CHUNK``-sized pieces whose partial results a second pass reduces
(the host decides).  ``ident`` points at the identity of the op in the accumulator dtype.
"""

import triton
import triton.language as tl

SUM = tl.constexpr(0)
PROD = tl.constexpr(1)
MAX = tl.constexpr(2)
MIN = tl.constexpr(3)
ANY = tl.constexpr(4)
ALL = tl.constexpr(5)


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def reduce_rows(out, x, ident, M, K, SM, SK, K2, SK2, CHUNK, OP: tl.constexpr,
                FLOAT: tl.constexpr, TWO_LEVEL: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_K: tl.constexpr):
    # row i, element j of the [M, K] matrix is x[i * SM + j * SK]; TWO_LEVEL: the row is two
    # strided axes, x[i * SM + (j // K2) * SK + (j % K2) * SK2] (a sum over batch and space)
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    part = tl.program_id(1)
    parts = tl.num_programs(1)
    rmask = rows < M
    init = tl.load(ident)
    acc = tl.zeros((BLOCK_M,), init.dtype) + init
    nan = tl.zeros((BLOCK_M,), tl.int1)
    k_lo = part * CHUNK
    k_hi = tl.minimum(k_lo + CHUNK, K)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        kk = k0 + tl.arange(0, BLOCK_K)
        m = rmask[:, None] & (kk < k_hi)[None, :]
        if TWO_LEVEL:
            koff = (kk // K2) * SK + (kk % K2) * SK2
        else:
            koff = kk * SK
        v = tl.load(x + rows[:, None] * SM + koff[None, :], mask=m)
        if OP == ANY or OP == ALL:
            v = (v != 0).to(init.dtype)
        else:
            v = v.to(init.dtype)
        v = tl.where(m, v, init)
        if OP == SUM:
            acc += tl.sum(v, axis=1)
        elif OP == PROD:
            acc *= tl.reduce(v, 1, _mul)
        elif OP == MAX or OP == ANY:
            if FLOAT:
                nan = nan | (tl.max((v != v).to(tl.int32), axis=1) != 0)
            # tl.max widens small ints and halves: keep the loop-carried type fixed
            c = tl.max(v, axis=1).to(init.dtype)
            acc = tl.where(c > acc, c, acc)
        else:
            if FLOAT:
                nan = nan | (tl.max((v != v).to(tl.int32), axis=1) != 0)
            c = tl.min(v, axis=1).to(init.dtype)
            acc = tl.where(c < acc, c, acc)
    if FLOAT:
        acc = tl.where(nan, float("nan"), acc)
    tl.store(out + rows * parts + part, acc.to(out.dtype.element_ty), mask=rmask)


@triton.jit
def mean_var_rows(out, x, M, K, denom, VAR: tl.constexpr, WIDE: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < M
    if WIDE:
        acc = tl.zeros((BLOCK_M,), tl.float64)
    else:
        acc = tl.zeros((BLOCK_M,), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + tl.arange(0, BLOCK_K)
        m = rmask[:, None] & (kk < K)[None, :]
        v = tl.load(x + rows[:, None] * K + kk[None, :], mask=m, other=0).to(acc.dtype)
        acc += tl.sum(v, axis=1)
    mean = acc / K
    if VAR:
        ss = acc * 0
        for k0 in range(0, K, BLOCK_K):
            kk = k0 + tl.arange(0, BLOCK_K)
            m = rmask[:, None] & (kk < K)[None, :]
            v = tl.load(x + rows[:, None] * K + kk[None, :], mask=m, other=0).to(acc.dtype)
            d = tl.where(m, v - mean[:, None], 0.0)
            ss += tl.sum(d * d, axis=1)
        res = ss / denom
    else:
        res = mean
    tl.store(out + rows, res.to(out.dtype.element_ty), mask=rmask)


@triton.jit
def arg_rows(out, x, ident, M, K, IS_MAX: tl.constexpr, FLOAT: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < M
    init = tl.load(ident)
    best = tl.zeros((BLOCK_M,), init.dtype) + init
    bidx = tl.zeros((BLOCK_M,), tl.int64)
    big = K + 1
    nidx = tl.zeros((BLOCK_M,), tl.int64) + big
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + tl.arange(0, BLOCK_K)
        m = rmask[:, None] & (kk < K)[None, :]
        v = tl.load(x + rows[:, None] * K + kk[None, :], mask=m)
        v = tl.where(m, v, init)
        kb = kk.to(tl.int64)[None, :] + tl.zeros((BLOCK_M, BLOCK_K), tl.int64)
        if FLOAT:
            isn = (v != v) & m
            nidx = tl.minimum(nidx, tl.min(tl.where(isn, kb, big), axis=1))
            v = tl.where(isn, init, v)
        if IS_MAX:
            c = tl.max(v, axis=1).to(init.dtype)
            upd = c > best
        else:
            c = tl.min(v, axis=1).to(init.dtype)
            upd = c < best
        ci = tl.min(tl.where(m & (v == c[:, None]), kb, big), axis=1)
        first = k0 == 0
        upd = upd | (first & (ci < big))
        best = tl.where(upd, c, best)
        bidx = tl.where(upd, ci, bidx)
    if FLOAT:
        bidx = tl.where(nidx < big, nidx, bidx)
    tl.store(out + rows, bidx, mask=rmask)


@triton.jit
def scan_rows(out, x, M, K, PROD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
              ACC: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < M
    if PROD:
        carry = tl.zeros((BLOCK_M,), ACC) + 1
    else:
        carry = tl.zeros((BLOCK_M,), ACC)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + tl.arange(0, BLOCK_K)
        m = rmask[:, None] & (kk < K)[None, :]
        if PROD:
            v = tl.load(x + rows[:, None] * K + kk[None, :], mask=m, other=1).to(ACC)
            c = tl.associative_scan(v, 1, _mul) * carry[:, None]
            carry = carry * tl.reduce(v, 1, _mul)
        else:
            v = tl.load(x + rows[:, None] * K + kk[None, :], mask=m, other=0).to(ACC)
            c = tl.cumsum(v, axis=1) + carry[:, None]
            carry = carry + tl.sum(v, axis=1)
        tl.store(out + rows[:, None] * K + kk[None, :], c.to(out.dtype.element_ty), mask=m)
