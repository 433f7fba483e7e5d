"""Optimizer updates: every step of Adam / AdamW for one parameter in one pass over memory."""

import triton
import triton.language as tl


@triton.jit
def _adam_block(p_out, m_out, v_out, p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, decay,
                step_size, bc2_sqrt, HAS_WD: tl.constexpr, DECOUPLED: tl.constexpr,
                MAXIMIZE: tl.constexpr, BLOCK: tl.constexpr):
    # the order of ember.optim.Adam (PyTorch's single-tensor Adam): weight decay, the lerp of
    # exp_avg, exp_avg_sq, then p -= step_size * exp_avg / (sqrt(exp_avg_sq) / bc2_sqrt + eps);
    # ``decay`` is 1 - lr * weight_decay
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
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
def _one_minus_exp(x):
    # 1 - exp(x) for x <= 0 without cancellation (Kahan's expm1: (u - 1) * x / log(u))
    u = tl.exp(x)
    um1 = u - 1.0
    return -tl.where(um1 == 0.0, x, tl.where(um1 == -1.0, -1.0, um1 * x / tl.log(u)))


@triton.jit
def adam_step_capturable(p_out, m_out, v_out, p, g, m, v, step, n, lr, beta1, beta2, eps,
                         weight_decay, decay, log_b1, log_b2, HAS_WD: tl.constexpr,
                         DECOUPLED: tl.constexpr, MAXIMIZE: tl.constexpr, BLOCK: tl.constexpr):
    # `adam_step` with the step count t read from memory: step_size = lr / (1 - beta1**t) and
    # bc2_sqrt = sqrt(1 - beta2**t) from t * log(beta), so a replayed graph sees t move
    t = tl.load(step).to(tl.float32)
    step_size = lr / _one_minus_exp(t * log_b1)
    bc2_sqrt = tl.sqrt_rn(_one_minus_exp(t * log_b2))
    _adam_block(p_out, m_out, v_out, p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, decay,
                step_size, bc2_sqrt, HAS_WD, DECOUPLED, MAXIMIZE, BLOCK)


@triton.jit
def adam_step(p_out, m_out, v_out, p, g, m, v, n, lr, beta1, beta2, eps, weight_decay,
              decay, step_size, bc2_sqrt, HAS_WD: tl.constexpr, DECOUPLED: tl.constexpr,
              MAXIMIZE: tl.constexpr, BLOCK: tl.constexpr):
    _adam_block(p_out, m_out, v_out, p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, decay,
                step_size, bc2_sqrt, HAS_WD, DECOUPLED, MAXIMIZE, BLOCK)
