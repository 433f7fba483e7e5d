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


def _launch(be: TritonBackend, name: str, p: DeviceArray, g: DeviceArray, m: DeviceArray,
            v: DeviceArray, *extra: Any, lr: float, beta1: float, beta2: float, eps: float,
            weight_decay: float, decoupled: bool, maximize: bool,
            tail: tuple[Any, ...]) -> tuple[DeviceArray, DeviceArray, DeviceArray]:
    """Launch ``kernels/optim.py``'s ``name`` over the parameter: new ``p``, ``m``, ``v``."""
    n = p.size
    outs = tuple(be.empty(p.shape, p.dtype) for _ in range(3))
    if n:
        block = be.block_size(n, 1024)
        meta: dict[str, Any] = {"BLOCK": block}
        if not be.memory.interpret:
            meta["num_warps"] = 4
        be.launch(getattr(be.module("optim"), name), (-(-n // block),), *outs,
                  *(contiguous(be, a) for a in (p, g, m, v)), *extra, n, lr, beta1, beta2, eps,
                  weight_decay, 1.0 - lr * weight_decay, *tail,
                  HAS_WD=weight_decay != 0.0, DECOUPLED=decoupled, MAXIMIZE=maximize, **meta)
    return outs  # type: ignore[return-value]


def adam_step(be: TritonBackend, p: DeviceArray, g: DeviceArray, m: DeviceArray,
              v: DeviceArray, *, step_size: float, bias_correction2_sqrt: float,
              **options: Any) -> tuple[DeviceArray, DeviceArray, DeviceArray]:
    return _launch(be, "adam_step", p, g, m, v, tail=(step_size, bias_correction2_sqrt),
                   **options)


def adam_step_capturable(be: TritonBackend, p: DeviceArray, g: DeviceArray, m: DeviceArray,
                         v: DeviceArray, step: DeviceArray,
                         **options: Any) -> tuple[DeviceArray, DeviceArray, DeviceArray]:
    # the bias corrections are computed in the kernel from the step count and log(beta)
    logs = tuple(math.log(b) if b > 0 else -math.inf for b in (options["beta1"],
                                                                options["beta2"]))
    return _launch(be, "adam_step_capturable", p, g, m, v, step, tail=logs, **options)


KERNELS: dict[Any, Any] = {cops.adam_step: adam_step,
                           cops.adam_step_capturable: adam_step_capturable}
