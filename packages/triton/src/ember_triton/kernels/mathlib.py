"""Device functions the generated elementwise kernels call.

Only ``triton.language`` primitives are used (no libdevice), so the same code runs compiled
for NVIDIA and AMD and under the interpreter.  Inputs are float32 or float64 (half types are
widened by the caller).
"""

import triton
import triton.language as tl


@triton.jit
def k_(x, v: tl.constexpr):
    # a constant in x's dtype: a bare Python float would be rounded to float32 first
    return tl.full(x.shape, v, x.dtype)


@triton.jit
def isnan_(x):
    return x != x


@triton.jit
def isinf_(x):
    return tl.abs(x) == float("inf")


@triton.jit
def expm1_(x):
    # Kahan: (u - 1) * x / log(u) cancels the rounding of u = exp(x)
    u = tl.exp(x)
    um1 = u - 1.0
    r = tl.where(um1 == 0.0, x, um1 * x / tl.log(u))
    r = tl.where(um1 == -1.0, -1.0, r)
    return tl.where(u == float("inf"), u, r)


@triton.jit
def log1p_(x):
    u = 1.0 + x
    d = u - 1.0
    r = tl.where(d == 0.0, x, tl.log(u) * x / d)
    return tl.where(u == float("inf"), u, r)


@triton.jit
def sinh_(x):
    ax = tl.abs(x)
    em = expm1_(ax)
    small = 0.5 * (em + em / (em + 1.0))
    big = tl.exp(ax - k_(ax, 0.6931471805599453))
    r = tl.where(ax < 20.0, small, big)
    return tl.where(x < 0, -r, r)


@triton.jit
def cosh_(x):
    h = tl.exp(tl.abs(x) - k_(x, 0.6931471805599453))
    return h + 0.25 / h


@triton.jit
def tanh_(x):
    em = expm1_(-2.0 * tl.abs(x))
    r = -em / (em + 2.0)
    return tl.where(x < 0, -r, r)


@triton.jit
def atan_(x):
    # Cephes atan: reduce to |t| <= 0.66, then a rational fit
    ax = tl.abs(x)
    big = ax > 2.414213562373095
    mid = (ax > 0.66) & (~big)
    t = tl.where(big, -1.0 / tl.where(big, ax, 1.0), tl.where(mid, (ax - 1.0) / (ax + 1.0), ax))
    pio2 = k_(x, 1.5707963267948966)
    y0 = tl.where(big, pio2, tl.where(mid, k_(x, 0.7853981633974483), 0.0))
    z = t * t
    p = (((k_(z, -8.750608600031904122785e-1) * z - k_(z, 1.615753718733365076637e1)) * z
          - k_(z, 7.500855792314704667340e1)) * z - k_(z, 1.228866684490136173410e2)) * z \
        - k_(z, 6.485021904942025371773e1)
    q = ((((z + k_(z, 2.485846490142306297962e1)) * z + k_(z, 1.650270098316988542046e2)) * z
          + k_(z, 4.328810604912902668951e2)) * z + k_(z, 4.853903996359136964868e2)) * z \
        + k_(z, 1.945506571482613964425e2)
    r = t * (z * p / q) + t
    r = r + tl.where(big, k_(x, 6.123233995736765886130e-17),
                     tl.where(mid, k_(x, 3.061616997868382943065e-17), 0.0))
    r = y0 + r
    r = tl.where(ax == float("inf"), pio2, r)
    return tl.where(x < 0, -r, tl.where(x == 0, x, r))


