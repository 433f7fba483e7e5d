"""Convolution gathers (im2col) and pooling windows over NCHW inputs of any strides."""

import triton
import triton.language as tl


@triton.jit
def offsets(BLOCK: tl.constexpr, WIDE: tl.constexpr):
    """This program's BLOCK flat indices: 32-bit unless WIDE (an operand of 2**31 elements or
    more), since 64-bit division, which the index arithmetic is made of, costs several times
    more."""
    pid = tl.program_id(0)
    if WIDE:
        pid = pid.to(tl.int64)
    return pid * BLOCK + tl.arange(0, BLOCK)


@triton.jit
def im2col(cols, x, total, N, C, H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw,
           sxn, sxc, sxh, sxw, BATCH_INNER: tl.constexpr, WIDE: tl.constexpr,
           BLOCK: tl.constexpr):
    # cols[n, (c, i, j), (oh, ow)] = x[n, c, oh*sh - ph + i*dh, ow*sw - pw + j*dw];
    # BATCH_INNER: laid out as cols[(c, i, j), n, (oh, ow)] (a weight gradient's operand)
    offs = offsets(BLOCK, WIDE)
    mask = offs < total
    ow = offs % OW
    rem = offs // OW
    oh = rem % OH
    rem = rem // OH
    j = rem % KW
    rem = rem // KW
    i = rem % KH
    rem = rem // KH
    c = rem % C
    n = rem // C
    ih = oh * sh - ph + i * dh
    iw = ow * sw - pw + j * dw
    ok = mask & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
    v = tl.load(x + n * sxn + c * sxc + ih * sxh + iw * sxw, mask=ok, other=0)
    if BATCH_INNER:
        at = (((c * KH + i) * KW + j) * N + n) * (OH * OW) + oh * OW + ow
    else:
        at = offs
    tl.store(cols + at, v, mask=mask)


@triton.jit
def max_pool(out, idx, x, total, C, H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw,
             sxn, sxc, sxh, sxw, WIDE: tl.constexpr, BLOCK: tl.constexpr):
    offs = offsets(BLOCK, WIDE)
    mask = offs < total
    ow = offs % OW
    rem = offs // OW
    oh = rem % OH
    rem = rem // OH
    c = rem % C
    n = rem // C
    base = x + n * sxn + c * sxc
    best = tl.load(base, mask=mask, other=0)
    bidx = tl.zeros((BLOCK,), tl.int64) - 1
    for i in range(KH):
        for j in range(KW):
            ih = oh * sh - ph + i * dh
            iw = ow * sw - pw + j * dw
            ok = mask & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            v = tl.load(base + ih * sxh + iw * sxw, mask=ok, other=0)
            take = ok & ((bidx < 0) | (v > best) | ((v != v) & (best == best)))
            best = tl.where(take, v, best)
            bidx = tl.where(take, ih * W + iw, bidx)
    tl.store(out + offs, best, mask=mask)
    tl.store(idx + offs, bidx, mask=mask)


@triton.jit
def max_pool_backward(dx, g, idx, total, C, H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw,
                      sgn, sgc, sgh, sgw, ACC: tl.constexpr, WIDE: tl.constexpr,
                      BLOCK: tl.constexpr):
    # one program per BLOCK input positions: every window that can hold a position is visited
    # and its gradient taken where the window's recorded argmax is that position (a gather:
    # no zero-filled buffer, no atomics, the same sum in the same order every run)
    offs = offsets(BLOCK, WIDE)
    mask = offs < total
    iw = offs % W
    rem = offs // W
    ih = rem % H
    rem = rem // H
    c = rem % C
    n = rem // C
    here = ih * W + iw
    acc = tl.zeros((BLOCK,), ACC)
    for i in range(KH):
        for j in range(KW):
            th = ih + ph - i * dh  # oh * sh when the window at oh covers ih with offset i
            tw = iw + pw - j * dw
            oh = th // sh
            ow = tw // sw
            ok = mask & (th >= 0) & (tw >= 0) & (oh * sh == th) & (ow * sw == tw) \
                & (oh < OH) & (ow < OW)
            at = n * sgn + c * sgc + oh * sgh + ow * sgw
            hit = ok & (tl.load(idx + at, mask=ok, other=-1) == here)
            acc += tl.load(g + at, mask=hit, other=0).to(ACC)
    tl.store(dx + offs, acc.to(dx.dtype.element_ty), mask=mask)


@triton.jit
def avg_pool(out, x, total, C, H, W, OH, OW, KH, KW, sh, sw, ph, pw,
             sxn, sxc, sxh, sxw, INCLUDE_PAD: tl.constexpr, ACC: tl.constexpr,
             WIDE: tl.constexpr, BLOCK: tl.constexpr):
    offs = offsets(BLOCK, WIDE)
    mask = offs < total
    ow = offs % OW
    rem = offs // OW
    oh = rem % OH
    rem = rem // OH
    c = rem % C
    n = rem // C
    base = x + n * sxn + c * sxc
    acc = tl.zeros((BLOCK,), ACC)
    for i in range(KH):
        for j in range(KW):
            ih = oh * sh - ph + i
            iw = ow * sw - pw + j
            ok = mask & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            acc += tl.load(base + ih * sxh + iw * sxw, mask=ok, other=0).to(ACC)
    hs = oh * sh - ph
    ws = ow * sw - pw
    he = tl.minimum(hs + KH, H + ph)
    we = tl.minimum(ws + KW, W + pw)
    if INCLUDE_PAD:
        cnt = (he - hs) * (we - ws)
    else:
        cnt = (tl.minimum(he, H) - tl.maximum(hs, 0)) * (tl.minimum(we, W) - tl.maximum(ws, 0))
    tl.store(out + offs, (acc / cnt.to(ACC)).to(out.dtype.element_ty), mask=mask)


@triton.jit
def adaptive_avg_pool(out, x, total, C, H, W, OH, OW, MAXH, MAXW, sxn, sxc, sxh, sxw,
                      ACC: tl.constexpr, WIDE: tl.constexpr, BLOCK: tl.constexpr):
    offs = offsets(BLOCK, WIDE)
    mask = offs < total
    ow = offs % OW
    rem = offs // OW
    oh = rem % OH
    rem = rem // OH
    c = rem % C
    n = rem // C
    base = x + n * sxn + c * sxc
    h0 = (oh * H) // OH
    h1 = ((oh + 1) * H + OH - 1) // OH
    w0 = (ow * W) // OW
    w1 = ((ow + 1) * W + OW - 1) // OW
    acc = tl.zeros((BLOCK,), ACC)
    for i in range(MAXH):
        for j in range(MAXW):
            ih = h0 + i
            iw = w0 + j
            ok = mask & (ih < h1) & (iw < w1)
            acc += tl.load(base + ih * sxh + iw * sxw, mask=ok, other=0).to(ACC)
    cnt = ((h1 - h0) * (w1 - w0)).to(ACC)
    tl.store(out + offs, (acc / cnt).to(out.dtype.element_ty), mask=mask)
