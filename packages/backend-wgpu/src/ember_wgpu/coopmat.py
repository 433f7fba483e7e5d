"""float16 matmul on cooperative matrices (tensor cores) where the adapter offers them.

wgpu's experimental ``wgpu_cooperative_matrix`` WGSL extension (Vulkan's
``VK_KHR_cooperative_matrix``) multiplies 16x16 tiles held across a subgroup.  The kernel
here gives each work-group of 32 invocations (one subgroup on NVIDIA) a 32x32 block of the
output: per step of 16 along K it loads two tiles of each operand straight from the storage
buffers and makes four multiply-adds into float32 accumulators, which it stores into a
float32 work array that a cast then rounds into the float16 result.

The extension's loads and stores read column-major tiles; ember's matrices are row-major,
and a row-major ``[R, C]`` matrix read column-major is its transpose.  So the kernel
computes ``C^T = B^T A^T``: ``B^T`` tiles are the "A" operand, ``A^T`` tiles the "B" one,
and storing ``C^T`` column-major writes ``C`` row-major.

The path is taken only for float16 operands whose sizes are multiples of the block (M, N of
32, K of 16), dense in their last two axes, and only after a self-check on the adapter
passed: a 32x64x32 product against numpy, run once per device, whose outcome (or the
shader compiler's refusal, since the extension is experimental and its spelling has
changed between wgpu releases) is `Runtime.coop_status`.  Everything else takes the tiled
kernels of `ember_wgpu.linalg`.
"""

from __future__ import annotations

import numpy as np

from .runtime import Runtime, WGArray

__all__ = ["SOURCE", "eligible", "matmul", "usable"]

#: the output block of one work-group, and the tile and K step of the extension
BLOCK = 32
TILE = 16

SOURCE = """enable f16;
enable wgpu_cooperative_matrix;
alias TA = coop_mat16x16<f16, A>;
alias TB = coop_mat16x16<f16, B>;
alias TC = coop_mat16x16<f32, C>;
@group(0) @binding(0) var<storage, read> b0: array<f16>;
@group(0) @binding(1) var<storage, read> b1: array<f16>;
@group(0) @binding(2) var<storage, read_write> b2: array<f32>;
@group(0) @binding(3) var<storage, read> P: array<i32>;

@compute @workgroup_size(32)
fn main(@builtin(workgroup_id) wg: vec3<u32>) {
    let M = u32(P[0]); let N = u32(P[1]); let K = u32(P[2]);
    let n0 = wg.x * 32u; let m0 = wg.y * 32u; let z = wg.z;
    let ao = u32(P[3]) + z * u32(P[5]);
    let bo = u32(P[4]) + z * u32(P[6]);
    let co = z * M * N;
    // the accumulators start from the zeroed work array (C^T tiles: n rows, m columns)
    var c00: TC = coopLoad<f32, C>(&b2[co + m0 * N + n0], N);
    var c01: TC = coopLoad<f32, C>(&b2[co + (m0 + 16u) * N + n0], N);
    var c10: TC = coopLoad<f32, C>(&b2[co + m0 * N + n0 + 16u], N);
    var c11: TC = coopLoad<f32, C>(&b2[co + (m0 + 16u) * N + n0 + 16u], N);
    for (var k0 = 0u; k0 < K; k0 = k0 + 16u) {
        let t0: TA = coopLoad<f16, A>(&b1[bo + k0 * N + n0], N);
        let t1: TA = coopLoad<f16, A>(&b1[bo + k0 * N + n0 + 16u], N);
        let u0: TB = coopLoad<f16, B>(&b0[ao + m0 * K + k0], K);
        let u1: TB = coopLoad<f16, B>(&b0[ao + (m0 + 16u) * K + k0], K);
        c00 = coopMultiplyAdd(t0, u0, c00);
        c01 = coopMultiplyAdd(t0, u1, c01);
        c10 = coopMultiplyAdd(t1, u0, c10);
        c11 = coopMultiplyAdd(t1, u1, c11);
    }
    coopStore(c00, &b2[co + m0 * N + n0], N);
    coopStore(c01, &b2[co + (m0 + 16u) * N + n0], N);
    coopStore(c10, &b2[co + m0 * N + n0 + 16u], N);
    coopStore(c11, &b2[co + (m0 + 16u) * N + n0 + 16u], N);
}
"""

