"""Fused composites over rows: softmax, log_softmax, layer_norm, rms_norm, cross_entropy and
their backward ops (`ember.ops.composite`), one kernel each where the row allows.

The normalised (or softmax) axes are moved last and made contiguous (a copy only when they are
not already), outputs are written as contiguous rows and handed back as views in the input's
axis order.  Half types compute in float32; row statistics are float32 for them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from ember.ops import composite as cops

from ._array import DeviceArray, contiguous_strides
from ._codegen import contiguous

if TYPE_CHECKING:
    from .backend import TritonBackend

__all__ = ["KERNELS", "MAX_BLOCK"]

#: the longest row kept in registers in one block (longer rows are looped over in chunks of
#: ``MAX_BLOCK[mode] // 2``), per execution mode; tests lower it to reach the looping kernels
MAX_BLOCK = {"compiled": 8192, "interpret": 1 << 12}

_F32 = np.dtype(np.float32)


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _stat(dtype: np.dtype[Any]) -> np.dtype[Any]:
    return _F32 if dtype.itemsize < 4 else dtype


def _wide(dtype: np.dtype[Any]) -> bool:
    return dtype.itemsize == 8


class _Plan:
    """Blocks and warps for ``m`` rows of ``n``: one block per row when it fits."""

    __slots__ = ("bm", "bn", "meta", "one", "programs")

    def __init__(self, be: TritonBackend, m: int, n: int, dtype: np.dtype[Any]) -> None:
        mode = be.library.mode
        top = MAX_BLOCK[mode]
        if dtype.itemsize == 8 and mode == "compiled":
            top //= 2  # float64 rows need twice the registers
        self.one = n <= top
        self.bn = max(16, _pow2(n)) if self.one else top // 2
        # short rows: several per program, so a program moves a few thousand elements
        per = (1 << 14) if be.memory.interpret else 2048
        self.bm = max(1, min(_pow2(max(m, 1)), per // self.bn))
        self.programs = -(-m // self.bm)
        self.meta: dict[str, Any] = {"BLOCK_M": self.bm, "BLOCK_N": self.bn}
        if not be.memory.interpret:
            self.meta["num_warps"] = max(1, min(16, self.bm * self.bn // 512))


def _to_rows(be: TritonBackend, x: DeviceArray,
             lead: int) -> tuple[DeviceArray, int, int]:
    """``x`` as contiguous rows over its axes from ``lead`` on: (rows, m, n)."""
    rows = contiguous(be, x)
    return rows, math.prod(x.shape[:lead]), math.prod(x.shape[lead:])


def _last(x: DeviceArray, dim: int) -> tuple[DeviceArray, tuple[int, ...]]:
    order = (*(i for i in range(x.ndim) if i != dim), dim)
    return x.transpose(order), order


def _back(out: DeviceArray, order: tuple[int, ...]) -> DeviceArray:
    """Rows written in ``order``'s axis order, seen in the original one."""
    if order == tuple(range(len(order))):
        return out
    inv = tuple(int(i) for i in np.argsort(order))
    strides = contiguous_strides(out.shape)
    return out.view(tuple(out.shape[i] for i in inv), tuple(strides[i] for i in inv),
                    out.offset)


# -- softmax family ---------------------------------------------------------------------------


def _softmax(log: bool) -> Any:
    def kernel(be: TritonBackend, x: DeviceArray, dim: int) -> DeviceArray:
        moved, order = _last(x, dim)
        rows, m, n = _to_rows(be, moved, moved.ndim - 1)
        out = be.empty(moved.shape, x.dtype)
        if m and n:
            plan = _Plan(be, m, n, x.dtype)
            be.launch(be.module("rows").softmax_rows, (plan.programs,), out, rows, m, n,
                      LOG=log, WIDE=_wide(x.dtype), ONE=plan.one, **plan.meta)
        return _back(out, order)

    kernel.__name__ = "log_softmax" if log else "softmax"
    return kernel


