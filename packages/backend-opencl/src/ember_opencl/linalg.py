"""Batched matmul: a tiled kernel with local-memory tiles and a register block per work-item.

Each work-group computes a ``TM x TN`` tile of C; each work-item a ``WM x WN`` block of it,
reading A and B tiles staged in local memory.  Operands are any strided views (transposes and
broadcast batches cost no copy); batch axes are merged where their strides allow.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from ember.ops import linalg as la

from .runtime import CLArray, Runtime, compute_type, ctype
from .strided import collapse

__all__ = ["kernels", "matmul"]

# work-group of (TN / WN) x (TM / WM) items, K staged TK at a time
TM, TN, TK, WM, WN = 32, 32, 16, 4, 4

_MATMUL = """
#define TM {TM}
#define TN {TN}
#define TK {TK}
#define WM {WM}
#define WN {WN}
__kernel __attribute__((reqd_work_group_size(TN / WN, TM / WM, 1)))
void mm(__global {t}* C, __global const {t}* A, long ao, long am, long ak,
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
            As[kk][mm_] = (m < M && k < K) ? ({c})A[aoff + m * am + k * ak] : ({c})0;
        }}
        for (int e = lid; e < TN * TK; e += NT) {{
            int kk = e / TN, nn = e % TN;
            long n = n0 + nn, k = k0 + kk;
            Bs[kk][nn] = (n < N && k < K) ? ({c})B[boff + k * bk + n * bn] : ({c})0;
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
    __global {t}* Cb = C + bt * M * N;
    for (int i = 0; i < WM; i++) {{
        long m = m0 + ty * WM + i;
        if (m >= M) continue;
        for (int j = 0; j < WN; j++) {{
            long n = n0 + tx + j * (TN / WN);
            if (n < N) Cb[m * N + n] = ({t})acc[i][j];
        }}
    }}
}}
"""


# Rows of B dense and sizes that fit: each work-item computes WM rows x 8 columns with explicit
# float8/double8 arithmetic (no barriers), which CPU devices such as PoCL run much faster
# than the barrier-synchronised tiles.
VW, VM = 8, 4

_MATMUL_VEC = """
__kernel void mmv(__global {t}* C, __global const {t}* A, long ao, long am, long ak,
                  __global const {t}* B, long bo, long bk, long M, long N, long K {bparams})
{{
    long n0 = get_global_id(0) * {VW}, m0 = get_global_id(1) * {VM};
    long bt = get_global_id(2), r = bt;
    long aoff = ao, boff = bo;
    {bdecomp}
    {t}{VW} acc[{VM}];
    for (int i = 0; i < {VM}; i++) acc[i] = ({t}{VW})0;
    __global const {t}* Ap = A + aoff + m0 * am;
    __global const {t}* Bp = B + boff + n0;
    for (long k = 0; k < K; k++) {{
        {t}{VW} b = vload{VW}(0, Bp + k * bk);
        for (int i = 0; i < {VM}; i++) acc[i] += Ap[i * am + k * ak] * b;
    }}
    __global {t}* Cb = C + bt * M * N + m0 * N + n0;
    for (int i = 0; i < {VM}; i++) vstore{VW}(acc[i], 0, Cb + i * N);
}}
"""


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
    dims, sts = collapse(batch, [a.strides[:-2], b.strides[:-2]])
    nb = len(dims)
    bparams = "".join(f", long as{d}, long bs{d}, long bn{d}" for d in range(nb))
    bdecomp = "\n    ".join(
        f"aoff += (r % bn{d}) * as{d}; boff += (r % bn{d}) * bs{d}; r /= bn{d};"
        for d in range(nb - 1, -1, -1))
    nbatch = math.prod(batch)
    if a.dtype.kind == "f" and ctype(a.dtype) != "half" and b.strides[-1] == 1 and \
            N % VW == 0 and M % VM == 0:
        src = _MATMUL_VEC.format(t=ctype(a.dtype), bparams=bparams, bdecomp=bdecomp, VW=VW,
                                 VM=VM)
        k = rt.kernel(src, "mmv")
        args: list[Any] = [out.buffer, a.buffer, np.int64(a.offset), np.int64(a.strides[-2]),
                           np.int64(a.strides[-1]), b.buffer, np.int64(b.offset),
                           np.int64(b.strides[-2]), np.int64(M), np.int64(N), np.int64(K)]
        for d in range(nb):
            args += [np.int64(sts[0][d]), np.int64(sts[1][d]), np.int64(dims[d])]
        group = next(g for g in (16, 8, 4, 2, 1) if (N // VW) % g == 0)
        rt.launch(k, (N // VW, M // VM, nbatch), (group, 1, 1), *args)
        return out
    src = _MATMUL.format(t=ctype(a.dtype), c=compute_type(a.dtype), bparams=bparams,
                         bdecomp=bdecomp, TM=TM, TN=TN, TK=TK, WM=WM, WN=WN)
    k = rt.kernel(src, "mm")
    args = [out.buffer, a.buffer, np.int64(a.offset), np.int64(a.strides[-2]),
                       np.int64(a.strides[-1]), b.buffer, np.int64(b.offset),
                       np.int64(b.strides[-2]), np.int64(b.strides[-1]), np.int64(M),
                       np.int64(N), np.int64(K)]
    for d in range(nb):
        args += [np.int64(sts[0][d]), np.int64(sts[1][d]), np.int64(dims[d])]
    gsize = (-(-N // TN) * (TN // WN), -(-M // TM) * (TM // WM), nbatch)
    rt.launch(k, gsize, (TN // WN, TM // WM, 1), *args)
    return out


def kernels(rt: Runtime) -> dict[Any, Any]:
    return {la.matmul: lambda a, b: matmul(rt, a, b)}