F16 = np.dtype(np.float16)


def eligible(a: WGArray, b: WGArray, batch: tuple[int, ...]) -> bool:
    """Whether ``a @ b`` fits the kernel: float16, M and N multiples of 32, K of 16, each
    operand dense in its last two axes at an offset of whole 16-byte lines, and one batch
    axis at most (a stride per operand; 0 broadcasts)."""
    if a.dtype != F16 or b.dtype != F16:
        return False
    M, K = a.shape[-2:]
    N = b.shape[-1]
    if M % BLOCK or N % BLOCK or K % TILE or not M or not N or not K:
        return False
    if a.strides[-2:] != (K, 1) or b.strides[-2:] != (N, 1):
        return False
    if a.offset % 8 or b.offset % 8:
        return False
    return len([n for n in batch if n != 1]) <= 1


def _batch_stride(x: WGArray, batch: tuple[int, ...]) -> int:
    lead = len(batch) - (x.ndim - 2)
    for i, n in enumerate(batch):
        if n != 1:
            j = i - lead
            return 0 if j < 0 or x.shape[j] == 1 else x.strides[j]
    return 0


def _run(rt: Runtime, a: WGArray, b: WGArray, out: WGArray,
         batch: tuple[int, ...]) -> None:
    from .strided import run_map

    M, K = a.shape[-2:]
    N = b.shape[-1]
    nb = out.size // (M * N)
    work = rt.empty(out.shape, np.dtype(np.float32))
    run_map(rt, "f32(0.0)", [], out=work)
    words = [M, N, K, a.offset, b.offset, _batch_stride(a, batch), _batch_stride(b, batch)]
    rt.record(SOURCE, [a, b], [work], words, (N // BLOCK, M // BLOCK, nb))
    run_map(rt, "a", [work], out=out)  # rounded to float16 as it is stored


def usable(rt: Runtime) -> bool:
    """Whether the kernel runs, and runs right, on this device (checked once)."""
    if rt.coop_status is None:
        if not rt.coop:
            rt.coop_status = "off: the adapter offers no cooperative matrices"
        elif rt.capture is not None:
            return False  # checked outside a recording
        else:
            rt.coop_status = _self_check(rt)
    return rt.coop_status == "on"


def _self_check(rt: Runtime) -> str:
    rng = np.random.default_rng(0)
    M, N, K = 32, 64, 32
    ha = (rng.integers(-8, 9, (M, K)) / 8).astype(F16)
    hb = (rng.integers(-8, 9, (K, N)) / 8).astype(F16)
    try:
        a, b = rt.upload(ha), rt.upload(hb)
        out = rt.empty((M, N), F16)
        _run(rt, a, b, out, ())
        got = rt.read(out).astype(np.float64)
    except Exception as exc:  # the experimental extension refused: the tiled kernels stay
        first = str(exc).strip().splitlines()
        return f"off: {type(exc).__name__}: {' '.join(first[-3:])[:300]}"
    want = ha.astype(np.float64) @ hb.astype(np.float64)
    err = float(np.max(np.abs(got - want)))
    if not err <= 1e-2:
        return f"off: the self-check's product was wrong (max error {err:.3g})"
    return "on"


def matmul(rt: Runtime, a: WGArray, b: WGArray, out: WGArray,
           batch: tuple[int, ...]) -> WGArray:
    """``out = a @ b`` (see the module docstring; `eligible` and `usable` hold)."""
    _run(rt, a, b, out, batch)
    return out

