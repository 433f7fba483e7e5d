"""The fused-group protocol: what the Fusion decorator hands a backend's fusion compiler.

A `FusedGroup` is the one backend-independent description of a fused kernel.  The
partitioner (``ember_fusion``) builds it once per group; each backend's fusion compiler
renders it in its language (numpy calls on blocks, OpenCL C, Triton) and never analyses the
recorded graph itself.  It holds:

- ``nodes``: the ops in an order where arguments come first: elementwise ops (their semantics
  are their kernel-IR definitions, `ember.backend.ir`), ``cast``, reductions, and a 2-D matmul
  as node 0 (the *head*); ``args`` index nodes (``>= 0``) or inputs (``-1 - k`` is input k);
- ``inputs``: the shape and dtype of each input (a backend reads strides and offsets off the
  payloads it is called with, so one compiled kernel serves every layout it supports);
- ``outputs``: the nodes whose values leave the kernel, in the order the kernel returns them;
- the row structure: ``mode`` ``"rows"`` (every node's axis 0 is the shared extent ``rows``,
  so the group may run a block of rows at a time; ``cross`` nodes reduce over that axis and
  are complete only after the last block) or ``"whole"``;

and, derived from these once (cached on first use), what every renderer needs: the shape and
dtype of each value (`shape`, `dtype`, `numpy_dtype`), each node's `kind`, the inputs some node
reads (`used_inputs`), each output's slot (`slots`), each node's last use (`last_use`), the
reduced axes and counts of a reduction (`reduced_dims`, `reduced_count`, `kept_count`),
whether the group is one elementwise shape (`flat`), and the group without its matmul head
(`without_head`).  Two runners every compiler shares: `op_by_op` (the group unfused, through
the backend's kernels) and `HeadFirst` (the head by the backend's matmul, then the kernel
compiled for the rest).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Self, TypeVar

from .._host import numpy_dtype as _numpy_dtype

if TYPE_CHECKING:
    import numpy as np

    from .._dtype import DType
    from ..ops import Op

__all__ = ["DeviceCompiler", "FusedGroup", "FusedKernel", "GroupNode", "HeadFirst", "op_by_op"]

Shape = tuple[int, ...]
#: a compiled group: ``kernel(input_payloads) -> output_payloads``
FusedKernel = Callable[[Sequence[Any]], list[Any]]


@dataclass(frozen=True)
class GroupNode:
    """One op of a group.  ``args`` index the group's nodes (``>= 0``) or its inputs
    (``-1 - k`` is input ``k``)."""

    op: Op
    params: dict[str, Any] = field(hash=False, compare=False)
    params_key: Any
    dtype: DType
    shape: Shape
    args: tuple[int, ...]

    @property
    def kind(self) -> str:
        """``"reduction"``, ``"matmul"`` or ``"elementwise"`` (elementwise ops and ``cast``)."""
        group = self.op.group
        if group == "reduction":
            return "reduction"
        return "matmul" if group == "linalg" else "elementwise"


@dataclass(frozen=True)
class FusedGroup:
    """A connected piece of the recorded graph that one kernel computes (see the module
    docstring)."""

    nodes: tuple[GroupNode, ...]
    inputs: tuple[tuple[Shape, DType], ...]
    outputs: tuple[int, ...]
    mode: str
    rows: int
    cross: frozenset[int]

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.nodes, self.inputs, self.outputs, self.mode, self.rows, self.cross)

    def describe(self) -> str:
        names = "+".join(n.op.name for n in self.nodes)
        return f"{self.mode}[{names}]"

    # -- values: a node (``r >= 0``) or an input (``r < 0``) ------------------------------------

    def shape(self, r: int) -> Shape:
        return self.nodes[r].shape if r >= 0 else self.inputs[-1 - r][0]

    def dtype(self, r: int) -> DType:
        return self.nodes[r].dtype if r >= 0 else self.inputs[-1 - r][1]

    def numpy_dtype(self, r: int) -> np.dtype[Any]:
        return _numpy_dtype(self.dtype(r))

    def arg_dtypes(self, j: int) -> list[np.dtype[Any]]:
        """The numpy dtypes of node ``j``'s arguments."""
        return [self.numpy_dtype(a) for a in self.nodes[j].args]

    # -- facts derived once --------------------------------------------------------------------

    @cached_property
    def head(self) -> bool:
        """Whether node 0 is a matmul (its value feeds the rest of the group)."""
        return self.nodes[0].kind == "matmul"

    @cached_property
    def flat(self) -> bool:
        """Whether every node is elementwise and of one shape (one loop over the elements)."""
        shape = self.nodes[0].shape
        return all(n.kind == "elementwise" and n.shape == shape for n in self.nodes)

    @cached_property
    def used_inputs(self) -> frozenset[int]:
        """The inputs some node reads (a group split off its head keeps unused ones)."""
        return frozenset(-1 - a for n in self.nodes for a in n.args if a < 0)

    @cached_property
    def slots(self) -> dict[int, int]:
        """``{node: position in outputs}``."""
        return {j: m for m, j in enumerate(self.outputs)}

    @cached_property
    def last_use(self) -> tuple[int, ...]:
        """The last node reading each node (``-1``: none in the group)."""
        last = [-1] * len(self.nodes)
        for j, n in enumerate(self.nodes):
            for a in n.args:
                if a >= 0:
                    last[a] = j
        return tuple(last)

    def reduced_dims(self, j: int) -> tuple[int, ...]:
        """The axes of its argument that reduction node ``j`` reduces."""
        n = self.nodes[j]
        if "dims" in n.params:
            return tuple(n.params["dims"])
        dim = n.params["dim"]  # argmax, argmin
        return tuple(range(len(self.shape(n.args[0])))) if dim is None else (dim,)

    def reduced_count(self, j: int) -> int:
        """How many elements reduction node ``j`` combines into each result."""
        src = self.shape(self.nodes[j].args[0])
        return math.prod(src[d] for d in self.reduced_dims(j))

    def kept_count(self, j: int) -> int:
        """How many results reduction node ``j`` has (its argument's kept extents)."""
        src = self.shape(self.nodes[j].args[0])
        dims = self.reduced_dims(j)
        return math.prod(e for d, e in enumerate(src) if d not in dims)

    def without_head(self) -> FusedGroup:
        """The group after node 0 (its head): node 0's value becomes the last input (nodes
        renumbered, the other outputs kept in order)."""
        k = len(self.inputs)

        def ref(a: int) -> int:
            return -1 - k if a == 0 else (a - 1 if a > 0 else a)

        head = self.nodes[0]
        nodes = tuple(GroupNode(n.op, n.params, n.params_key, n.dtype, n.shape,
                                tuple(ref(a) for a in n.args)) for n in self.nodes[1:])
        return FusedGroup(nodes, (*self.inputs, (head.shape, head.dtype)),
                          tuple(j - 1 for j in self.outputs if j > 0), self.mode, self.rows,
                          frozenset(j - 1 for j in self.cross if j > 0))