def _softmax_backward(log: bool) -> Any:
    def kernel(be: TritonBackend, y: DeviceArray, g: DeviceArray, dim: int) -> DeviceArray:
        my, order = _last(y, dim)
        mg, _ = _last(g, dim)
        yr, m, n = _to_rows(be, my, my.ndim - 1)
        gr = contiguous(be, mg)
        out = be.empty(my.shape, y.dtype)
        if m and n:
            plan = _Plan(be, m, n, y.dtype)
            be.launch(be.module("rows").softmax_backward_rows, (plan.programs,), out, yr, gr,
                      m, n, LOG=log, WIDE=_wide(y.dtype), ONE=plan.one, **plan.meta)
        return _back(out, order)

    kernel.__name__ = "log_softmax_backward" if log else "softmax_backward"
    return kernel


# -- norms ------------------------------------------------------------------------------------


def _norm(rms: bool) -> Any:
    def kernel(be: TritonBackend, x: DeviceArray, *wb: DeviceArray, ndim: int, eps: float,
               weight: bool, bias: bool = False) -> tuple[DeviceArray, ...]:
        lead = x.ndim - ndim
        rows, m, n = _to_rows(be, x, lead)
        w = contiguous(be, wb[0]) if weight else rows
        b = contiguous(be, wb[1 if weight else 0]) if bias else rows
        out = be.empty(x.shape, x.dtype)
        sd = _stat(x.dtype)
        rstd = be.empty(x.shape[:lead], sd)
        mean = rstd if rms else be.empty(x.shape[:lead], sd)
        if m:
            plan = _Plan(be, m, n, x.dtype)
            be.launch(be.module("rows").norm_rows, (plan.programs,), out, mean, rstd, rows, w,
                      b, m, n, float(eps), RMS=rms, HAS_W=weight, HAS_B=bias,
                      WIDE=_wide(x.dtype), ONE=plan.one, **plan.meta)
        return (out, rstd) if rms else (out, mean, rstd)

    kernel.__name__ = "rms_norm" if rms else "layer_norm"
    return kernel


