"""Row kernels of the fused composites: softmax, log_softmax, layer/RMS norm, cross entropy.

Every kernel works on contiguous ``[M, N]`` rows (the host moves the axis last).  A program
takes ``BLOCK_M`` rows; when a row fits in one ``BLOCK_N`` block (``ONE``) it is read once and
kept in registers, otherwise the kernel loops over the row in ``BLOCK_N`` chunks (softmax with
an online maximum and rescaled sum, so long rows are read twice, not three times).  Half types
are computed in float32, float64 in float64 (``WIDE``); offsets are int64.
"""

import triton
import triton.language as tl

NEG_INF = tl.constexpr(float("-inf"))


@triton.jit
def _acc(v, WIDE: tl.constexpr):
    if WIDE:
        r = v.to(tl.float64)
    else:
        r = v.to(tl.float32)
    return r


@triton.jit
def _rsqrt(v):
    # correctly rounded square root: plain tl.sqrt is approximate in float32
    if v.dtype == tl.float32:
        r = 1.0 / tl.sqrt_rn(v)
    else:
        r = 1.0 / tl.sqrt(v)
    return r


@triton.jit
def _rows(BLOCK_M: tl.constexpr):
    return tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)


# -- softmax / log_softmax ------------------------------------------------------------------


@triton.jit
def softmax_rows(out, x, M, N, LOG: tl.constexpr, WIDE: tl.constexpr, ONE: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = _rows(BLOCK_M)
    rmask = rows < M
    base = rows[:, None] * N
    cols = tl.arange(0, BLOCK_N)
    if ONE:
        m = rmask[:, None] & (cols < N)[None, :]
        v = tl.where(m, _acc(tl.load(x + base + cols[None, :], mask=m, other=0.0), WIDE), NEG_INF)
        mx = tl.max(v, axis=1)
        e = tl.exp(v - mx[:, None])
        s = tl.sum(tl.where(m, e, 0.0), axis=1)
        if LOG:
            r = v - mx[:, None] - tl.log(s)[:, None]
        else:
            r = e * (1.0 / s)[:, None]
        tl.store(out + base + cols[None, :], r.to(out.dtype.element_ty), mask=m)
    else:
        mx = _acc(tl.zeros((BLOCK_M,), tl.float32), WIDE) + NEG_INF
        s = _acc(tl.zeros((BLOCK_M,), tl.float32), WIDE)
        for k0 in range(0, N, BLOCK_N):
            kk = k0 + cols
            m = rmask[:, None] & (kk < N)[None, :]
            v = tl.where(m, _acc(tl.load(x + base + kk[None, :], mask=m, other=0.0), WIDE),
                         NEG_INF)
            new = tl.maximum(mx, tl.max(v, axis=1))
            shift = tl.where(new == NEG_INF, 0.0, new)  # rows of -inf so far: no rescale
            e = tl.where(m, tl.exp(v - shift[:, None]), 0.0)
            s = s * tl.exp(mx - shift) + tl.sum(e, axis=1)
            mx = new
        # a row that is -inf throughout gives nan, as exp(x - max(x)) does
        mx = tl.where(mx == NEG_INF, float("nan"), mx)
        inv = 1.0 / s
        lse = mx + tl.log(s)
        for k0 in range(0, N, BLOCK_N):
            kk = k0 + cols
            m = rmask[:, None] & (kk < N)[None, :]
            v = _acc(tl.load(x + base + kk[None, :], mask=m, other=0.0), WIDE)
            if LOG:
                r = v - lse[:, None]
            else:
                r = tl.exp(v - mx[:, None]) * inv[:, None]
            tl.store(out + base + kk[None, :], r.to(out.dtype.element_ty), mask=m)


@triton.jit
def softmax_backward_rows(dx, y, g, M, N, LOG: tl.constexpr, WIDE: tl.constexpr,
                          ONE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # softmax: dx = y * (g - sum(y * g));  log_softmax: dx = g - exp(y) * sum(g)
    rows = _rows(BLOCK_M)
    rmask = rows < M
    base = rows[:, None] * N
    cols = tl.arange(0, BLOCK_N)
    if ONE:
        m = rmask[:, None] & (cols < N)[None, :]
        yv = _acc(tl.load(y + base + cols[None, :], mask=m, other=0.0), WIDE)
        gv = _acc(tl.load(g + base + cols[None, :], mask=m, other=0.0), WIDE)
        if LOG:
            r = gv - tl.exp(yv) * tl.sum(gv, axis=1)[:, None]
        else:
            r = yv * (gv - tl.sum(yv * gv, axis=1)[:, None])
        tl.store(dx + base + cols[None, :], r.to(dx.dtype.element_ty), mask=m)
    else:
        s = _acc(tl.zeros((BLOCK_M,), tl.float32), WIDE)
        for k0 in range(0, N, BLOCK_N):
            kk = k0 + cols
            m = rmask[:, None] & (kk < N)[None, :]
            gv = _acc(tl.load(g + base + kk[None, :], mask=m, other=0.0), WIDE)
            if LOG:
                s += tl.sum(gv, axis=1)
            else:
                yv = _acc(tl.load(y + base + kk[None, :], mask=m, other=0.0), WIDE)
                s += tl.sum(yv * gv, axis=1)
        for k0 in range(0, N, BLOCK_N):
            kk = k0 + cols
            m = rmask[:, None] & (kk < N)[None, :]
            yv = _acc(tl.load(y + base + kk[None, :], mask=m, other=0.0), WIDE)
            gv = _acc(tl.load(g + base + kk[None, :], mask=m, other=0.0), WIDE)
            if LOG:
                r = gv - tl.exp(yv) * s[:, None]
            else:
                r = yv * (gv - s[:, None])
            tl.store(dx + base + kk[None, :], r.to(dx.dtype.element_ty), mask=m)


# -- layer_norm / rms_norm ------------------------------------------------------------------


@triton.jit
def norm_rows(out, mean_out, rstd_out, x, w, b, M, N, eps, RMS: tl.constexpr,
              HAS_W: tl.constexpr, HAS_B: tl.constexpr, WIDE: tl.constexpr, ONE: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # layer_norm: (x - mean) * rstd * w + b, rstd = 1 / sqrt(var + eps) (biased variance);
    # rms_norm: x * rstd * w, rstd = 1 / sqrt(mean(x * x) + eps)
    rows = _rows(BLOCK_M)
    rmask = rows < M
    base = rows[:, None] * N
    cols = tl.arange(0, BLOCK_N)
    if ONE:
        cm = cols < N
        m = rmask[:, None] & cm[None, :]
        v = _acc(tl.load(x + base + cols[None, :], mask=m, other=0.0), WIDE)
        if RMS:
            mean = tl.sum(v, axis=1) * 0.0
            d = v
        else:
            mean = tl.sum(v, axis=1) / N
            d = tl.where(m, v - mean[:, None], 0.0)
        rstd = _rsqrt(tl.sum(d * d, axis=1) / N + eps)
        r = d * rstd[:, None]
        if HAS_W:
            r = r * _acc(tl.load(w + cols, mask=cm, other=0.0), WIDE)[None, :]
        if HAS_B:
            r = r + _acc(tl.load(b + cols, mask=cm, other=0.0), WIDE)[None, :]
        tl.store(out + base + cols[None, :], r.to(out.dtype.element_ty), mask=m)
    else:
        acc = _acc(tl.zeros((BLOCK_M,), tl.float32), WIDE)
        mean = acc
        if not RMS:
            for k0 in range(0, N, BLOCK_N):
                kk = k0 + cols
                m = rmask[:, None] & (kk < N)[None, :]
                acc += tl.sum(_acc(tl.load(x + base + kk[None, :], mask=m, other=0.0), WIDE),
                              axis=1)
            mean = acc / N
        ss = acc * 0.0
        for k0 in range(0, N, BLOCK_N):
            kk = k0 + cols
            m = rmask[:, None] & (kk < N)[None, :]
            v = _acc(tl.load(x + base + kk[None, :], mask=m, other=0.0), WIDE)
            d = tl.where(m, v - mean[:, None], 0.0)
            ss += tl.sum(d * d, axis=1)
        rstd = _rsqrt(ss / N + eps)
        for k0 in range(0, N, BLOCK_N):
            kk = k0 + cols
            cm = kk < N
            m = rmask[:, None] & cm[None, :]
            v = _acc(tl.load(x + base + kk[None, :], mask=m, other=0.0), WIDE)
            r = (v - mean[:, None]) * rstd[:, None]
            if HAS_W:
                r = r * _acc(tl.load(w + kk, mask=cm, other=0.0), WIDE)[None, :]
            if HAS_B:
                r = r + _acc(tl.load(b + kk, mask=cm, other=0.0), WIDE)[None, :]
            tl.store(out + base + kk[None, :], r.to(out.dtype.element_ty), mask=m)
    if not RMS:
        tl.store(mean_out + rows, mean.to(mean_out.dtype.element_ty), mask=rmask)
    tl.store(rstd_out + rows, rstd.to(rstd_out.dtype.element_ty), mask=rmask)


@triton.jit
def norm_backward_rows(dx, pdw, pdb, g, x, w, mean_in, rstd_in, M, N, ROWS, RMS: tl.constexpr,
                       HAS_W: tl.constexpr, PARTIAL: tl.constexpr, WIDE: tl.constexpr,
                       ONE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # with xhat = (x - mean) * rstd (rms: x * rstd) and h = g * w:
    #   layer_norm: dx = rstd * (h - mean(h) - xhat * mean(h * xhat))
    #   rms_norm:   dx = rstd * (h - xhat * mean(h * xhat))
    # program p takes rows [p * ROWS, (p + 1) * ROWS); with PARTIAL (rows that fit in one
    # block) it also sums g * xhat and g over them into row p of pdw / pdb
    p = tl.program_id(0).to(tl.int64)
    lo = p * ROWS
    hi = tl.minimum(lo + ROWS, M)
    cols = tl.arange(0, BLOCK_N)
    zero = _acc(tl.zeros((BLOCK_N,), tl.float32), WIDE)
    dw_acc = zero
    db_acc = zero
    for r0 in range(lo, hi, BLOCK_M):
        rows = r0 + tl.arange(0, BLOCK_M)
        rmask = rows < hi
        base = rows[:, None] * N
        rstd = _acc(tl.load(rstd_in + rows, mask=rmask, other=0.0), WIDE)
        if RMS:
            mean = rstd * 0.0
        else:
            mean = _acc(tl.load(mean_in + rows, mask=rmask, other=0.0), WIDE)
        if ONE:
            cm = cols < N
            m = rmask[:, None] & cm[None, :]
            xv = _acc(tl.load(x + base + cols[None, :], mask=m, other=0.0), WIDE)
            gv = _acc(tl.load(g + base + cols[None, :], mask=m, other=0.0), WIDE)
            xhat = (xv - mean[:, None]) * rstd[:, None]
            h = gv
            if HAS_W:
                h = h * _acc(tl.load(w + cols, mask=cm, other=0.0), WIDE)[None, :]
            c1 = tl.sum(h * xhat, axis=1) / N
            r = h - xhat * c1[:, None]
            if not RMS:
                r = r - (tl.sum(h, axis=1) / N)[:, None]
            tl.store(dx + base + cols[None, :], (r * rstd[:, None]).to(dx.dtype.element_ty),
                     mask=m)
            if PARTIAL:
                dw_acc += tl.sum(gv * xhat, axis=0)
                db_acc += tl.sum(gv, axis=0)
        else:
            c1 = rstd * 0.0
            c2 = rstd * 0.0
            for k0 in range(0, N, BLOCK_N):
                kk = k0 + cols
                cm = kk < N
                m = rmask[:, None] & cm[None, :]
                xv = _acc(tl.load(x + base + kk[None, :], mask=m, other=0.0), WIDE)
                gv = _acc(tl.load(g + base + kk[None, :], mask=m, other=0.0), WIDE)
                h = gv
                if HAS_W:
                    h = h * _acc(tl.load(w + kk, mask=cm, other=0.0), WIDE)[None, :]
                c1 += tl.sum(h * (xv - mean[:, None]) * rstd[:, None], axis=1)
                c2 += tl.sum(h, axis=1)
            c1 = c1 / N
            c2 = c2 / N
            if RMS:
                c2 = c2 * 0.0
            for k0 in range(0, N, BLOCK_N):
                kk = k0 + cols
                cm = kk < N
                m = rmask[:, None] & cm[None, :]
                xv = _acc(tl.load(x + base + kk[None, :], mask=m, other=0.0), WIDE)
                gv = _acc(tl.load(g + base + kk[None, :], mask=m, other=0.0), WIDE)
                h = gv
                if HAS_W:
                    h = h * _acc(tl.load(w + kk, mask=cm, other=0.0), WIDE)[None, :]
                xhat = (xv - mean[:, None]) * rstd[:, None]
                r = (h - c2[:, None] - xhat * c1[:, None]) * rstd[:, None]
                tl.store(dx + base + kk[None, :], r.to(dx.dtype.element_ty), mask=m)
    if PARTIAL:
        cm = cols < N
        tl.store(pdw + p * N + cols, dw_acc, mask=cm)
        tl.store(pdb + p * N + cols, db_acc, mask=cm)


@triton.jit
def norm_weight_grad_cols(pdw, pdb, g, x, mean_in, rstd_in, M, N, ROWS, RMS: tl.constexpr,
                          WIDE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # partial sums of g * xhat and g over rows [q * ROWS, (q + 1) * ROWS) for a block of
    # columns: rows too long to keep a block of them in registers
    cols = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    q = tl.program_id(1).to(tl.int64)
    cm = cols < N
    lo = q * ROWS
    hi = tl.minimum(lo + ROWS, M)
    dw_acc = _acc(tl.zeros((BLOCK_N,), tl.float32), WIDE)
    db_acc = dw_acc
    for r0 in range(lo, hi, BLOCK_M):
        rows = r0 + tl.arange(0, BLOCK_M)
        rmask = rows < hi
        m = rmask[:, None] & cm[None, :]
        rstd = _acc(tl.load(rstd_in + rows, mask=rmask, other=0.0), WIDE)
        if RMS:
            mean = rstd * 0.0
        else:
            mean = _acc(tl.load(mean_in + rows, mask=rmask, other=0.0), WIDE)
        xv = _acc(tl.load(x + rows[:, None] * N + cols[None, :], mask=m, other=0.0), WIDE)
        gv = _acc(tl.load(g + rows[:, None] * N + cols[None, :], mask=m, other=0.0), WIDE)
        dw_acc += tl.sum(gv * (xv - mean[:, None]) * rstd[:, None], axis=0)
        db_acc += tl.sum(gv, axis=0)
    tl.store(pdw + q * N + cols, dw_acc, mask=cm)
    tl.store(pdb + q * N + cols, db_acc, mask=cm)


@triton.jit
def sum_partials(out, part, P, N, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    # out[w, n] = sum over p of part[w, p, n], for w = program_id(1): the weight and the bias
    # gradient of a norm summed by one launch
    w = tl.program_id(1).to(tl.int64)
    part += w * P * N
    out += w * N
    cols = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    cm = cols < N
    acc = tl.zeros((BLOCK_N,), part.dtype.element_ty)
    for p0 in range(0, P, BLOCK_P):
        ps = p0 + tl.arange(0, BLOCK_P)
        m = (ps < P)[:, None] & cm[None, :]
        acc += tl.sum(tl.load(part + ps[:, None].to(tl.int64) * N + cols[None, :], mask=m,
                              other=0.0), axis=0)
    tl.store(out + cols, acc.to(out.dtype.element_ty), mask=cm)


# -- cross entropy --------------------------------------------------------------------------


@triton.jit
def cross_entropy_rows(loss, lse_out, z, t, M, C, ignore, smoothing_ptr, WIDE: tl.constexpr,
                       ONE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # loss[r] = valid * ((1 - s) * (lse - z[t]) + s * (lse - mean(z))): log-softmax and NLL
    # (with label smoothing s) of one row, without writing the log-probabilities.  s is read
    # from memory in the accumulation dtype: a float argument would be float32
    smoothing = tl.load(smoothing_ptr)
    rows = _rows(BLOCK_M)
    rmask = rows < M
    base = rows[:, None] * C
    cols = tl.arange(0, BLOCK_N)
    if ONE:
        m = rmask[:, None] & (cols < C)[None, :]
        v = tl.where(m, _acc(tl.load(z + base + cols[None, :], mask=m, other=0.0), WIDE), NEG_INF)
        mx = tl.max(v, axis=1)
        s = tl.sum(tl.where(m, tl.exp(v - mx[:, None]), 0.0), axis=1)
        total = tl.sum(tl.where(m, v, 0.0), axis=1)
    else:
        mx = _acc(tl.zeros((BLOCK_M,), tl.float32), WIDE) + NEG_INF
        s = _acc(tl.zeros((BLOCK_M,), tl.float32), WIDE)
        total = s
        for k0 in range(0, C, BLOCK_N):
            kk = k0 + cols
            m = rmask[:, None] & (kk < C)[None, :]
            v = tl.where(m, _acc(tl.load(z + base + kk[None, :], mask=m, other=0.0), WIDE),
                         NEG_INF)
            new = tl.maximum(mx, tl.max(v, axis=1))
            shift = tl.where(new == NEG_INF, 0.0, new)
            s = s * tl.exp(mx - shift) + tl.sum(tl.where(m, tl.exp(v - shift[:, None]), 0.0),
                                                axis=1)
            total += tl.sum(tl.where(m, v, 0.0), axis=1)
            mx = new
        mx = tl.where(mx == NEG_INF, float("nan"), mx)
    lse = mx + tl.log(s)
    tgt = tl.load(t + rows, mask=rmask, other=0)
    valid = rmask & (tgt != ignore)
    # a target outside [0, C) reads nothing (core records the error for the next sync)
    inside = valid & (tgt >= 0) & (tgt < C)
    zt = _acc(tl.load(z + rows * C + tl.where(inside, tgt, 0), mask=inside, other=0.0), WIDE)
    r = (1.0 - smoothing) * (lse - zt) + smoothing * (lse - total / C)
    r = tl.where(valid, r, 0.0)
    tl.store(loss + rows, r.to(loss.dtype.element_ty), mask=rmask)
    tl.store(lse_out + rows, lse.to(lse_out.dtype.element_ty), mask=rmask)


@triton.jit
def cross_entropy_reduce(out, count, loss, t, M, ignore, MEAN: tl.constexpr,
                         BLOCK: tl.constexpr):
    # one program: the sum of the row losses (divided by the number of valid rows for MEAN)
    acc = tl.zeros((BLOCK,), loss.dtype.element_ty)
    n = tl.zeros((BLOCK,), loss.dtype.element_ty)
    for r0 in range(0, M, BLOCK):
        rows = r0 + tl.arange(0, BLOCK)
        rm = rows < M
        acc += tl.load(loss + rows, mask=rm, other=0.0)
        n += tl.where(rm & (tl.load(t + rows, mask=rm, other=0) != ignore), 1.0, 0.0)
    total = tl.sum(acc, axis=0)
    valid = tl.sum(n, axis=0)
    if MEAN:
        total = total / valid
    tl.store(out, total.to(out.dtype.element_ty))
    tl.store(count, valid.to(count.dtype.element_ty))


@triton.jit
def cross_entropy_backward_rows(dz, z, t, lse_in, g, count, M, C, ignore, smoothing_ptr,
                                REDUCTION: tl.constexpr, WIDE: tl.constexpr,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    smoothing = tl.load(smoothing_ptr)
    # dz = (softmax(z) - (1 - s) onehot(t) - s / C) * scale, scale = g / count (mean), g
    # (sum) or g[r] (none); zero where t == ignore.  REDUCTION: 0 mean, 1 sum, 2 none
    rows = _rows(BLOCK_M)
    rmask = rows < M
    base = rows[:, None] * C
    cols = tl.arange(0, BLOCK_N)
    lse = _acc(tl.load(lse_in + rows, mask=rmask, other=0.0), WIDE)
    tgt = tl.load(t + rows, mask=rmask, other=0)
    if REDUCTION == 2:
        scale = _acc(tl.load(g + rows, mask=rmask, other=0.0), WIDE)
    else:
        scale = _acc(tl.load(g + rows * 0), WIDE)
        if REDUCTION == 0:
            scale = scale / _acc(tl.load(count + rows * 0), WIDE)
    scale = tl.where(tgt != ignore, scale, 0.0)
    for k0 in range(0, C, BLOCK_N):
        kk = k0 + cols
        m = rmask[:, None] & (kk < C)[None, :]
        v = _acc(tl.load(z + base + kk[None, :], mask=m, other=0.0), WIDE)
        d = tl.exp(v - lse[:, None]) - smoothing / C
        d = d - tl.where(kk[None, :] == tgt[:, None], 1.0 - smoothing, 0.0)
        tl.store(dz + base + kk[None, :], (d * scale[:, None]).to(dz.dtype.element_ty), mask=m)