def op_by_op(group: FusedGroup, kernels: dict[Op, Callable[..., Any]]) -> FusedKernel:
    """``group`` run unfused: each node by ``kernels[op](*args, **params)`` on payloads (what
    a compiler does with a group it does not generate a kernel for)."""
    steps = [(kernels[n.op], n.args, n.params) for n in group.nodes]
    outputs = group.outputs

    def kernel(inputs: Sequence[Any]) -> list[Any]:
        vals: list[Any] = []
        for fn, args, params in steps:
            vals.append(fn(*[vals[a] if a >= 0 else inputs[-1 - a] for a in args], **params))
        return [vals[j] for j in outputs]

    return kernel


class HeadFirst:
    """A group whose node 0 runs first, by ``head`` (the backend's kernel of its op: a matmul
    head), and then ``rest`` (the kernel compiled for ``group.without_head()``, None when
    nothing after node 0 leaves the kernel) on the inputs and node 0's value."""

    def __init__(self, group: FusedGroup, head: Callable[..., Any],
                 rest: FusedKernel | None) -> None:
        self.head = head
        self.rest = rest
        self.args = [-1 - a for a in group.nodes[0].args]
        self.params = group.nodes[0].params
        self.outputs = group.outputs
        #: the generated source of the rest, where its compiler keeps one
        self.source: str = getattr(rest, "source", "")

    def __call__(self, inputs: Sequence[Any]) -> list[Any]:
        h = self.head(*[inputs[k] for k in self.args], **self.params)
        got = iter(self.rest([*inputs, h]) if self.rest is not None else [])
        return [h if j == 0 else next(got) for j in self.outputs]


B = TypeVar("B")


class DeviceCompiler(Generic[B]):
    """What every compiler generating kernels for one device of a backend family shares: the
    backend's kernel table, the device's backend, ``min_nodes``, and when a group is generated.

    The ``ember_fusion_compiler`` hook names only the family, so each backend registers itself
    (`register_backend`) and `configure` finds the one owning a kernel table.  A group with
    fewer than ``min_nodes`` nodes (a lone op gains nothing from a generated kernel, and the
    backend's own is built already), or one the subclass does not cover (``covers``), runs op by
    op through the table; a matmul head runs on the backend's matmul and its epilogue is
    generated (`HeadFirst`); ``generate`` returns the kernel, or None to run the group op by
    op.  ``fusion<family:0,min_nodes=1>`` generates a kernel for every group."""

    #: the family's registered backends (a subclass gives its own set)
    BACKENDS: ClassVar[weakref.WeakSet[Any]]

    def __init__(self, kernels: dict[Op, Callable[..., Any]] | None = None,
                 backend: B | None = None, min_nodes: int = 2) -> None:
        self.kernels = kernels if kernels is not None else {}
        self.backend = backend
        self.min_nodes = int(min_nodes)

    @classmethod
    def register_backend(cls, backend: B) -> None:
        """Remember ``backend`` so that a compiler configured with its kernel table finds it."""
        cls.BACKENDS.add(backend)

    def configure(self, kernels: dict[Op, Callable[..., Any]] | None = None,
                  min_nodes: int | None = None) -> Self:
        """The compiler for the backend owning ``kernels``."""
        table = kernels if kernels is not None else self.kernels
        owner = next((b for b in list(self.BACKENDS) if b.kernels is table), None)
        return type(self)(table, owner or self.backend,
                          self.min_nodes if min_nodes is None else min_nodes)

    def covers(self, group: FusedGroup) -> bool:
        """Whether the generator may take ``group`` at all (its nodes' ops and dtypes)."""
        return True

    def generate(self, group: FusedGroup) -> FusedKernel | None:
        """The generated kernel of ``group`` (no head), or None where it runs op by op."""
        raise NotImplementedError

    def compile(self, group: FusedGroup) -> FusedKernel:
        if self.backend is None or len(group.nodes) < self.min_nodes or not self.covers(group):
            return op_by_op(group, self.kernels)
        if group.head:  # the backend's matmul, then the epilogue
            from .. import ops

            rest = group.without_head()
            tail = self.generate(rest) if rest.outputs else None
            if rest.outputs and tail is None:
                return op_by_op(group, self.kernels)
            return HeadFirst(group, self.kernels[ops.linalg.matmul], tail)
        return self.generate(group) or op_by_op(group, self.kernels)
