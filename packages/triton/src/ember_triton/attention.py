"""Fused scaled-dot-product attention (`ember.ops.composite.scaled_dot_product_attention` and
its ``_backward``): one forward kernel, and three backward kernels (``delta``, ``dK``/``dV`` per
key block, ``dQ`` per query block), FlashAttention-2 style (``kernels/attention.py``).

The batch axes of ``q``, ``k``, ``v`` (and ``g``, ``out``, the mask) are merged into at most
two, each operand keeping its own strides, so permuted views (the heads of a packed ``qkv``
projection) are read where they lie; only a head axis that is not contiguous, or batch axes
that merge into more than two, cost a copy.  A mask is read through its broadcast strides
(0 on broadcast axes).  Outputs are contiguous.  Half types compute in float32 and their
logsumexp is float32; float64 computes in float64.

A row that may attend nowhere gives nan (output and logsumexp), as the CPU kernel does.
# Note: its nan reaches ``dk``/``dv`` only through the key blocks the backward visits; with
# ``causal`` those past the row's diagonal are skipped and stay finite, where the CPU kernel
# (which rebuilds every weight) makes all of ``dk``/``dv`` nan.

On a GPU, block sizes, warps and pipeline stages come from a short list per dtype and head
dimension; problems big enough to matter time the list once per shape bucket
(`KernelSelector`).  The interpreter takes big blocks (it pays per program instance).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from ember.backend.geometry import attention_operands_ok
from ember.backend.strided import broadcast_view
from ember.ops import composite as cops

from ._array import DeviceArray, contiguous_strides, dtype_name
from ._autotune import bucket
from ._codegen import collapse, contiguous

if TYPE_CHECKING:
    from .backend import TritonBackend

__all__ = ["INTERPRET_BLOCK", "KERNELS", "TUNE_MIN_MACS", "scaled_dot_product_attention",
           "scaled_dot_product_attention_backward"]

_OP = "scaled_dot_product_attention"
_LOG2E = 1.4426950408889634
_F32 = np.dtype(np.float32)

#: the largest block the interpreter takes (tests lower it to reach several blocks per row)
INTERPRET_BLOCK = 128
#: problems of fewer multiply-adds (``batch * L * S * D``) use the first config without timing
TUNE_MIN_MACS = 1 << 26

Config = tuple[int, int, int, int]  # BLOCK_M, BLOCK_N, num_warps, num_stages

#: candidates per kernel, dtype family and head-dimension class (<= 64, <= 128, larger); the
#: first is the default for problems too small to time
_CONFIGS: dict[tuple[str, str, int], list[Config]] = {
    ("fwd", "half", 64): [(128, 64, 4, 3), (128, 128, 8, 3), (128, 64, 4, 4), (64, 64, 4, 3),
                          (128, 32, 4, 4)],
    ("fwd", "half", 128): [(128, 64, 8, 3), (128, 32, 4, 3), (64, 64, 4, 3), (128, 128, 8, 2)],
    ("fwd", "half", 256): [(64, 32, 4, 2), (64, 64, 8, 2)],
    ("fwd", "tf32", 64): [(128, 32, 4, 3), (64, 64, 4, 3), (128, 64, 8, 2)],
    ("fwd", "tf32", 128): [(64, 32, 4, 2), (128, 32, 8, 2), (64, 64, 8, 2)],
    # 3xTF32: three products per tile, the operands' heads and tails held in registers
    ("fwd", "tf32x3", 64): [(64, 32, 4, 2), (128, 32, 4, 3), (64, 64, 4, 2), (128, 64, 8, 2),
                            (32, 32, 4, 2)],
    ("fwd", "tf32x3", 128): [(64, 32, 4, 2), (64, 32, 8, 2), (32, 32, 4, 2)],
    # float32 in IEEE products runs on the FMA units: larger tiles per warp are candidates too
    ("fwd", "ieee", 64): [(64, 32, 4, 2), (32, 32, 4, 2), (64, 64, 8, 2), (64, 64, 4, 2),
                          (128, 64, 8, 2), (128, 32, 8, 2)],
    ("fwd", "ieee", 128): [(64, 32, 8, 2), (32, 32, 4, 2)],
    ("dkdv", "half", 64): [(32, 128, 4, 3), (64, 128, 8, 2), (32, 64, 4, 3), (64, 64, 4, 2)],
    ("dkdv", "half", 128): [(32, 128, 8, 2), (64, 64, 4, 2), (32, 64, 4, 2)],
    ("dkdv", "half", 256): [(32, 64, 4, 1), (16, 64, 4, 2)],
    ("dkdv", "tf32", 64): [(32, 64, 4, 2), (32, 128, 8, 2)],
    ("dkdv", "tf32", 128): [(32, 64, 4, 2), (32, 32, 4, 2)],
    ("dkdv", "tf32x3", 64): [(32, 64, 4, 2), (32, 32, 4, 2), (64, 64, 4, 2), (64, 64, 8, 2),
                             (32, 128, 8, 2)],
    ("dkdv", "tf32x3", 128): [(32, 32, 4, 2), (32, 64, 8, 2), (16, 32, 4, 2)],
    ("dkdv", "ieee", 64): [(32, 64, 4, 2), (32, 32, 4, 2), (64, 64, 4, 2), (64, 64, 8, 2),
                           (32, 128, 8, 2), (64, 32, 4, 2)],
    ("dkdv", "ieee", 128): [(32, 32, 4, 2), (16, 32, 4, 2)],
    ("dq", "half", 64): [(128, 32, 4, 3), (128, 64, 8, 2), (64, 64, 4, 3), (64, 32, 4, 3)],
    ("dq", "half", 128): [(128, 32, 8, 2), (64, 64, 4, 2), (64, 32, 4, 2)],
    ("dq", "half", 256): [(64, 32, 4, 1), (64, 16, 4, 2)],
    ("dq", "tf32", 64): [(64, 32, 4, 2), (128, 32, 8, 2)],
    ("dq", "tf32", 128): [(64, 32, 4, 2), (32, 32, 4, 2)],
    ("dq", "tf32x3", 64): [(64, 32, 4, 2), (32, 32, 4, 2), (64, 64, 4, 2), (128, 32, 8, 2),
                           (128, 64, 8, 2)],
    ("dq", "tf32x3", 128): [(32, 32, 4, 2), (64, 32, 8, 2), (32, 16, 4, 2)],
    ("dq", "ieee", 64): [(64, 32, 4, 2), (32, 32, 4, 2), (64, 64, 4, 2), (64, 64, 8, 2),
                         (128, 64, 8, 2), (128, 32, 8, 2)],
    ("dq", "ieee", 128): [(32, 32, 4, 2), (32, 16, 4, 2)],
    # float64 multiplies without tl.dot: small tiles keep the [M, D, N] products in registers
    ("fwd", "wide", 0): [(16, 8, 8, 1)],
    ("dkdv", "wide", 0): [(8, 16, 8, 1)],
    ("dq", "wide", 0): [(16, 8, 8, 1)],
}


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _f32_precision(be: TritonBackend) -> str:
    """How float32 products run: TF32 where ``matmul_precision`` asks for it; else 3xTF32 on
    tensor cores where the device has them (float32's accuracy, as PyTorch's memory-efficient
    attention computes float32 on sm80 and later), else strict IEEE products on the FMA units."""
    if be.matmul_precision == "tf32":
        return "tf32"
    return "tf32x3" if be.memory.f32_tensor_cores() else "ieee"


def _family(be: TritonBackend, dt: np.dtype[Any]) -> str:
    name = dtype_name(dt)
    if name == "float64":
        return "wide"
    if name == "float32":
        return _f32_precision(be)
    return "half"


def _configs(kind: str, family: str, d: int) -> list[Config]:
    if family == "wide":
        return _CONFIGS[(kind, family, 0)]
    cls = 64 if d <= 64 else 128 if d <= 128 else 256
    if family != "half" and cls == 256:
        cls = 128
        # float32 with wide heads: halve the tiles of the 128 class
        return [(max(16, m // 2), max(16, n // 2), w, 1) for m, n, w, _ in
                _CONFIGS[(kind, family, cls)]]
    return _CONFIGS[(kind, family, cls)]


def _check(q: DeviceArray, k: DeviceArray, v: DeviceArray, mask: DeviceArray | None,
           name: str) -> None:
    ok = (attention_operands_ok(q, k, v, mask)
          and dtype_name(q.dtype) in ("float16", "bfloat16", "float32", "float64"))
    if not ok:
        shapes = ", ".join(f"{a.shape} {a.dtype}" for a in (q, k, v) + (
            (mask,) if mask is not None else ()))
        raise ValueError(f"{name}: expected q[..., L, D], k[..., S, D], v[..., S, Dv] of one "
                         f"float dtype and batch shape and a mask (bool or of that dtype) "
                         f"broadcasting to [..., L, S], got {shapes}")


def _mask_strides(mask: DeviceArray, shape: tuple[int, ...]) -> tuple[int, ...]:
    """``mask``'s strides broadcast to ``shape`` (0 on the axes it broadcasts along)."""
    pad = len(shape) - mask.ndim
    return tuple(0 if i < pad or mask.shape[i - pad] == 1 else mask.strides[i - pad]
                 for i in range(len(shape)))