@triton.jit
def atan2_(y, x):
    PI = k_(x, 3.141592653589793)
    PIO2 = k_(x, 1.5707963267948966)
    PIO4 = k_(x, 0.7853981633974483)
    safe = tl.where(x == 0, 1.0, x)
    base = atan_(y / safe)
    neg_zero_x = (x == 0) & ((1.0 / tl.where(x == 0, x, 1.0)) < 0)
    xneg = (x < 0) | neg_zero_x
    ysign = tl.where((y < 0) | ((y == 0) & ((1.0 / tl.where(y == 0, y, 1.0)) < 0)), -1.0, 1.0)
    r = tl.where(x == 0, tl.where(y == 0, 0.0, ysign * PIO2), base)
    r = tl.where(xneg & (x != 0), base + ysign * PI, r)
    r = tl.where(neg_zero_x & (y == 0), ysign * PI, r)
    r = tl.where(xneg & (x != 0) & (y == 0), ysign * PI, r)
    r = tl.where((y == 0) & (~xneg), y, r)
    # both infinite
    yi = isinf_(y)
    xi = isinf_(x)
    r = tl.where(yi & xi, ysign * tl.where(x > 0, PIO4, 3.0 * PIO4), r)
    r = tl.where(yi & (~xi), ysign * PIO2, r)
    r = tl.where(xi & (~yi), tl.where(x > 0, 0.0 * ysign, ysign * PI), r)
    return tl.where(isnan_(x) | isnan_(y), x + y, r)


@triton.jit
def asin_(x):
    return atan2_(x, tl.sqrt((1.0 - x) * (1.0 + x)))


@triton.jit
def acos_(x):
    return atan2_(tl.sqrt((1.0 - x) * (1.0 + x)), x)


@triton.jit
def round_(x):
    # half to even
    f = tl.floor(x)
    d = x - f
    even = (f - 2.0 * tl.floor(f * 0.5)) == 0.0
    r = tl.where(d > 0.5, f + 1.0, tl.where(d < 0.5, f, tl.where(even, f, f + 1.0)))
    return tl.where(isinf_(x), x, r)


@triton.jit
def trunc_(x):
    return tl.where(x < 0, tl.ceil(x), tl.floor(x))


@triton.jit
def sign_(x):
    return tl.where(x > 0, 1, tl.where(x < 0, -1, 0)).to(x.dtype)


@triton.jit
def fsign_(x):
    return tl.where(x > 0, 1.0, tl.where(x < 0, -1.0, x))


@triton.jit
def fmax_(a, b):
    return tl.where(isnan_(a) | isnan_(b), a + b, tl.where(a > b, a, b))


@triton.jit
def fmin_(a, b):
    return tl.where(isnan_(a) | isnan_(b), a + b, tl.where(a < b, a, b))


@triton.jit
def fpow_(a, b):
    # a ** b in float64 with C's special cases
    ab = tl.abs(a)
    r = tl.exp(b * tl.log(ab))
    fb = tl.floor(b)
    bint = fb == b
    odd = bint & (tl.abs(b - 2.0 * tl.floor(b * 0.5)) == 1.0)
    r = tl.where((a < 0) & odd, -r, r)
    r = tl.where((a < 0) & (~bint) & (~isinf_(b)) & (~isinf_(a)), float("nan"), r)
    r = tl.where((ab == 1.0) & isinf_(b), 1.0, r)
    r = tl.where(b == 0.0, 1.0, r)
    return tl.where(a == 1.0, 1.0, r)


@triton.jit
def ipow_(a, b, NBITS: tl.constexpr):
    r = a * 0 + 1
    base = a
    e = tl.where(b < 0, 0, b)
    for _ in tl.static_range(NBITS):
        r = tl.where((e & 1) != 0, r * base, r)
        base = base * base
        e = e >> 1
    one = a * 0 + 1
    inv = tl.where(a == 1, one, tl.where(a == -1, tl.where((b & 1) != 0, -one, one), one - one))
    return tl.where(b < 0, inv, r)


@triton.jit
def upow_(a, b, NBITS: tl.constexpr):
    r = a * 0 + 1
    base = a
    e = b
    for _ in tl.static_range(NBITS):
        r = tl.where((e & 1) != 0, r * base, r)
        base = base * base
        e = e >> 1
    return r


@triton.jit
def ifloordiv_(a, b):
    safe = tl.where(b == 0, 1, b)
    q = a // safe
    r = a % safe
    q = tl.where((r != 0) & ((r < 0) != (safe < 0)), q - 1, q)
    return tl.where(b == 0, b, q)


