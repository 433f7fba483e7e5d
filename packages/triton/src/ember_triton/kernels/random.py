"""Counter-based random numbers: Philox 4x32 keyed by the op's seed.

The counter of element ``i`` of the op drawn at generator offset ``k`` is
``(lo(i), hi(i), lo(k), hi(k))``, so every op and element has its own block of four words.
"""

import triton
import triton.language as tl


@triton.jit
def _words(seed, offset, BLOCK: tl.constexpr):
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    c0 = (idx & 0xFFFFFFFF).to(tl.uint32)
    c1 = (idx >> 32).to(tl.uint32)
    k = tl.zeros_like(idx) + offset
    c2 = (k & 0xFFFFFFFF).to(tl.uint32)
    c3 = (k >> 32).to(tl.uint32)
    r0, r1, r2, r3 = tl.philox(seed, c0, c1, c2, c3)
    return idx, r0, r1, r2, r3


@triton.jit
def _unit53(a, b):
    # 53 random bits from two words: a uniform float64 in [0, 1)
    hi = (a >> 5).to(tl.float64)
    lo = (b >> 6).to(tl.float64)
    return (hi * 67108864.0 + lo) * (1.0 / 9007199254740992.0)


@triton.jit
def _unit24(a):
    return (a >> 8).to(tl.float32) * (1.0 / 16777216.0)


@triton.jit
def uniform(out, n, seed, offset, BITS: tl.constexpr, BLOCK: tl.constexpr):
    idx, r0, r1, _r2, _r3 = _words(seed, offset, BLOCK)
    mask = idx < n
    if BITS == 53:
        v = _unit53(r0, r1)
        tl.store(out + idx, v, mask=mask)
    elif BITS == 24:
        tl.store(out + idx, _unit24(r0), mask=mask)
    else:
        # a grid as fine as the half type's mantissa: exact, and below 1 after the cast
        v = (r0 >> (32 - BITS)).to(tl.float32) * (1.0 / (1 << BITS))
        tl.store(out + idx, v.to(out.dtype.element_ty), mask=mask)


@triton.jit
def normal(out, n, seed, offset, WIDE: tl.constexpr, BLOCK: tl.constexpr):
    idx, r0, r1, r2, r3 = _words(seed, offset, BLOCK)
    mask = idx < n
    if WIDE:
        u1 = 1.0 - _unit53(r0, r1)
        u2 = _unit53(r2, r3)
        z = tl.sqrt(-2.0 * tl.log(u1)) * tl.cos(6.283185307179586 * u2)
        tl.store(out + idx, z, mask=mask)
    else:
        u1 = 1.0 - _unit24(r0)
        u2 = _unit24(r1)
        z = tl.sqrt(-2.0 * tl.log(u1)) * tl.cos(6.283185307179586 * u2)
        tl.store(out + idx, z.to(out.dtype.element_ty), mask=mask)


@triton.jit
def integers(out, n, seed, offset, low, span, BLOCK: tl.constexpr):
    idx, r0, r1, _r2, _r3 = _words(seed, offset, BLOCK)
    mask = idx < n
    word = (r0.to(tl.uint64) << 32) | r1.to(tl.uint64)
    v = (word % span.to(tl.uint64)).to(tl.int64) + low
    tl.store(out + idx, v.to(out.dtype.element_ty), mask=mask)
