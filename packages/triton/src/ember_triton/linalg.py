"""Matmul: batched and broadcasting, on ``tl.dot``.

float32 runs strict IEEE products by default (PyTorch's default); ``matmul_precision="tf32"``
on the backend switches to tensor-core TF32.  float16/bfloat16 accumulate in float32.

On a GPU, float16/bfloat16/float32 problems of at least ``TUNE_MIN_MACS`` multiply-adds go
through kernel selection: every Triton tile config of ``_CONFIGS`` (and of ``_TMA_CONFIGS`` on
Hopper) and the candidates a vendor library offers (``backend.vendor_gemm``, a
`ember_triton.vendor.VendorGemm`: cuBLASLt's algorithms and cuBLAS on ``cuda:N``) are timed
once per shape bucket and the fastest is kept (`KernelSelector`, cached on disk).
``backend.use_vendor_gemm = False`` leaves Triton alone; with no provider (the interpreter,
ROCm) Triton's configs are the only candidates.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from ember.backend.strided import broadcast_view
from ember.ops import composite as cops
from ember.ops import linalg as la

from ._array import DeviceArray, dtype_name, kind_of
from ._autotune import bucket
from ._codegen import collapse, contiguous, elementwise
from .elementwise import binary_expression

if TYPE_CHECKING:
    from .backend import TritonBackend

__all__ = ["KERNELS", "add_rows", "matmul"]


def _batch_strides(x: DeviceArray, bshape: tuple[int, ...]) -> tuple[int, ...]:
    nb = x.ndim - 2
    pad = len(bshape) - nb
    return tuple(0 if (i < pad or x.shape[i - pad] == 1) and bshape[i] != 1
                 else x.strides[i - pad] for i in range(len(bshape)))


#: ``(a.shape, a.strides, b.shape, b.strides)`` -> ``(out shape, args, batch)`` of matmuls
#: whose batch axes merge into at most two (the per-call work before the launch, done once)
_LAYOUTS: dict[tuple[Any, ...], tuple[tuple[int, ...], tuple[int, ...], int]] = {}


def matmul(be: TritonBackend, a: DeviceArray, b: DeviceArray) -> DeviceArray:
    """``a @ b`` with batch axes broadcast."""
    dt = a.dtype
    if dtype_name(dt) in ("float16", "bfloat16", "float32"):
        lkey = (a.shape, a.strides, b.shape, b.strides)
        layout = _LAYOUTS.get(lkey)
        if layout is not None:
            out = be.empty(layout[0], dt)
            if out.size:
                _matmul_dot(be, out, a, b, layout[1], layout[2])
            return out
    m, k = a.shape[-2:]
    n = b.shape[-1]
    if a.ndim == 2 and b.ndim == 2:  # the common case: no batch axes to broadcast
        bshape: tuple[int, ...] = ()
        cshape: tuple[int, ...] = ()
        sa: tuple[int, ...] = ()
        sb: tuple[int, ...] = ()
    else:
        bshape = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
        cshape, (sa, sb) = collapse(bshape, [_batch_strides(a, bshape),
                                             _batch_strides(b, bshape)])
    if len(cshape) > 2:  # batch axes that do not merge: materialise both operands
        a = contiguous(be, broadcast_view(a, (*bshape, m, k)))
        b = contiguous(be, broadcast_view(b, (*bshape, k, n)))
        return matmul(be, a, b)
    pad = 2 - len(cshape)
    b1, b2 = (1,) * pad + cshape
    sa1, sa2 = (0,) * pad + sa
    sb1, sb2 = (0,) * pad + sb
    out = be.empty((*bshape, m, n), a.dtype)
    args = (m, n, k, b2, sa1, sa2, a.strides[-2], a.strides[-1],
            sb1, sb2, b.strides[-2], b.strides[-1])
    if dtype_name(dt) in ("float16", "bfloat16", "float32"):
        if len(_LAYOUTS) < 4096:
            _LAYOUTS[(a.shape, a.strides, b.shape, b.strides)] = (out.shape, args, b1 * b2)
        if out.size:
            _matmul_dot(be, out, a, b, args, b1 * b2)
        return out
    if out.size == 0:
        return out
    import triton.language as tl

    acc = tl.float64 if kind_of(dt) == "f" else tl.int64
    if be.memory.interpret:
        bm, bn, bk = (max(16, min(64, be.block_size(x))) for x in (m, n, k))
    else:
        bm, bn, bk = 32, 32, 8
    grid = (-(-m // bm) * -(-n // bn), b1 * b2)
    be.launch(be.module("linalg").matmul, grid, out, a, b, *args,
              DOT=False, PRECISION="ieee", ACC=acc, UPCAST=False, BM=bm, BN=bn, BK=bk)
    return out


#: tile configs ``(BM, BN, BK, GROUP_M, num_warps, num_stages)`` timed by kernel selection;
#: the first of each list is the default when a shape is too small to be worth timing
_CONFIGS = {
    "half": [(128, 128, 64, 8, 4, 4), (128, 256, 64, 8, 8, 3), (256, 128, 64, 8, 8, 3),
             (128, 256, 64, 8, 8, 4), (256, 128, 64, 8, 8, 4),
             (128, 128, 32, 8, 4, 4), (64, 128, 64, 8, 4, 4), (64, 64, 64, 8, 4, 4)],
    "tf32": [(128, 128, 32, 8, 4, 3), (128, 256, 32, 8, 8, 3), (256, 128, 32, 8, 8, 3),
             (128, 64, 32, 8, 4, 4), (64, 64, 32, 8, 4, 4)],
    "ieee": [(64, 64, 32, 8, 4, 3), (128, 64, 32, 8, 4, 3), (128, 128, 16, 8, 8, 3),
             (64, 64, 16, 8, 4, 4)],
}
#: persistent TMA configs ``(BM, BN, BK, GROUP_M, num_warps, num_stages, FLATTEN)``: 2-D
#: problems on sm90+ (`matmul_tma`), timed beside ``_CONFIGS`` (strict float32 has none: no
#: tensor cores).  Picked by ``benchmarks/gpu/tma_configs.py`` on the H200: flattening the loops
#: gains 1-4% where shared memory allows it (not with 128x256 float32 tiles).
_TMA_CONFIGS = {
    "half": [(128, 256, 64, 8, 8, 3, 1), (128, 256, 64, 16, 8, 3, 1), (128, 256, 64, 8, 8, 4, 1),
             (256, 128, 64, 8, 8, 3, 1), (128, 128, 64, 8, 4, 4, 1)],
    "tf32": [(128, 256, 32, 8, 8, 3, 0), (128, 256, 32, 16, 8, 3, 0), (128, 256, 16, 8, 8, 6, 0),
             (128, 128, 32, 8, 4, 5, 1), (256, 128, 32, 8, 8, 3, 0)],
    "ieee": [],
}
#: problems below this many multiply-adds use the default config without timing
TUNE_MIN_MACS = 1 << 24


def _matmul_dot(be: TritonBackend, out: DeviceArray, a: DeviceArray, b: DeviceArray,
                args: tuple[int, ...], batch: int, bias: DeviceArray | None = None) -> None:
    """Tensor-core matmul: Triton tile configs (and a vendor library's candidates), chosen per
    shape bucket.

    A shape bucket's choice, once made, is run directly: the candidates are only built (and
    timed) the first time a bucket is seen.  A problem that ran as one Triton launch on
    operands used as they are (no copy, no split-K) leaves a plan, by its ``args``, dtypes and
    the backend's settings: the next one like it allocates nothing more and launches that
    kernel straight away (the eager path of a training step's small matmuls).
    """
    pkey = (args, batch, a.dtype, None if bias is None else bias.dtype, be.matmul_precision,
            be.use_vendor_gemm)
    plan = be.matmul_plans.get(pkey)
    if plan is not None:
        o, x, y = out.ptr, a.ptr, b.ptr
        z = o if bias is None else bias.ptr
        if not (o | x | y | z) & plan[3]:  # as aligned as the recorded operands were
            plan[0](plan[1], be.memory.stream(), [o, x, y, z, *plan[2]])
            return
    ran = _run_matmul(be, out, a, b, args, batch, bias)
    if ran is not None:
        if len(be.matmul_plans) >= 4096:
            be.matmul_plans.clear()
        be.matmul_plans[pkey] = ran


def _run_matmul(be: TritonBackend, out: DeviceArray, a: DeviceArray, b: DeviceArray,
                args: tuple[int, ...], batch: int, bias: DeviceArray | None) -> Any:
    """`_matmul_dot` without its plans: returns what `_triton_matmul` returns (or ``None``)."""
    m, n, k = args[:3]
    dt = a.dtype
    precision = be.matmul_precision if dtype_name(dt) == "float32" else "ieee"
    vendor = be.vendor_gemm if be.use_vendor_gemm else None
    family = "half" if dtype_name(dt) != "float32" else ("tf32" if precision == "tf32" else "ieee")
    if be.memory.interpret:  # the interpreter pays per program: one config of big blocks
        bm, bn, bk = (max(16, min(64, be.block_size(x))) for x in (m, n, k))
        configs = [(bm, bn, bk, 8, 4, 1)]
        if vendor is None:
            return _triton_matmul(be, configs[0], out, a, b, args, batch, precision, bias)
    else:
        configs = _CONFIGS[family]
    if m * n * k * batch < TUNE_MIN_MACS:
        return _triton_matmul(be, configs[0], out, a, b, args, batch, precision, bias)
    offer = (None if vendor is None
             else vendor.offer(be, out, a, b, args, batch, precision, bias))
    blas = offer is not None
    vendor_names: Sequence[str] = () if offer is None else offer.names
    tma = be.tma and batch == 1 and tma_fits(a, b, args, precision)
    key = ("matmul", dtype_name(dt), precision, bucket(m), bucket(n), bucket(k), batch > 1,
           a.strides[-1] == 1, b.strides[-1] == 1, blas, tma,
           False if offer is None else offer.variant)
    name = be.selector.known(key)
    if name is None or not (name in vendor_names or name in _CONFIG_NAMES
                            or (name in _TMA_NAMES and tma)):
        candidates: dict[str, Callable[[], Any]] = {
            _config_name(cfg): functools.partial(_triton_matmul, be, cfg, out, a, b, args,
                                                 batch, precision, bias)
            for cfg in configs}
        if tma:
            candidates.update({
                _config_name(cfg, "tma"): functools.partial(_tma_matmul, be, cfg, out, a, b,
                                                            args, precision, bias)
                for cfg in _TMA_CONFIGS[family]})
        if offer is not None:
            # Triton's own pick for this bucket, where known, stands for every Triton config:
            # timing them all again costs seconds and heats the GPU for the vendor's candidates
            triton_pick = be.selector.known((*key[:-3], False, tma, False))
            if triton_pick in candidates:
                candidates = {triton_pick: candidates[triton_pick]}
            candidates.update({v: functools.partial(offer.run, v) for v in vendor_names})
        # the vendor's candidates are favoured (`KernelSelector.choose`)
        name = be.selector.choose(key, candidates, favoured=vendor_names)
        return candidates[name]()
    if offer is not None and name in vendor_names:
        return offer.run(name)
    if name in _TMA_NAMES:
        return _tma_matmul(be, _TMA_NAMES[name], out, a, b, args, precision, bias)
    return _triton_matmul(be, _CONFIG_NAMES[name], out, a, b, args, batch, precision, bias)


def _config_name(cfg: tuple[int, ...], kind: str = "triton") -> str:
    return f"{kind}:" + "x".join(map(str, cfg))


_CONFIG_NAMES = {_config_name(cfg): cfg for cfgs in _CONFIGS.values() for cfg in cfgs}
_TMA_NAMES = {_config_name(cfg, "tma"): cfg for cfgs in _TMA_CONFIGS.values() for cfg in cfgs}


def tma_fits(a: DeviceArray, b: DeviceArray, args: tuple[int, ...], precision: str) -> bool:
    """Whether `matmul_tma` can run the 2-D problem ``args``: tensor descriptors need 16-byte
    aligned bases and row strides, and A's K axis contiguous (tf32 copies an operand whose K
    axis is not, as `_k_major` does; half types read B either way)."""
    _, n, k, _, _, _, sam, sak, _, _, sbk, sbn = args
    size = a.dtype.itemsize
    if precision == "ieee" and dtype_name(a.dtype) == "float32":
        return False
    if (k * size) % 16 or (n * size) % 16:
        return False

    def aligned(x: DeviceArray, stride: int) -> bool:
        return stride > 0 and not (stride * size) % 16 and not x.ptr % 16

    tf32 = precision == "tf32"
    a_ok = aligned(a, sam) if sak == 1 else tf32
    if tf32:
        b_ok = aligned(b, sbn) if sbk == 1 else True
    else:
        b_ok = aligned(b, sbk) if sbn == 1 else sbk == 1 and aligned(b, sbn)
    return a_ok and b_ok


class _ScratchLaunch:
    """A recorded launch of a kernel that makes tensor descriptors on the device: Triton's
    allocator of global scratch is set to this device's memory first (another device's may
    have been set since), then the launch runs as recorded."""

    __slots__ = ("entry", "memory")

    def __init__(self, entry: Any, memory: Any) -> None:
        self.entry, self.memory = entry, memory

    def __call__(self, grid: Any, stream: int, raw: list[Any]) -> None:
        self.memory.use_scratch()
        self.entry(grid, stream, raw)


def _tma_matmul(be: TritonBackend, cfg: tuple[int, ...], out: DeviceArray, a: DeviceArray,
                b: DeviceArray, args: tuple[int, ...], precision: str,
                bias: DeviceArray | None = None) -> Any:
    """``out = a @ b (+ bias)`` by `matmul_tma` (``tma_fits(a, b, args, precision)`` holds):
    persistent programs, one per multiprocessor at most.  Returns `_matmul_dot`'s plan when
    that was one recorded launch on the operands as given (no K-major copy), so the next
    problem like it launches straight away instead of choosing again (else ``None``)."""
    m, n, k = args[:3]
    bm, bn, bk, group, warps, stages, flatten = cfg
    given = (a, b)
    if precision == "tf32":
        a, b, args = _k_major(be, a, b, args)
    sam, sbk, sbn = args[6], args[10], args[11]
    kmajor = sbk == 1 and sbn != 1
    step = min(-(-m // bm) * -(-n // bn), be.processors)
    arrays = (out, a, b, out if bias is None else bias)
    key = ("matmul_tma", cfg, m, n, k, sam, sbk, sbn, precision, kmajor, bias is None, a.dtype,
           out.dtype, arrays[3].dtype)
    be.memory.use_scratch()  # the descriptors live in global scratch
    be.launch_planned(key, be.module("linalg").matmul_tma, (step,), arrays,
                      (m, n, k, sam, sbk, sbn, step), PRECISION=precision,
                      UPCAST=be.memory.interpret and dtype_name(a.dtype) == "bfloat16",
                      BM=bm, BN=bn, BK=bk, GROUP_M=group, HAS_BIAS=bias is not None,
                      B_KMAJOR=kmajor, FLATTEN=bool(flatten), num_warps=warps,
                      num_stages=stages)
    entry = be._planned.get(key)
    if entry is None or given[0] is not a or given[1] is not b:
        return None
    return _ScratchLaunch(entry, be.memory), (step,), (m, n, k, sam, sbk, sbn, step), 15


def _triton_matmul(be: TritonBackend, cfg: tuple[int, ...], out: DeviceArray, a: DeviceArray,
                   b: DeviceArray, args: tuple[int, ...], batch: int, precision: str,
                   bias: DeviceArray | None = None) -> Any:
    """``out = a @ b (+ bias)`` by `matmul_dot` with tile config ``cfg``.  Returns the plan
    `_matmul_dot` keeps, ``(entry, grid, scalars)``, when that was one recorded launch on the
    operands as given (else ``None``)."""
    m, n, k = args[:3]
    bm, bn, bk, group, warps, stages = cfg
    kmajor = precision == "tf32" and batch == 1
    given = (a, b)
    if kmajor:  # tf32 tensor cores read both operands K-major: copy those that are not
        a, b, args = _k_major(be, a, b, args)
    tiles = -(-m // bm) * -(-n // bn)
    splits, ks = split_k(tiles * batch, k, bk, be.processors)
    target = out if splits == 1 else be.empty((splits, *out.shape), np.dtype(np.float32))
    fused_bias = bias is not None and splits == 1
    arrays = (target, a, b, bias if fused_bias and bias is not None else target)
    key = ("matmul_dot", cfg, args, batch, precision, kmajor, fused_bias, splits, a.dtype,
           b.dtype, target.dtype, arrays[3].dtype)
    wide = max(a.size, b.size, target.size) >= 1 << 31
    grid = (tiles, batch, splits)
    be.launch_planned(key, be.module("linalg").matmul_dot, grid, arrays, (*args, ks),
                      PRECISION=precision,
                      UPCAST=be.memory.interpret and dtype_name(a.dtype) == "bfloat16",
                      WIDE=wide, BM=bm, BN=bn, BK=bk, GROUP_M=group, EVEN_K=k % bk == 0,
                      HAS_BIAS=fused_bias, B_KMAJOR=kmajor, num_warps=warps,
                      num_stages=stages)
    if splits > 1:
        total = out.size
        block = be.block_size(total)
        parts = (out, target, target if bias is None else bias)
        be.launch_planned(("split_k_sum", total, n, splits, bias is None, out.dtype,
                           parts[2].dtype), be.module("linalg").split_k_sum,
                          (-(-total // block),), parts, (total, n, splits),
                          HAS_BIAS=bias is not None, BLOCK=block)
        return None
    entry = be._planned.get(key)
    if entry is None or given[0] is not a or given[1] is not b:
        return None
    return entry, grid, (*args, ks), 15


def split_k(tiles: int, k: int, bk: int, processors: int) -> tuple[int, int]:
    """``(splits, K per split)`` for a matmul of ``tiles`` output tiles: a problem with too
    few tiles to fill the device's ``processors`` and a long K is cut along K (each split
    keeps at least four BK steps), so more programs share the work; else ``(1, k)``."""
    if 2 * tiles > processors or k < 8 * bk:
        return 1, k
    splits = min(-(-processors // tiles), k // (4 * bk))
    per = -(-k // splits)
    per = -(-per // bk) * bk  # whole BK steps: only the last split has a K tail
    return -(-k // per), per


def _k_major(be: TritonBackend, a: DeviceArray, b: DeviceArray, args: tuple[int, ...],
             ) -> tuple[DeviceArray, DeviceArray, tuple[int, ...]]:
    """2-D operands with K contiguous in both (a copy of each that is not): tf32 MMA reads
    32-bit operands only K-major, and Triton shuffles any other layout through registers at a
    third of the speed (the H200 with Triton 3.6, 2026-12-03)."""
    m, n, k, b2, sa1, sa2, sam, sak, sb1, sb2, sbk, sbn = args
    if sak != 1 and k > 1:
        a = contiguous(be, a.view((m, k), (sam, sak), a.offset))
        sam, sak = k, 1
    if sbk != 1 and k > 1:
        bt = contiguous(be, b.view((n, k), (sbn, sbk), b.offset))
        b, sbk, sbn = bt, 1, k
    return a, b, (m, n, k, b2, sa1, sa2, sam, sak, sb1, sb2, sbk, sbn)


def add_rows(be: TritonBackend, out: DeviceArray, bias: DeviceArray) -> None:
    """``out += bias`` over the rows of ``out`` (``add``'s arithmetic, in place)."""
    e = binary_expression("add", out.dtype)
    elementwise(be, e.body, [out, bias], e.out, out=out, widen=e.widen, shape=out.shape)


def linear(be: TritonBackend, x: DeviceArray, w: DeviceArray, bias: DeviceArray) -> DeviceArray:
    """``x @ w.T + bias`` (`ember.ops.composite.linear`): the bias is added in the matmul's
    epilogue (Triton tile configs) or by one more kernel (cuBLAS, float64)."""
    wt = w.transpose((1, 0))
    m, k = x.shape
    n = w.shape[0]
    if dtype_name(x.dtype) not in ("float16", "bfloat16", "float32"):
        out = matmul(be, x, wt)
        add_rows(be, out, bias)
        return out
    out = be.empty((m, n), x.dtype)
    if out.size:
        args = (m, n, k, 1, 0, 0, x.strides[0], x.strides[1], 0, 0, wt.strides[0],
                wt.strides[1])
        _matmul_dot(be, out, x, wt, args, 1, contiguous(be, bias))
    return out


KERNELS: dict[Any, Any] = {la.matmul: matmul, cops.linear: linear}
