"""The WebGPU fusion compiler: one generated WGSL kernel per elementwise `FusedGroup`.

``fusion<wgpu:N>`` asks this module (through the ``ember_fusion_compiler`` hook) to turn each
group the partitioner cut into a kernel.  A group whose nodes are all elementwise (ops of the
kernel IR, ``clamp``, ``cast``) over one shape becomes one `strided.map_into` kernel: each
node is its IR definition rendered to WGSL over the values of its arguments (`render`, as the
eager kernels render them, so fused results are ``wgpu:N``'s), inputs are read through their
strides and broadcasts, and only the group's outputs are stored (16-bit float intermediates are
rounded as an eager op would store them).  A 2-D matmul head runs on the backend's matmul and
its elementwise epilogue is fused (`HeadFirst`).  A group with reductions (a softmax, a mean of
squares, a layer norm) is one kernel per outer position (`fusion_reduce`: each row a work-group
whose lanes share the reduction loops, prologues recomputed in registers); what neither
generator covers runs op by op through the backend's kernels: same results, unfused.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ember import ops
from ember.backend import DeviceCompiler, ir

from .backend import WgpuBackend
from .elementwise import cast_body
from .fusion_reduce import compile_rows, max_buffers
from .render import render
from .runtime import Runtime, WGArray
from .strided import map_into

if TYPE_CHECKING:
    from ember import DType
    from ember.backend import FusedGroup
    from ember.ops import Op

__all__ = ["WgpuFusionCompiler", "register_backend"]

class WgpuFusionCompiler(DeviceCompiler[WgpuBackend]):
    """Compiles `FusedGroup` s into generated WGSL for one ``wgpu`` device (`DeviceCompiler`
    decides which groups).

    Parameters
    ----------
    kernels : the backend's op table (matmul heads, reductions and small groups run its
        kernels).
    backend : the device's backend; without one every group runs op by op.
    min_nodes : groups with fewer nodes run the backend's own kernel (``fusion<wgpu:0,
        min_nodes=1>`` generates kernels for every group).
    """

    BACKENDS: ClassVar[weakref.WeakSet[Any]] = weakref.WeakSet()

    def fusible(self, op: Op, dtype: DType) -> bool:
        if op not in self.kernels:
            return False
        return self.backend is None or self.backend.supports(dtype)

    def generate(self, group: FusedGroup) -> Callable[[Sequence[Any]], list[Any]] | None:
        assert self.backend is not None
        return _compile(group, self.backend.runtime)


register_backend = WgpuFusionCompiler.register_backend


def _compile(group: FusedGroup, rt: Runtime) -> Callable[[Sequence[Any]], list[Any]] | None:
    """One generated kernel for an elementwise group, one per launch for a group with
    reductions; None where neither generator covers the group."""
    if group.flat:
        return _compile_flat(group, rt)
    return compile_rows(group, rt, _node_body)


def _node_body(group: FusedGroup, j: int) -> ir.Value | None:
    """Node ``j``'s IR over inputs ``0..`` (its arguments), or None if it is no IR op."""
    node = group.nodes[j]
    dts = [group.numpy_dtype(a).name for a in node.args]
    if node.op is ops.creation.cast:
        return cast_body(np.dtype(dts[0]), group.numpy_dtype(j))
    if node.op is ops.elementwise.clamp:
        b = ir.Builder()
        x = v = b.input(0, dts[0])
        ct = ir.compute_dtype(dts[0])
        lo, hi = node.params.get("min"), node.params.get("max")
        if lo is not None:
            s = b.const(np.asarray(lo).astype(dts[0])[()], ct)
            v = ir.where(x.lt(s), s, v)
        if hi is not None:
            s = b.const(np.asarray(hi).astype(dts[0])[()], ct)
            v = ir.where(x.gt(s), s, v)
        return v
    if node.op.group == "elementwise" and ir.defined(node.op.name):
        return ir.expand(node.op.name, dts)
    return None


class _FlatKernel:
    """A group of elementwise nodes over one shape as one WGSL kernel."""

    def __init__(self, group: FusedGroup, rt: Runtime, lines: list[str],
                 inputs: list[int]) -> None:
        self.rt = rt
        self.lines = lines
        self.inputs = inputs
        self.names = [f"x{k}" for k in inputs]
        self.outs = [(f"v{j}", group.shape(j), group.numpy_dtype(j)) for j in group.outputs]
        self.source = "\n".join(lines)

    def __call__(self, xs: Sequence[Any]) -> list[Any]:
        outs: list[WGArray] = [self.rt.empty(s, d) for _, s, d in self.outs]
        map_into(self.rt, self.lines, [(name, o) for (name, _, _), o in
                                       zip(self.outs, outs, strict=True)],
                 [xs[k] for k in self.inputs], self.names)
        return list(outs)


def _compile_flat(group: FusedGroup, rt: Runtime) -> _FlatKernel | None:
    if not group.flat:
        return None
    inputs = sorted(group.used_inputs)
    if len(inputs) + len(group.outputs) + 1 > max_buffers(rt):
        return None  # more storage buffers than one kernel may bind: op by op
    lines: list[str] = []
    for j, node in enumerate(group.nodes):
        body = _node_body(group, j)
        if body is None:
            return None
        names = [f"v{a}" if a >= 0 else f"x{-1 - a}" for a in node.args]
        r = render(body, names, prefix=f"n{j}_")
        lines += r.lines
        value = r.expr
        if node.dtype.name == "float16":  # rounded as an eager kernel would store it
            value = f"f32(f16({value}))"
        elif node.dtype.name == "bfloat16":
            value = f"bf16_({value})"
        lines.append(f"let v{j} = {value};")
    return _FlatKernel(group, rt, lines, inputs)
