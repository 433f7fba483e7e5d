"""What a backend's fusion compiler must provide.

A backend plugin offers a compiler through the ``ember_fusion_compiler(backend)`` hook.  The
compiler decides which ops it can fuse (``fusible``) and turns one `FusedGroup` (the
description of a group, defined in core's plugin contract, `ember.backend.fused`) into a
kernel: a callable taking the payloads of the group's inputs and returning the payloads of its
outputs.  Fusion caches kernels by ``group.key``, so ``compile`` runs once per distinct group.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ember.backend import FusedGroup, FusedKernel, GroupNode

if TYPE_CHECKING:
    from ember import DType
    from ember.backend import Device
    from ember.ops import Op

__all__ = ["FusedGroup", "FusedKernel", "FusionCompiler", "GroupNode", "ReferenceCompiler"]


class FusionCompiler(Protocol):
    """The interface of a backend's fusion compiler (returned by ``ember_fusion_compiler``)."""

    def fusible(self, op: Op, dtype: DType) -> bool:
        """Whether ``op`` producing ``dtype`` may be put in a fused group on this backend."""
        ...

    def compile(self, group: FusedGroup) -> FusedKernel:
        """A kernel computing ``group``'s outputs from its inputs' payloads."""
        ...


class ReferenceCompiler:
    """Runs a group op by op through the inner device's own dispatch: no fusion, same results.

    Used for backends that offer no compiler, so Fusion still works (lazily) on them.
    """

    def __init__(self, device: Device) -> None:
        self.device = device

    def fusible(self, op: Op, dtype: DType) -> bool:
        return op in self.device.backend.kernels

    def configure(self, kernels: Any = None, **options: Any) -> ReferenceCompiler:
        if options:
            raise ValueError(f"the reference fusion compiler takes no options, got {options}")
        return self

    def compile(self, group: FusedGroup) -> FusedKernel:
        device = self.device
        dispatch = device.dispatch
        make = device.tensor_type.from_payload
        in_dtypes = [d for _, d in group.inputs]
        steps = [(n.op, n.args, n.params,
                  [group.nodes[a].dtype if a >= 0 else in_dtypes[-1 - a] for a in n.args])
                 for n in group.nodes]
        outputs = group.outputs

        def kernel(inputs: Sequence[Any]) -> list[Any]:
            vals: list[Any] = []
            for op, args, params, dtypes in steps:
                ts = [make(vals[a] if a >= 0 else inputs[-1 - a], device, d)
                      for a, d in zip(args, dtypes, strict=True)]
                vals.append(dispatch(op, ts, params).payload)
            return [vals[i] for i in outputs]

        return kernel
