"""The user's Triton kernels.  Imported only after the device exists: on ``triton-interpret``
the device must switch Triton to its interpreter before any ``@triton.jit`` runs."""

import triton
import triton.language as tl


@triton.jit
def swish_fwd(y, x, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x + offs, mask=m).to(tl.float32)
    tl.store(y + offs, (v / (1.0 + tl.exp(-v))).to(y.dtype.element_ty), mask=m)


@triton.jit
def swish_bwd(dx, x, g, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x + offs, mask=m).to(tl.float32)
    gv = tl.load(g + offs, mask=m).to(tl.float32)
    s = 1.0 / (1.0 + tl.exp(-v))
    tl.store(dx + offs, (gv * s * (1.0 + v * (1.0 - s))).to(dx.dtype.element_ty), mask=m)