def _dense_like(be: TritonBackend, a: DeviceArray, shape: tuple[int, ...]) -> DeviceArray:
    """An empty ``shape`` array of ``a``'s dtype laid out in ``a``'s axis order, densely: for
    the ``[B, H, L, D]`` view of a ``[B, L, H, D]`` projection, memory in ``[B, L, H, D]``
    order, so that ``transpose(1, 2).reshape(B, L, H * D)`` of the result is a view (as
    PyTorch's attention outputs and gradients are laid out).  Contiguous when ``a`` is, or
    when its innermost axis is not the last."""
    n = len(shape)
    if n < 3 or a.strides[-1] != 1 or 0 in a.strides or a.strides == contiguous_strides(
            a.shape):
        return be.empty(shape, a.dtype)
    # outer to inner by stride; size-1 axes and ties keep their place
    order = sorted(range(n), key=lambda i: (-a.strides[i] if a.shape[i] > 1 else 0, i))
    if a.shape[-1] > 1 and order[-1] != n - 1:
        return be.empty(shape, a.dtype)
    order = [i for i in order if i != n - 1] + [n - 1]
    phys = tuple(shape[i] for i in order)
    dense = contiguous_strides(phys)
    strides = [0] * n
    for j, i in enumerate(order):
        strides[i] = dense[j]
    return be.empty(phys, a.dtype).view(shape, tuple(strides), 0)


