"""Fused optimizer updates (`ember.ops.composite.adam_step`): one kernel per parameter that
reads the parameter, its gradient and both moments once and writes the three new values."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ember.ops import composite as cops

from ._array import DeviceArray
from ._codegen import contiguous

if TYPE_CHECKING:
    from .backend import TritonBackend

__all__ = ["KERNELS"]


def adam_step(be: TritonBackend, p: DeviceArray, g: DeviceArray, m: DeviceArray,
              v: DeviceArray, *, lr: float, beta1: float, beta2: float, eps: float,
              weight_decay: float, decoupled: bool, maximize: bool, step_size: float,
              bias_correction2_sqrt: float) -> tuple[DeviceArray, DeviceArray, DeviceArray]:
    n = p.size
    outs = tuple(be.empty(p.shape, p.dtype) for _ in range(3))
    if n:
        block = be.block_size(n, 1024)
        meta: dict[str, Any] = {"BLOCK": block}
        if not be.memory.interpret:
            meta["num_warps"] = 4
        be.launch(be.module("optim").adam_step, (-(-n // block),), *outs,
                  *(contiguous(be, a) for a in (p, g, m, v)), n, lr, beta1, beta2, eps,
                  weight_decay, 1.0 - lr * weight_decay, step_size, bias_correction2_sqrt,
                  HAS_WD=weight_decay != 0.0, DECOUPLED=decoupled, MAXIMIZE=maximize, **meta)
    return outs  # type: ignore[return-value]


def adam_step_capturable(be: TritonBackend, p: DeviceArray, g: DeviceArray, m: DeviceArray,
                         v: DeviceArray, step: DeviceArray, *, lr: float, beta1: float,
                         beta2: float, eps: float, weight_decay: float, decoupled: bool,
                         maximize: bool) -> tuple[DeviceArray, DeviceArray, DeviceArray]:
    n = p.size
    outs = tuple(be.empty(p.shape, p.dtype) for _ in range(3))
    if n:
        block = be.block_size(n, 1024)
        meta: dict[str, Any] = {"BLOCK": block}
        if not be.memory.interpret:
            meta["num_warps"] = 4
        log_b1 = math.log(beta1) if beta1 > 0 else -math.inf
        log_b2 = math.log(beta2) if beta2 > 0 else -math.inf
        be.launch(be.module("optim").adam_step_capturable, (-(-n // block),), *outs,
                  *(contiguous(be, a) for a in (p, g, m, v)), step, n, lr, beta1, beta2, eps,
                  weight_decay, 1.0 - lr * weight_decay, log_b1, log_b2,
                  HAS_WD=weight_decay != 0.0, DECOUPLED=decoupled, MAXIMIZE=maximize, **meta)
    return outs  # type: ignore[return-value]


KERNELS: dict[Any, Any] = {cops.adam_step: adam_step,
                           cops.adam_step_capturable: adam_step_capturable}
