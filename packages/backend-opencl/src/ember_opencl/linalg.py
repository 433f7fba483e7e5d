"""Batched matmul: a register-blocked kernel for the bulk of C and a general tiled kernel for
everything else (edges, integers, small shapes).

The fast kernel gives each work-item an ``RM x VW`` block of C (8 rows x 16 columns): ``RM``
accumulators of ``float16``/``double8`` vectors, one vector load of a dense row of B and one
broadcast element of A per row per step of K, no local memory and no barriers.  PoCL runs a
work-group as a loop over work-items, so on CPUs this explicit vector form is what reaches the
SIMD units; local-memory tiles cost barriers there (measured in docs/opencl.md).  The rows
and columns the blocks do not cover are computed by the general kernel into the same output.

Operands are strided views (broadcast batches cost no copy); batch axes are merged where their
strides allow.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from ember.ops import linalg as la

from .runtime import CLArray, Runtime, compute_type, ctype, load_expr, store_expr
from .strided import collapse, contiguous

__all__ = ["kernels", "matmul"]

# general kernel: work-group of (TN / WN) x (TM / WM) items, K staged TK at a time
TM, TN, TK, WM, WN = 32, 32, 16, 4, 4

_MATMUL = """
#define TM {TM}
#define TN {TN}
#define TK {TK}
#define WM {WM}
#define WN {WN}
__kernel __attribute__((reqd_work_group_size(TN / WN, TM / WM, 1)))
void mm(__global {t}* C, long co, long cb, long ldc,
        __global const {t}* A, long ao, long am, long ak,
        __global const {t}* B, long bo, long bk, long bn, long M, long N, long K {bparams})
{{
    int tx = get_local_id(0), ty = get_local_id(1);
    int lid = ty * (TN / WN) + tx;
    long m0 = get_group_id(1) * TM, n0 = get_group_id(0) * TN;
    long bt = get_global_id(2), r = bt;
    long aoff = ao, boff = bo;
    {bdecomp}
    __local {c} As[TK][TM + 1];
    __local {c} Bs[TK][TN + 1];
    {c} acc[WM][WN];
    for (int i = 0; i < WM; i++) for (int j = 0; j < WN; j++) acc[i][j] = 0;
    const int NT = (TN / WN) * (TM / WM);
    for (long k0 = 0; k0 < K; k0 += TK) {{
        for (int e = lid; e < TM * TK; e += NT) {{
            int mm_ = e / TK, kk = e % TK;
            long m = m0 + mm_, k = k0 + kk;
            As[kk][mm_] = (m < M && k < K) ? {load_a} : ({c})0;
        }}
        for (int e = lid; e < TN * TK; e += NT) {{
            int kk = e / TN, nn = e % TN;
            long n = n0 + nn, k = k0 + kk;
            Bs[kk][nn] = (n < N && k < K) ? {load_b} : ({c})0;
        }}
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kk = 0; kk < TK; kk++) {{
            {c} a[WM], b[WN];
            for (int i = 0; i < WM; i++) a[i] = As[kk][ty * WM + i];
            for (int j = 0; j < WN; j++) b[j] = Bs[kk][tx + j * (TN / WN)];
            for (int i = 0; i < WM; i++) for (int j = 0; j < WN; j++) acc[i][j] += a[i] * b[j];
        }}
        barrier(CLK_LOCAL_MEM_FENCE);
    }}
    __global {t}* Cb = C + co + bt * cb;
    for (int i = 0; i < WM; i++) {{
        long m = m0 + ty * WM + i;
        if (m >= M) continue;
        for (int j = 0; j < WN; j++) {{
            long n = n0 + tx + j * (TN / WN);
            if (n < N) Cb[m * ldc + n] = {store};
        }}
    }}
}}
"""

# fast kernel: RM rows x VW columns a work-item; B rows dense
RM = 8
M_FIRST = 1
KB = 512  # K block of the fast kernel
VW = {"float": 16, "double": 8}

_MATMUL_REG = """
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void mmr(__global {t}* restrict C, long cb, long ldc,
         __global const {t}* restrict A, long ao, long am,
         __global const {t}* restrict B, long bo, long bk, long K, int beta {bparams})
{{
    long n0 = get_global_id({NAX}) * {VW}, m0 = get_global_id({MAX}) * {RM};
    long bt = get_global_id(2), r = bt;
    long aoff = ao, boff = bo;
    {bdecomp}
    __global {t}* Cb = C + bt * cb + m0 * ldc + n0;
    {t}{VW} acc[{RM}];
    for (int i = 0; i < {RM}; i++) acc[i] = beta ? vload{VW}(0, Cb + i * ldc) : ({t}{VW})0;
    __global const {t}* Ap = A + aoff + m0 * am;
    __global const {t}* Bp = B + boff + n0;
    for (long k = 0; k < K; k++) {{
        {t}{VW} b = vload{VW}(0, Bp + k * bk);
        {body}
    }}
    for (int i = 0; i < {RM}; i++) vstore{VW}(acc[i], 0, Cb + i * ldc);
}}
"""


def _batch_code(nb: int) -> tuple[str, str]:
    bparams = "".join(f", long as{d}, long bs{d}, long bn{d}" for d in range(nb))
    bdecomp = "\n    ".join(
        f"aoff += (r % bn{d}) * as{d}; boff += (r % bn{d}) * bs{d}; r /= bn{d};"
        for d in range(nb - 1, -1, -1))
    return bparams, bdecomp


def matmul(rt: Runtime, a: CLArray, b: CLArray) -> CLArray:
    """``a @ b`` for ``a[..., M, K]`` and ``b[..., K, N]`` of one batch shape."""
    *batch, M, K = a.shape
    N = b.shape[-1]
    out = rt.empty((*batch, M, N), a.dtype)
    if out.size == 0:
        return out
    if K == 0:
        from .strided import run_map

        return run_map(rt, "0", [], out=out)
    t = ctype(a.dtype)
    nbatch = math.prod(batch)
    m_fast = n_fast = 0
    if t in VW and M >= RM and N >= VW[t]:
        vw = VW[t]
        # the fast kernel wants dense rows of B and of A; copies cost O(K (M + N)) next to
        # O(M N K) of arithmetic
        if b.strides[-1] != 1:
            b = contiguous(rt, b)
        if a.strides[-1] != 1:
            a = contiguous(rt, a)
        m_fast, n_fast = M - M % RM, N - N % vw
        dims, sts = collapse(batch, [a.strides[:-2], b.strides[:-2]])
        bparams, bdecomp = _batch_code(len(dims))
        body = " ".join(f"acc[{i}] = fma(({t}{vw})(Ap[{i} * am + k]), b, acc[{i}]);"
                        for i in range(RM))
        k = rt.kernel(_MATMUL_REG.format(t=t, VW=vw, RM=RM, bparams=bparams, bdecomp=bdecomp,
                                         body=body, NAX=M_FIRST, MAX=1 - M_FIRST), "mmr")
        batch_args: list[Any] = []
        for d in range(len(dims)):
            batch_args += [np.int64(sts[0][d]), np.int64(sts[1][d]), np.int64(dims[d])]
        grid = (m_fast // RM, n_fast // vw) if M_FIRST else (n_fast // vw, m_fast // RM)
        # K in blocks, C accumulating: the B panels of a block stay in cache while the
        # work-items of a column of blocks reuse them
        for k0 in range(0, K, KB):
            rt.launch(k, (*grid, nbatch), (1, 1, 1), out.buffer, np.int64(M * N), np.int64(N),
                      a.buffer, np.int64(a.offset + k0), np.int64(a.strides[-2]), b.buffer,
                      np.int64(b.offset + k0 * b.strides[-2]), np.int64(b.strides[-2]),
                      np.int64(min(KB, K - k0)), np.int32(k0 > 0), *batch_args)
    # the rest of C: the columns right of the blocks (all rows), then the rows below them
    if n_fast < N:
        _general(rt, out, a, b, 0, M, n_fast, N)
    if m_fast < M and n_fast:
        _general(rt, out, a, b, m_fast, M, 0, n_fast)
    return out


def _general(rt: Runtime, out: CLArray, a: CLArray, b: CLArray, m0: int, m1: int, n0: int,
             n1: int) -> None:
    """C[..., m0:m1, n0:n1] with the tiled kernel."""
    *batch, M, K = a.shape
    N = b.shape[-1]
    dims, sts = collapse(batch, [a.strides[:-2], b.strides[:-2]])
    bparams, bdecomp = _batch_code(len(dims))
    dt = a.dtype
    c = compute_type(dt)
    src = _MATMUL.format(
        t=ctype(dt), c=c, bparams=bparams, bdecomp=bdecomp, TM=TM, TN=TN, TK=TK, WM=WM, WN=WN,
        load_a=load_expr(dt, "A[aoff + m * am + k * ak]"),
        load_b=load_expr(dt, "B[boff + k * bk + n * bn]"),
        store=store_expr(dt, "acc[i][j]"))
    k = rt.kernel(src, "mm")
    sm, sn = m1 - m0, n1 - n0
    args: list[Any] = [out.buffer, np.int64(m0 * N + n0), np.int64(M * N), np.int64(N),
                       a.buffer, np.int64(a.offset + m0 * a.strides[-2]),
                       np.int64(a.strides[-2]), np.int64(a.strides[-1]), b.buffer,
                       np.int64(b.offset + n0 * b.strides[-1]), np.int64(b.strides[-2]),
                       np.int64(b.strides[-1]), np.int64(sm), np.int64(sn), np.int64(K)]
    for d in range(len(dims)):
        args += [np.int64(sts[0][d]), np.int64(sts[1][d]), np.int64(dims[d])]
    gsize = (-(-sn // TN) * (TN // WN), -(-sm // TM) * (TM // WM), math.prod(batch))
    rt.launch(k, gsize, (TN // WN, TM // WM, 1), *args)


def kernels(rt: Runtime) -> dict[Any, Any]:
    return {la.matmul: lambda a, b: matmul(rt, a, b)}