class _Layout:
    """Operands with their batch axes merged into two: ``b1 x b2`` entries, and per operand
    ``(batch stride 1, batch stride 2, row stride)`` (the mask: and its column stride)."""

    __slots__ = ("arrays", "b1", "b2", "mask", "mask_strides", "strides")

    def __init__(self, be: TritonBackend, arrays: list[DeviceArray], mask: DeviceArray | None,
                 length: int, source: int) -> None:
        # the head axis must be contiguous: a copy for the (rare) operand whose is not
        arrays = [a if a.strides[-1] == 1 or a.shape[-1] <= 1 else contiguous(be, a)
                  for a in arrays]
        bshape = arrays[0].shape[:-2]
        full = (*bshape, length, source)
        mstr = _mask_strides(mask, full) if mask is not None else (0,) * len(full)
        cshape, cstr = collapse(bshape, [a.strides[:-2] for a in arrays] + [mstr[:-2]])
        if len(cshape) > 2:  # batch axes that do not merge: copy the operands
            arrays = [contiguous(be, a) for a in arrays]
            cshape, cstr = collapse(bshape, [a.strides[:-2] for a in arrays] + [mstr[:-2]])
        if len(cshape) > 2 and mask is not None:  # and then the mask, at full size
            mask = contiguous(be, broadcast_view(mask, full))
            mstr = mask.strides
            cshape, cstr = collapse(bshape, [a.strides[:-2] for a in arrays] + [mstr[:-2]])
        pad = 2 - len(cshape)
        self.b1, self.b2 = (1,) * pad + cshape
        self.arrays = arrays
        self.mask = mask
        self.strides = [(*((0,) * pad + st), a.strides[-2]) for a, st in zip(arrays, cstr,
                                                                             strict=False)]
        self.mask_strides = (*((0,) * pad + cstr[-1]), mstr[-2], mstr[-1])


def _meta(be: TritonBackend, q: DeviceArray, v: DeviceArray, causal: bool,
          mask: DeviceArray | None) -> dict[str, Any]:
    """The constexpr arguments every attention kernel shares."""
    name = dtype_name(q.dtype)
    wide = name == "float64"
    interp = be.memory.interpret
    d, dv = q.shape[-1], v.shape[-1]
    bd = max(16, _pow2(max(d, dv)))
    return {"UNIT": 1.0 if wide else _LOG2E, "CAUSAL": causal,
            "MASK": 0 if mask is None else 1 if mask.dtype == np.bool_ else 2,
            "WIDE": wide, "DOT": interp or not wide,
            "PRECISION": _f32_precision(be) if name == "float32" else "ieee",
            "UPCAST": interp and name == "bfloat16", "EVEN_D": d == dv == bd,
            "BLOCK_D": bd, "BLOCK_DV": bd}