def _weight_grads(be: TritonBackend, pd: DeviceArray, parts: int, n: int,
                  dtype: np.dtype[Any]) -> tuple[DeviceArray, DeviceArray]:
    """Sum the ``[2, parts, n]`` partial sums of the weight and the bias gradient, both in
    one launch (zeros when ``parts`` is 0)."""
    kern = be.module("rows").sum_partials
    if be.memory.interpret:
        bn = max(16, _pow2(n))
        bp = max(1, min(_pow2(max(parts, 1)), (1 << 14) // bn))
    else:  # every partial row in one load where it fits: many short programs, no loop
        bp = min(_pow2(max(parts, 1)), 256)
        bn = max(16, min(128, 8192 // bp))
    out = be.empty((2, n), dtype)
    be.launch(kern, (-(-n // bn), 2), out, pd, parts, n, BLOCK_P=bp, BLOCK_N=bn)
    return out.view((n,), (1,), out.offset), out.view((n,), (1,), out.offset + n)


def _norm_backward(rms: bool) -> Any:
    def kernel(be: TritonBackend, g: DeviceArray, x: DeviceArray, *rest: DeviceArray,
               ndim: int, weight: bool, affine: bool = True) -> tuple[DeviceArray, ...]:
        if rms:
            rstd, *w = rest
            mean, affine = rstd, weight
        else:
            mean, rstd, *w = rest
        lead = x.ndim - ndim
        xr, m, n = _to_rows(be, x, lead)
        gr = contiguous(be, g)
        wr = contiguous(be, w[0]) if weight else xr
        mean, rstd = contiguous(be, mean), contiguous(be, rstd)
        dx = be.empty(x.shape, x.dtype)
        plan = _Plan(be, m, n, x.dtype)
        acc = np.dtype(np.float64) if _wide(x.dtype) else _F32
        mod = be.module("rows")
        # rows per program: all of them on the interpreter (a program costs ~0.6 ms there);
        # on a GPU enough programs to fill it, each summing its share of the weight gradient
        per = max(plan.bm, -(-m // (1 if be.memory.interpret else 256)))
        per = -(-per // plan.bm) * plan.bm
        parts = -(-m // per)
        fused = affine and plan.one
        # the weight and bias gradients' partial sums in one array, summed by one launch
        pd = be.empty((2, max(parts, 1), n), acc) if affine else dx
        pdw, pdb = (pd.view((max(parts, 1), n), (n, 1), pd.offset + w * max(parts, 1) * n)
                    for w in (0, 1)) if affine else (dx, dx)
        if m:
            be.launch(mod.norm_backward_rows, (parts,), dx, pdw, pdb, gr, xr, wr, mean, rstd,
                      m, n, per, RMS=rms, HAS_W=weight, PARTIAL=fused, WIDE=_wide(x.dtype),
                      ONE=plan.one, **plan.meta)
        if affine and m and not fused:
            interp = be.memory.interpret
            bn = plan.bn if interp else min(plan.bn, 256)
            meta: dict[str, Any] = {"BLOCK_M": max(1, (1 << 14) // bn) if interp else 4,
                                    "BLOCK_N": bn}
            if not interp:
                meta["num_warps"] = 4
            be.launch(mod.norm_weight_grad_cols, (-(-n // bn), parts), pdw, pdb, gr, xr, mean,
                      rstd, m, n, per, RMS=rms, WIDE=_wide(x.dtype), **meta)
        if not affine:
            empty = be.empty((0,), x.dtype)
            return (dx, empty) if rms else (dx, empty, empty)
        dw, db = _weight_grads(be, pd, parts, n, x.dtype)
        return (dx, dw) if rms else (dx, dw, db)

    kernel.__name__ = "rms_norm_backward" if rms else "layer_norm_backward"
    return kernel


# -- cross entropy ----------------------------------------------------------------------------

_REDUCTIONS = {"mean": 0, "sum": 1, "none": 2}


def cross_entropy(be: TritonBackend, z: DeviceArray, t: DeviceArray, ignore_index: int,
                  label_smoothing: float, reduction: str,
                  float32_loss: bool = False) -> tuple[DeviceArray, ...]:
    m, c = z.shape
    zr = contiguous(be, z)
    tr = contiguous(be, t)
    sd = _stat(z.dtype)
    lse = be.empty((m,), sd)
    count = be.empty((), sd)
    none = reduction == "none"
    acc = np.dtype(np.float64) if _wide(z.dtype) else _F32
    ld = sd if float32_loss else z.dtype  # the loss's dtype
    rows = be.empty((m,), ld if none else acc)
    mod = be.module("rows")
    if m:
        plan = _Plan(be, m, c, z.dtype)
        be.launch(mod.cross_entropy_rows, (plan.programs,), rows, lse, zr, tr, m, c,
                  int(ignore_index), be.scalar(label_smoothing, acc), WIDE=_wide(z.dtype),
                  ONE=plan.one, **plan.meta)
    if none:
        return rows, lse, be.scalar(1, sd)
    out = be.empty((), ld)
    block = min(max(16, _pow2(m)), 1 << 14 if be.memory.interpret else 1024)
    be.launch(mod.cross_entropy_reduce, (1,), out, count, rows, tr, m, int(ignore_index),
              MEAN=reduction == "mean", BLOCK=block)
    return out, lse, count


def cross_entropy_backward(be: TritonBackend, g: DeviceArray, z: DeviceArray, t: DeviceArray,
                           lse: DeviceArray, count: DeviceArray, ignore_index: int,
                           label_smoothing: float, reduction: str) -> DeviceArray:
    m, c = z.shape
    zr = contiguous(be, z)
    out = be.empty((m, c), z.dtype)
    if m and c:
        plan = _Plan(be, m, c, z.dtype)
        be.launch(be.module("rows").cross_entropy_backward_rows, (plan.programs,), out, zr,
                  contiguous(be, t), contiguous(be, lse), contiguous(be, g), count, m, c,
                  int(ignore_index),
                  be.scalar(label_smoothing, np.float64 if _wide(z.dtype) else _F32),
                  REDUCTION=_REDUCTIONS[reduction], WIDE=_wide(z.dtype), **plan.meta)
    return out


KERNELS = {
    cops.softmax: _softmax(False),
    cops.log_softmax: _softmax(True),
    cops.softmax_backward: _softmax_backward(False),
    cops.log_softmax_backward: _softmax_backward(True),
    cops.layer_norm: _norm(False),
    cops.rms_norm: _norm(True),
    cops.layer_norm_backward: _norm_backward(False),
    cops.rms_norm_backward: _norm_backward(True),
    cops.cross_entropy: cross_entropy,
    cops.cross_entropy_backward: cross_entropy_backward,
}
