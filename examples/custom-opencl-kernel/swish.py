"""A user-written OpenCL kernel as a new ember op, with its backward rule.

``swish(x) = x * sigmoid(x)`` runs as one hand-written OpenCL C kernel on ``opencl:N``; its
gradient ``g * s * (1 + x * (1 - s))`` is a second hand-written kernel, registered as an op of
its own so that the VJP rule can call it.  Nothing in ember or ember_opencl is modified: the ops
live in this file, the kernels go straight into the OpenCL backend's op table (a plugin
would return them from the ``ember_kernels_register`` hook instead), and the rule goes
into ember_autodiff's table.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyopencl as cl

import ember
from ember.backend import apply
from ember.ops import Op

__all__ = ["install", "swish"]

#: ``swish(x)``: float-only, one input, same dtype out.
swish_op = Op("swish", "custom", 1, dtypes="float")
#: ``swish_grad(x, g)``: the gradient of swish at ``x`` times ``g``.
swish_grad_op = Op("swish_grad", "custom", 2, dtypes="float", differentiable=False)

SOURCE = """
__kernel void swish(__global float* y, __global const float* x, long n)
{
    long i = get_global_id(0);
    if (i >= n) return;
    float v = x[i];
    y[i] = v / (1.0f + exp(-v));
}

__kernel void swish_grad(__global float* dx, __global const float* x,
                         __global const float* g, long n)
{
    long i = get_global_id(0);
    if (i >= n) return;
    float v = x[i];
    float s = 1.0f / (1.0f + exp(-v));
    dx[i] = g[i] * s * (1.0f + v * (1.0f - s));
}
"""


def opencl_kernels(backend: Any) -> dict[Op, Any]:
    """Kernels for both ops on one OpenCL backend (payloads are ``ember_opencl.CLArray``)."""
    from ember_opencl.strided import contiguous

    rt = backend.runtime
    program = cl.Program(rt.context, SOURCE).build()
    fwd, bwd = cl.Kernel(program, "swish"), cl.Kernel(program, "swish_grad")

    def launch(kernel: Any, out: Any, *inputs: Any) -> Any:
        n = out.size
        if n:
            group = 64  # a fixed work-group size: PoCL compiles once, not per tensor size
            args = [out.buffer]
            for x in inputs:
                args.append(x.buffer)
            # the kernels index from 0: bring views (offsets, strides) to dense buffers first
            kernel(rt.queue, (-(-n // group) * group,), (group,), *args, np.int64(n))
        return out

    def swish(x: Any) -> Any:
        if x.dtype != np.float32:
            raise TypeError("this example's kernel is float32 only")
        x = _dense(rt, contiguous(rt, x))
        return launch(fwd, rt.empty(x.shape, x.dtype), x)

    def swish_grad(x: Any, g: Any) -> Any:
        x, g = _dense(rt, contiguous(rt, x)), _dense(rt, contiguous(rt, g))
        return launch(bwd, rt.empty(x.shape, x.dtype), x, g)

    return {swish_op: swish, swish_grad_op: swish_grad}


def _dense(rt: Any, x: Any) -> Any:
    """A view starting at element 0 of its own buffer (copy when it starts elsewhere)."""
    from ember_opencl.strided import run_map

    return x if x.offset == 0 else run_map(rt, "a", [x])


def _swish_vjp(g: ember.Tensor, out: ember.Tensor, x: ember.Tensor) -> tuple[ember.Tensor]:
    # the rule runs on the inner device: apply() dispatches swish_grad to our kernel
    return (apply(swish_grad_op, x, g),)


def install(device: str | ember.Device) -> None:
    """Add the kernels to ``device``'s OpenCL backend and the VJP rule to ember_autodiff."""
    from ember_autodiff import RULES

    base = ember.device(device).base
    base.backend.kernels.update(opencl_kernels(base.backend))
    RULES[swish_op] = _swish_vjp


def swish(x: ember.Tensor) -> ember.Tensor:
    """``x * sigmoid(x)`` through the custom kernel."""
    return apply(swish_op, x)  # type: ignore[no-any-return]  # apply returns a Tensor here