def _interpret_config(m: int, n: int) -> Config:
    top = INTERPRET_BLOCK
    return (min(top, max(16, _pow2(m))), min(top, max(16, _pow2(n))), 4, 1)


def _run(be: TritonBackend, kind: str, launch: Callable[[Config], None], key: tuple[Any, ...],
         family: str, d: int, macs: int, interp_cfg: Config) -> None:
    """Launch ``kind`` with the config kernel selection picks for ``key`` (the first of its
    list when the problem is small or timing is off)."""
    if be.memory.interpret:
        launch(interp_cfg)
        return
    configs = _configs(kind, family, d)
    if len(configs) == 1 or macs < TUNE_MIN_MACS or not be.selector.enabled:
        launch(configs[0])
        return
    names = {"x".join(map(str, c)): c for c in configs}
    name = be.selector.known(key)
    if name not in names:
        name = be.selector.choose(key, {n: functools.partial(launch, c)
                                        for n, c in names.items()})
        return  # the winner's result is what the selection left behind
    launch(names[name])


def _key(kind: str, q: DeviceArray, v: DeviceArray, length: int, source: int,
         meta: dict[str, Any]) -> tuple[Any, ...]:
    return (f"attention_{kind}", dtype_name(q.dtype), meta["PRECISION"], meta["CAUSAL"],
            meta["MASK"], meta["BLOCK_D"], bucket(length), bucket(source),
            q.shape[-1] == v.shape[-1])


