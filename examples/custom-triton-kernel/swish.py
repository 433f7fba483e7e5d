"""A user-written Triton kernel as a new ember op, with its backward rule.

``swish(x) = x * sigmoid(x)`` runs as one hand-written Triton kernel on any Triton device
(``cuda:N``, ``rocm:N``, ``triton-interpret``); its gradient ``g * s * (1 + x * (1 - s))`` is a
second kernel, registered as an op of its own so that the VJP rule can call it.  Nothing in
ember or ember_triton is modified: the ops live here, the kernels go into the backend's op
table (a plugin would return them from the ``ember_kernels_register`` hook instead), and the
rule goes into ember_autodiff's table.
"""

from __future__ import annotations

from typing import Any

import ember
from ember.backend import apply
from ember.ops import Op

__all__ = ["install", "swish"]

#: ``triton_swish(x)``: float-only, one input, same dtype out.
swish_op = Op("triton_swish", "custom", 1, dtypes="float")
#: ``triton_swish_grad(x, g)``: the gradient of swish at ``x`` times ``g``.
swish_grad_op = Op("triton_swish_grad", "custom", 2, dtypes="float", differentiable=False)


def triton_kernels(backend: Any) -> dict[Op, Any]:
    """Kernels for both ops on one `ember_triton.TritonBackend` (payloads: ``DeviceArray``)."""
    import swish_kernels as k  # after the device exists (see swish_kernels' docstring)

    def launch(kernel: Any, *inputs: Any) -> Any:
        # the kernels index from 0 with unit stride: bring views to dense arrays first
        dense = [backend.contiguous(x) for x in inputs]
        out = backend.empty(dense[0].shape, dense[0].dtype)
        n = out.size
        if n:
            block = backend.block_size(n)
            backend.launch(kernel, (-(-n // block),), out, *dense, n, BLOCK=block)
        return out

    return {swish_op: lambda x: launch(k.swish_fwd, x),
            swish_grad_op: lambda x, g: launch(k.swish_bwd, x, g)}


def _swish_vjp(g: ember.Tensor, out: ember.Tensor, x: ember.Tensor) -> tuple[ember.Tensor]:
    # the rule runs on the inner device: apply() dispatches swish_grad to our kernel
    return (apply(swish_grad_op, x, g),)


def install(device: str | ember.Device) -> None:
    """Add the kernels to ``device``'s Triton backend and the VJP rule to ember_autodiff."""
    base = ember.device(device).base
    base.backend.kernels.update(triton_kernels(base.backend))
    try:
        from ember_autodiff import RULES
    except ImportError:  # no autodiff installed: forward only
        return
    RULES[swish_op] = _swish_vjp


def swish(x: ember.Tensor) -> ember.Tensor:
    """``x * sigmoid(x)`` through the custom kernel."""
    return apply(swish_op, x)  # type: ignore[no-any-return]  # apply returns a Tensor here
