"""The OpenCL fusion compiler: one generated OpenCL C kernel per `FusedGroup`.

``fusion<opencl:N>`` asks this module (through the ``ember_fusion_compiler`` hook) to turn each
fused group into a kernel.  The generated kernel gives each *outer position* (a row, or an element
of a pure elementwise group) a work-item, or a work-group of `LANES` lanes when the position has
much work (long rows).  Everything else is a loop inside it:

- an elementwise node is one C statement in registers, written with the backend's own expression
  (`elementwise.unary_expr` and friends), so per-element results are ``opencl:N``'s;
- a reduction is a loop over its reduced elements that recomputes its elementwise prologue; at
  the outer level of a work-group kernel the lanes split that loop and combine in a local-memory
  tree (the backend's `reduction._spec` combine rules, Kahan sums per lane);
- only the group's outputs are stored.

Reductions over axis 0 (``cross`` nodes) get a kernel of their own whose outer positions are
their outputs; a 2-D matmul head runs on the backend's matmul and its epilogue is fused.  Shapes
enter kernels as arguments, so a source (and its build) is shared by every group of the same ops,
dtypes and broadcast pattern.  What the generator does not cover (16-bit floats, a matmul inside a
group) runs op by op through the backend's kernels: same results, unfused.  This module plans
and runs kernels; `fusion_source.py` renders their C from the group's description
(`ember.backend.FusedGroup`: shapes, dtypes, reduced axes, outputs).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from ember import ops
from ember.backend import DeviceCompiler
from ember.backend.schedule import outer_space

from .backend import OpenCLBackend
from .fusion_source import LANES, KernelSource
from .runtime import CLArray, Runtime

if TYPE_CHECKING:
    from ember import DType
    from ember.backend import FusedGroup
    from ember.ops import Op

__all__ = ["OpenCLFusionCompiler", "register_backend"]

#: outer positions with at least this much work (elements per row) get a work-group each
TREE_MIN = 64
#: dtypes the generated kernels are tested for; others (16-bit floats) are refused
SUPPORTED = frozenset({"float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                       "bool"})

class OpenCLFusionCompiler(DeviceCompiler[OpenCLBackend]):
    """Compiles `FusedGroup` s into generated OpenCL C for one ``opencl`` device
    (`DeviceCompiler` decides which groups).

    Parameters
    ----------
    kernels : the backend's op table (matmul heads, small groups and fallbacks run its kernels).
    backend : the device's backend; without one every group runs op by op.
    min_nodes : groups with fewer nodes run the backend's own kernel (a lone op gains nothing
        from a generated kernel, and reusing the backend's programs saves builds);
        ``fusion<opencl:0,min_nodes=1>`` generates kernels for every group.

    Examples
    --------
    >>> import ember, ember_fusion
    >>> x = ember.arange(4.0, device="fusion<opencl:0>")
    >>> ((x * 2 + 1).relu() - 1).tolist()
    [0.0, 2.0, 4.0, 6.0]
    """

    BACKENDS: ClassVar[weakref.WeakSet[Any]] = weakref.WeakSet()

    def fusible(self, op: Op, dtype: DType) -> bool:
        # Fusion asks only of the ops it records (elementwise, cast, reductions, matmul)
        if dtype.name not in SUPPORTED or op not in self.kernels:
            return False
        return op is not ops.linalg.matmul or dtype.name in ("float32", "float64")

    def covers(self, group: FusedGroup) -> bool:
        return _generated_ok(group)

    def generate(self, group: FusedGroup) -> Callable[[Sequence[Any]], list[Any]]:
        assert self.backend is not None
        return _FusedKernel(group, self.backend.runtime)


register_backend = OpenCLFusionCompiler.register_backend


def _generated_ok(group: FusedGroup) -> bool:
    """Whether the generator covers every node and dtype of ``group``: a matmul only as the
    head, no 16-bit floats."""
    if any(d.name not in SUPPORTED for _, d in group.inputs):
        return False
    return all(n.dtype.name in SUPPORTED and (n.kind != "matmul" or j == 0)
               for j, n in enumerate(group.nodes))


# -- planning and running a group ------------------------------------------------------------

def _plan(g: FusedGroup, targets: Sequence[int]) -> tuple[tuple[int, ...], int]:
    """The outer space of the kernel computing ``targets`` (`outer_space`) and its lanes per
    position: positions with much work (long rows) get a work-group of `LANES` lanes."""
    outer, work = outer_space(g, targets)
    return outer, (LANES if work >= TREE_MIN else 1)


class _Launch:
    """One generated kernel: which nodes it stores, its inputs and its size arguments."""

    def __init__(self, g: FusedGroup, targets: Sequence[int], outer: tuple[int, ...],
                 lanes: int, rt: Runtime) -> None:
        src = KernelSource(g, targets, outer, lanes)
        self.source = src.build()
        self.kernel = rt.kernel(self.source, "fused")
        self.targets = list(targets)
        self.outs = [(g.shape(t), g.numpy_dtype(t)) for t in targets]
        self.inputs = sorted(src.inputs.items())
        self.values = src.values
        npos = math.prod(outer)
        self.gsize = npos * LANES if lanes > 1 else -(-npos // LANES) * LANES

    def run(self, rt: Runtime, xs: Sequence[CLArray], vals: dict[int, CLArray]) -> None:
        outs = [rt.empty(s, d) for s, d in self.outs]
        args: list[Any] = [o.buffer for o in outs]
        for k, axes in self.inputs:
            x = xs[k]
            args += [x.buffer, np.int64(x.offset), *(np.int64(x.strides[d]) for d in axes)]
        rt.launch(self.kernel, (self.gsize,), (LANES,), *args, *self.values)
        vals.update(zip(self.targets, outs, strict=True))


class _FusedKernel:
    """A compiled group without a head: the main kernel, one kernel per reduction over axis 0."""

    def __init__(self, g: FusedGroup, rt: Runtime) -> None:
        self.rt = rt
        self.outputs = g.outputs
        main = [i for i in g.outputs if i not in g.cross]
        self.launches: list[_Launch] = []
        if main:
            outer, lanes = _plan(g, main)
            self.launches.append(_Launch(g, main, outer, lanes, rt))
        for c in sorted(g.cross):
            if c in g.outputs:
                shape = g.nodes[c].shape
                work = math.prod(g.shape(g.nodes[c].args[0])) // max(1, math.prod(shape))
                lanes = LANES if work >= TREE_MIN and math.prod(shape) < 2 * LANES else 1
                self.launches.append(_Launch(g, [c], shape, lanes, rt))
        self.source = "\n".join(launch.source for launch in self.launches)

    def __call__(self, xs: Sequence[Any]) -> list[Any]:
        vals: dict[int, CLArray] = {}
        for launch in self.launches:
            launch.run(self.rt, xs, vals)
        return [vals[i] for i in self.outputs]