def scaled_dot_product_attention(be: TritonBackend, q: DeviceArray, k: DeviceArray,
                                 v: DeviceArray, *bias: DeviceArray, scale: float,
                                 causal: bool = False,
                                 mask: bool = False) -> tuple[DeviceArray, DeviceArray]:
    """``(softmax(q k^T scale + bias) v, logsumexp of each score row)`` in one kernel."""
    m = bias[0] if mask else None
    _check(q, k, v, m, _OP)
    length, source, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    bshape = q.shape[:-2]
    out = _dense_like(be, q, (*bshape, length, dv))
    stat = _F32 if q.dtype.itemsize < 4 else q.dtype
    lse = be.empty((*bshape, length), stat)
    if out.size == 0 and lse.size == 0:
        return out, lse
    if source == 0:
        raise ValueError(f"{_OP}: no keys to attend to (k {k.shape})")
    lay = _Layout(be, [q, k, v, out], m, length, source)
    if lay.arrays[3] is not out:  # batch axes that do not merge: contiguous operands and out
        out = be.empty(out.shape, out.dtype)
        lay = _Layout(be, [*lay.arrays[:3], out], m, length, source)
    q, k, v, _ = lay.arrays
    meta = _meta(be, q, v, causal, m)
    sc = be.scalar(float(scale), np.float64 if meta["WIDE"] else _F32)
    (sq1, sq2, sqm), (sk1, sk2, skn), (sv1, sv2, svn), (so1, so2, som) = lay.strides
    args = (out, lse, q, k, v, q if lay.mask is None else lay.mask, length, source, d, dv,
            lay.b2, sq1, sq2, sqm, sk1, sk2, skn, sv1, sv2, svn, so1, so2, som,
            *lay.mask_strides, sc)
    kernel = be.module("attention").attn_fwd

    def launch(cfg: Config) -> None:
        bm, bn, warps, stages = cfg
        extra = {} if be.memory.interpret else {"num_warps": warps, "num_stages": stages}
        be.launch(kernel, (-(-length // bm), lay.b1 * lay.b2), *args, BLOCK_M=bm, BLOCK_N=bn,
                  **meta, **extra)

    batch = lay.b1 * lay.b2
    _run(be, "fwd", launch, _key("fwd", q, v, length, source, meta), _family(be, q.dtype),
         max(d, dv), batch * length * source * max(d, dv),
         _interpret_config(length, source))
    return out, lse


def scaled_dot_product_attention_backward(be: TritonBackend, g: DeviceArray, q: DeviceArray,
                                          k: DeviceArray, v: DeviceArray, out: DeviceArray,
                                          lse: DeviceArray, *bias: DeviceArray, scale: float,
                                          causal: bool = False, mask: bool = False
                                          ) -> tuple[DeviceArray, DeviceArray, DeviceArray]:
    """``(dq, dk, dv)`` from the weights rebuilt as ``exp(s - lse)``: three kernels."""
    m = bias[0] if mask else None
    name = _OP + "_backward"
    _check(q, k, v, m, name)
    length, source, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    if (g.shape != out.shape or out.shape != (*q.shape[:-1], dv) or g.dtype != q.dtype
            or out.dtype != q.dtype or lse.shape != q.shape[:-1]):
        raise ValueError(f"{name}: g {g.shape} {g.dtype} and out {out.shape} {out.dtype} must "
                         f"be {(*q.shape[:-1], dv)} {q.dtype}, lse {lse.shape} must be "
                         f"{q.shape[:-1]}")
    # the gradients laid out as their inputs (a [B, L, H, D] projection's gradient stays a view)
    grads = [_dense_like(be, a, a.shape) for a in (q, k, v)]
    dq, dk, dvv = grads
    if dq.size == 0 and dk.size == 0 and dvv.size == 0:
        return dq, dk, dvv
    if source == 0 or length == 0:
        raise ValueError(f"{name}: empty rows (q {q.shape}, k {k.shape})")
    lay = _Layout(be, [q, k, v, g, out, *grads], m, length, source)
    if any(c is not a for c, a in zip(lay.arrays[5:], grads, strict=True)):
        # batch axes that do not merge: contiguous operands and gradients
        dq, dk, dvv = grads = [be.empty(a.shape, a.dtype) for a in grads]
        lay = _Layout(be, [*lay.arrays[:5], *grads], m, length, source)
    q, k, v, g, out = lay.arrays[:5]
    meta = _meta(be, q, v, causal, m)
    wide = meta["WIDE"]
    acc = np.dtype(np.float64) if wide else _F32
    sc = be.scalar(float(scale), acc)
    batch = lay.b1 * lay.b2
    lse = contiguous(be, lse)
    delta = be.empty((batch, length), acc)
    (sq1, sq2, sqm), (sk1, sk2, skn), (sv1, sv2, svn), (sg1, sg2, sgm), (so1, so2, som), \
        sdq, sdk, sdv = lay.strides
    mod = be.module("attention")
    interp = be.memory.interpret
    bd = meta["BLOCK_DV"]
    bm = min(INTERPRET_BLOCK, max(16, _pow2(length))) if interp else 64
    be.launch(mod.attn_bwd_delta, (-(-length // bm), batch), delta, out, g, length, dv, lay.b2,
              so1, so2, som, sg1, sg2, sgm, WIDE=wide, BLOCK_M=bm, BLOCK_DV=bd,
              **({} if interp else {"num_warps": 4}))
    common = (q, k, v, g, lse, delta, q if lay.mask is None else lay.mask, length, source, d,
              dv, lay.b2, sq1, sq2, sqm, sk1, sk2, skn, sv1, sv2, svn, sg1, sg2, sgm,
              *lay.mask_strides, sc)

    def launch_dkdv(cfg: Config) -> None:
        bm, bn, warps, stages = cfg
        extra = {} if interp else {"num_warps": warps, "num_stages": stages}
        be.launch(mod.attn_bwd_dkdv, (-(-source // bn), batch), dk, dvv, *sdk, *sdv, *common,
                  BLOCK_M=bm, BLOCK_N=bn, **meta, **extra)

    def launch_dq(cfg: Config) -> None:
        bm, bn, warps, stages = cfg
        extra = {} if interp else {"num_warps": warps, "num_stages": stages}
        be.launch(mod.attn_bwd_dq, (-(-length // bm), batch), dq, *sdq, *common, BLOCK_M=bm,
                  BLOCK_N=bn, **meta, **extra)

    family = _family(be, q.dtype)
    macs = batch * length * source * max(d, dv)
    _run(be, "dkdv", launch_dkdv, _key("dkdv", q, v, length, source, meta), family,
         max(d, dv), macs, _interpret_config(length, source))
    _run(be, "dq", launch_dq, _key("dq", q, v, length, source, meta), family, max(d, dv), macs,
         _interpret_config(length, source))
    return dq, dk, dvv


KERNELS: dict[Any, Any] = {
    cops.scaled_dot_product_attention: scaled_dot_product_attention,
    cops.scaled_dot_product_attention_backward: scaled_dot_product_attention_backward,
}
