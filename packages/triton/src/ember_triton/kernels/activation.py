"""GELU and its gradient, one pass each over contiguous data (`ember_triton.activation`).

Half types compute in float32, float64 in float64 (``WIDE``); offsets are int64.  The exact
form uses ``tl.erf`` (libdevice's ``erf`` compiled, numpy's under the interpreter).  The tanh
form uses ``(1 + tanh(z)) / 2 = sigmoid(2 z)``, evaluated from ``a = exp(-2 |z|)`` in (0, 1]:
no overflow, and no cancellation in ``1 + tanh(z)`` where ``z`` is very negative.
"""

import triton
import triton.language as tl

#: sqrt(2 / pi), 0.044715, 1 / sqrt(2), 1 / sqrt(2 pi)
K_TANH = tl.constexpr(0.7978845608028654)
C_TANH = tl.constexpr(0.044715)
SQRT1_2 = tl.constexpr(0.7071067811865476)
INV_SQRT_2PI = tl.constexpr(0.3989422804014327)


@triton.jit
def _k(x, v: tl.constexpr):
    # a constant in x's dtype: a bare Python float would be rounded to float32 first
    return tl.full(x.shape, v, x.dtype)


@triton.jit
def _acc(v, WIDE: tl.constexpr):
    if WIDE:
        r = v.to(tl.float64)
    else:
        r = v.to(tl.float32)
    return r


@triton.jit
def _block(n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    return offs, offs < n


@triton.jit
def _sigmoid_2z(v):
    # (sigmoid(2 z), sigmoid(2 z) * sigmoid(-2 z)) for z = sqrt(2 / pi) (v + 0.044715 v^3)
    z = _k(v, K_TANH) * (v + _k(v, C_TANH) * v * v * v)
    a = tl.exp(-2.0 * tl.abs(z))
    inv = 1.0 / (1.0 + a)
    s = tl.where(z >= 0, inv, a * inv)
    return s, a * inv * inv


@triton.jit
def gelu(out, x, n, TANH: tl.constexpr, WIDE: tl.constexpr, BLOCK: tl.constexpr):
    offs, mask = _block(n, BLOCK)
    v = _acc(tl.load(x + offs, mask=mask, other=0.0), WIDE)
    if TANH:
        s, _ = _sigmoid_2z(v)
        r = v * s
    else:
        r = 0.5 * v * (1.0 + tl.erf(v * _k(v, SQRT1_2)))
    tl.store(out + offs, r.to(out.dtype.element_ty), mask=mask)


@triton.jit
def gelu_backward(dx, g, x, n, TANH: tl.constexpr, WIDE: tl.constexpr, BLOCK: tl.constexpr):
    # recomputes from x: reading the forward's output instead would be a third load, and the
    # kernel is bound by memory traffic, not arithmetic
    offs, mask = _block(n, BLOCK)
    v = _acc(tl.load(x + offs, mask=mask, other=0.0), WIDE)
    gv = _acc(tl.load(g + offs, mask=mask, other=0.0), WIDE)
    if TANH:
        # (1 + t) / 2 + v (1 - t^2) k (1 + 3 c v^2) / 2, with 1 - t^2 = 4 s (1 - s)
        s, p = _sigmoid_2z(v)
        d = s + 2.0 * _k(v, K_TANH) * v * p * (1.0 + 3.0 * _k(v, C_TANH) * v * v)
    else:
        # Phi(v) + v phi(v)
        phi = _k(v, INV_SQRT_2PI) * tl.exp(-0.5 * v * v)
        d = 0.5 * (1.0 + tl.erf(v * _k(v, SQRT1_2))) + v * phi
    tl.store(dx + offs, (gv * d).to(dx.dtype.element_ty), mask=mask)