@triton.jit
def iremainder_(a, b):
    safe = tl.where(b == 0, 1, b)
    r = a % safe
    r = tl.where((r != 0) & ((r < 0) != (safe < 0)), r + safe, r)
    return tl.where(b == 0, b, r)


@triton.jit
def uremainder_(a, b):
    safe = tl.where(b == 0, 1, b)
    return tl.where(b == 0, b, a % safe)


@triton.jit
def ufloordiv_(a, b):
    safe = tl.where(b == 0, 1, b)
    return tl.where(b == 0, b, a // safe)


@triton.jit
def fremainder_(a, b):
    r = a % b
    r = tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
    # numpy: the result takes the divisor's sign, also for zero
    return tl.where(r == 0, 0.0 * b, r)


@triton.jit
def ffloordiv_(a, b):
    # numpy's floor_divide: based on fmod so that a == b * q + r holds exactly
    m = a % b
    d = (a - m) / b
    d = tl.where((m != 0) & ((b < 0) != (m < 0)), d - 1.0, d)
    q = tl.floor(d)
    q = tl.where(d - q > 0.5, q + 1.0, q)
    q = tl.where(d == 0, 0.0 * (a / b), q)
    return tl.where(b == 0, a / b, q)


@triton.jit
def div_(a, b):
    # correctly rounded in float32 (plain `/` is approximate there); float64 `/` already is
    if a.dtype == tl.float32:
        r = tl.div_rn(a, b)
    else:
        r = a / b
    return r


@triton.jit
def sqrt_(x):
    if x.dtype == tl.float32:
        r = tl.sqrt_rn(x)
    else:
        r = tl.sqrt(x)
    return r


# -- optimizer updates (the generated kernels of ``ember_triton/optim.py``) ---------------------


@triton.jit
def adam_block_(p_out, m_out, v_out, p, g, m, v, n, block, lr, beta1, beta2, eps,
                weight_decay, decay, step_size, bc2_sqrt, HAS_WD: tl.constexpr,
                DECOUPLED: tl.constexpr, MAXIMIZE: tl.constexpr, BLOCK: tl.constexpr):
    # block ``block`` of one parameter's Adam update, in the order of ember.optim.Adam
    # (PyTorch's single-tensor Adam): weight decay, the lerp of exp_avg, exp_avg_sq, then
    # p -= step_size * exp_avg / (sqrt(exp_avg_sq) / bc2_sqrt + eps); ``decay`` is
    # 1 - lr * weight_decay
    offs = block.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    pv = tl.load(p + offs, mask=mask, other=0.0).to(tl.float32)
    gv = tl.load(g + offs, mask=mask, other=0.0).to(tl.float32)
    mv = tl.load(m + offs, mask=mask, other=0.0).to(tl.float32)
    vv = tl.load(v + offs, mask=mask, other=0.0).to(tl.float32)
    if MAXIMIZE:
        gv = -gv
    if HAS_WD:
        if DECOUPLED:
            pv = pv * decay
        else:
            gv = gv + pv * weight_decay
    mv = mv + (gv - mv) * (1.0 - beta1)
    vv = vv * beta2 + gv * gv * (1.0 - beta2)
    denom = tl.sqrt_rn(vv) / bc2_sqrt + eps
    pv = pv - (mv / denom) * step_size
    tl.store(p_out + offs, pv.to(p_out.dtype.element_ty), mask=mask)
    tl.store(m_out + offs, mv.to(m_out.dtype.element_ty), mask=mask)
    tl.store(v_out + offs, vv.to(v_out.dtype.element_ty), mask=mask)


@triton.jit
def one_minus_exp_(x):
    # 1 - exp(x) for x <= 0 without cancellation (Kahan's expm1: (u - 1) * x / log(u))
    u = tl.exp(x)
    um1 = u - 1.0
    return -tl.where(um1 == 0.0, x, tl.where(um1 == -1.0, -1.0, um1 * x / tl.log(u)))
