"""The Triton fusion compiler: one generated Triton kernel per `FusedGroup`.

Offered to ``fusion<cuda:N>``, ``fusion<rocm:N>`` and ``fusion<triton-interpret>`` through the
``ember_fusion_compiler`` hook (``ember_triton.plugin``).  How a group becomes a kernel:

- every node elementwise with one shape: a ``flat`` kernel over the elements (inputs may be
  strided or broadcast views; their axes are collapsed as the unfused kernels do);
- values that fit a block of rows (``limit`` elements per value): a ``block`` kernel, one
  program per ``BM`` rows, reductions over inner axes in registers; reductions over axis 0
  (``cross`` nodes) store a partial per program, finished by a small second kernel when there
  is more than one program; a 2-D matmul head is a ``tl.dot`` loop over K whose epilogue is
  the rest of the group;
- rank-2 groups with longer rows: a ``loop`` kernel, one sweep over each row per level of
  reductions (row softmax: three sweeps, one kernel);
- anything else runs its head node with the backend's own kernel and compiles the rest again,
  or, as a last resort, runs op by op through the backend's kernels (counted in
  ``unfused_groups``).

Per-element code is the backend's own (`ember_triton.elementwise.Expression`), so fused values
are the unfused ones (up to contraction of multiply-adds by the GPU compiler).  What a group
computes (shapes, dtypes, reduced axes, inputs read, outputs) is read off its description,
`ember.backend.FusedGroup`; this module and `_fusion_block` only render it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from ember import ops
from ember.backend import HeadFirst, numpy_dtype, op_by_op

from ._array import DeviceArray
from ._codegen import broadcast_strides, collapse, coordinates
from ._fusion_block import BlockGen, node_expression
from ._fusion_source import Functions, acc_dtype, combine_source, conv_load, conv_store
from .reduction import SECOND, reduce_matrix

if TYPE_CHECKING:
    from ember import DType
    from ember.backend import FusedGroup
    from ember.ops import Op

    from .backend import TritonBackend

__all__ = ["TritonFusionCompiler"]

RD = ops.reduction

#: groups of at most this many ops run as the backend's own kernels: fusing two ops saves one
#: launch, which recording them and running the flush costs again on the host
PLAIN_NODES = 2


class TritonFusionCompiler:
    """Compiles fused groups to Triton kernels for a `TritonBackend`.

    Parameters
    ----------
    backend : the backend whose kernels and memory the fused kernels use.
    block : elements per program of flat kernels (default: 65,536 on the interpreter, 2,048
        on GPUs).
    limit : most elements of one value's block in a program of a block kernel.
    warps : ``num_warps`` of flat kernels on GPUs.
    plain : groups of at most this many ops run as the backend's own kernels, unfused
        (default `PLAIN_NODES`, 2).

    Examples
    --------
    >>> import ember, ember_fusion
    >>> d = ember.device("fusion<triton-interpret>")
    >>> x = ember.arange(4.0, device=d)
    >>> ((x * 2 + 1).relu() - 1).tolist()
    [0.0, 2.0, 4.0, 6.0]
    """

    def __init__(self, backend: TritonBackend | None = None, block: int | None = None,
                 limit: int | None = None, warps: int | None = None,
                 plain: int | None = None) -> None:
        if plain is not None and plain < 1:
            raise ValueError(f"fusion: plain must be >= 1, got {plain}")
        self.backend = backend
        self.block = block
        self.limit = limit
        self.warps = warps
        #: Triton launches made by fused kernels, and groups that ran op by op
        self.launches = 0
        self.unfused_groups = 0
        #: a group of one op runs as the backend's own kernel: a generated one saves no
        #: launch, and the backend's is tuned (cuBLAS matmuls, split reductions) and launched
        #: along its recorded path; a group of two saves one launch, about what recording
        #: the two ops and the flush cost.  Fusion reads this: an op on computed inputs that a
        #: flush ran so runs eagerly from then on (recording it only cost host time).
        self.plain_nodes = plain or PLAIN_NODES

    def configure(self, kernels: dict[Op, Callable[..., Any]] | None = None,
                  block: int | None = None, limit: int | None = None,
                  warps: int | None = None, plain: int | None = None) -> TritonFusionCompiler:
        """A compiler for the backend whose op table is ``kernels``; options come from the
        device string (``fusion<cuda:0,block=4096>``)."""
        from .backend import TritonBackend

        backend = self.backend
        for fn in (kernels or {}).values():
            # the table's entries are functools.partial(kernel, backend): that names the backend
            owner = getattr(fn, "args", (None,))[:1]
            if owner and isinstance(owner[0], TritonBackend):
                backend = owner[0]
                break
        if backend is None:
            raise ValueError("the Triton fusion compiler needs a TritonBackend's kernel table")
        return TritonFusionCompiler(backend, block or self.block, limit or self.limit,
                                    warps or self.warps, plain)

    @property
    def be(self) -> TritonBackend:
        assert self.backend is not None, "configure() the compiler with a backend first"
        return self.backend

    def fusible(self, op: Op, dtype: DType) -> bool:
        # Fusion asks only of the ops it records; argmax/argmin run unfused
        if self.backend is not None and op not in self.backend.kernels:
            return False
        return op is not RD.argmax and op is not RD.argmin

    # -- compiling ---------------------------------------------------------------------------

    def compile(self, group: FusedGroup) -> Callable[[Sequence[Any]], list[Any]]:
        be = self.be
        interp = be.memory.interpret
        sizes = [math.prod(n.shape) for n in group.nodes] + [math.prod(s) for s, _ in group.inputs]
        if 0 in sizes or any(len(n.shape) > 4 for n in group.nodes):
            self.unfused_groups += 1
            return self._unfused(group)
        if len(group.nodes) <= self.plain_nodes:
            return self._unfused(group)
        if group.flat:
            return _FlatKernel(self, group)
        limit = self.limit or (1 << 14 if interp else 4096)
        if group.head:
            # the tile of a program is BM x pad(N) (x BK for float64's multiply-add path): keep
            # it within what a GPU program holds in registers
            f64 = group.nodes[0].dtype.name == "float64"
            widest = 1024 if interp else (64 if f64 else 256)
            ok_head = (group.mode == "rows" and group.rows > 1
                       and 1 < group.nodes[0].shape[1] <= widest
                       and group.nodes[0].dtype.name in ("float32", "float64"))
        else:
            ok_head = True
        if ok_head and not any(n.kind == "matmul" for n in group.nodes[1:]):
            gen = BlockGen(group, limit, interp)
            if gen.fits:
                return _BlockKernel(self, gen)
            if _loop_ok(gen):
                return _BlockKernel(self, BlockGen(group, limit, interp, loop=True))
        if len(group.nodes) > 1:
            return self._split_head(group)
        self.unfused_groups += 1
        return self._unfused(group)

    def _split_head(self, group: FusedGroup) -> Callable[[Sequence[Any]], list[Any]]:
        """Node 0 by the backend's own kernel, the rest compiled as a group of its own."""
        rest = group.without_head()
        run = HeadFirst(group, self.be.kernels[group.nodes[0].op],
                        self.compile(rest) if rest.outputs else None)

        def kernel(inputs: Sequence[Any]) -> list[Any]:
            self.launches += 1
            return run(inputs)

        return kernel

    def _unfused(self, group: FusedGroup) -> Callable[[Sequence[Any]], list[Any]]:
        """Op by op through the backend's kernels (one op; zero-size values, rank above 4)."""
        run = op_by_op(group, self.be.kernels)
        count = len(group.nodes)

        def kernel(inputs: Sequence[Any]) -> list[Any]:
            outs = run(inputs)
            self.launches += count
            return outs

        return kernel

    def jit(self, source: str, name: str) -> Any:
        """The jitted ``name`` of ``source``; identical sources are compiled once."""
        be = self.be
        return be.library.generated(("fusion", source), name, source, be.kernel_scope())

    def launch(self, kernel: Any, grid: tuple[int, ...], *args: Any, warps: int = 0,
               **meta: Any) -> None:
        be = self.be
        if warps and not be.memory.interpret:
            meta["num_warps"] = warps
        be.launch(kernel, grid, *args, **meta)
        self.launches += 1


def _loop_ok(gen: BlockGen) -> bool:
    g = gen.g
    if g.mode != "rows" or g.cross or gen.head:
        return False
    for j, n in enumerate(g.nodes):
        if len(gen.cshape(j)) > 2:
            return False
        for a in n.args:
            if len(gen.shape_of(a, len(gen.cshape(j)))) > 2:
                return False
        if n.kind == "reduction":
            a = n.args[0]
            cs = gen.shape_of(a, 2)
            if n.op is RD.var or tuple(n.params["dims"]) != (1,) or len(cs) != 2 or cs[1] <= 1:
                return False
    return True


class _BlockKernel:
    """Runs a `BlockGen` kernel (and the combine kernels of its cross nodes)."""

    def __init__(self, c: TritonFusionCompiler, gen: BlockGen) -> None:
        self.c = c
        g = gen.g
        self.source = gen.source()
        self.kernel = c.jit(self.source, "fused")
        be = c.be
        self.scalars = [be.scalar(v, d) for v, d in gen.scalars]
        self.outputs = [(g.nodes[j].shape, numpy_dtype(g.nodes[j].dtype)) for j in g.outputs]
        self.grid = (gen.programs,)
        self.meta: dict[str, Any] = {"BM": gen.bm}
        if gen.loop:
            self.meta["BK"] = gen.bk
        elems = gen.bm * (gen.bk if gen.loop else gen.inner)
        self.warps = 4 if elems <= 2048 else 8
        self.parts: list[tuple[int, tuple[int, int], np.dtype[Any], Any, int]] = []
        self.ops: dict[int, str] = {}
        if gen.programs > 1:
            for j in gen.cross:
                n = g.nodes[j]
                op = n.op.name
                q = g.kept_count(j)
                acc = acc_dtype(op, g.numpy_dtype(n.args[0]))
                comb = c.jit(combine_source(op, acc, numpy_dtype(n.dtype), g.reduced_count(j)),
                             "combine")
                self.ops[gen.outputs[j]] = op
                self.parts.append((gen.outputs[j], (gen.programs, q), acc, comb, q))

    def __call__(self, inputs: Sequence[Any]) -> list[Any]:
        c = self.c
        be = c.be
        outs = [be.empty(s, d) for s, d in self.outputs]
        parts = [be.empty(shape, acc) for _, shape, acc, _, _ in self.parts]
        strides = [st for x in inputs for st in x.strides]
        c.launch(self.kernel, self.grid, *outs, *parts, *inputs, *self.scalars, *strides,
                 PRECISION=be.matmul_precision, warps=self.warps, **self.meta)
        for (m, (p, q), acc, comb, _), part in zip(self.parts, parts, strict=True):
            if p > 64 and be.split_reductions:
                # many partials: a column reduction the eager kernel splits over the GPU,
                # then the combine kernel finishes (mean's division, the output's dtype)
                part = reduce_matrix(be, part, q, p, SECOND[self.ops[m]], acc, sm=1, walk=q)
                p = 1
            bq = be.block_size(q)
            c.launch(comb, (-(-q // bq),), outs[m], part, p, q, BQ=bq)
        return outs


class _FlatKernel:
    """Elementwise nodes of one shape: a 1-D grid over the elements.

    Inputs are strided views broadcast to the shape; their axes are collapsed at call time (as
    the unfused kernels do), and a source is generated per collapsed rank.
    """

    def __init__(self, c: TritonFusionCompiler, group: FusedGroup) -> None:
        self.c = c
        self.g = group
        self.shape = group.nodes[0].shape
        self.size = math.prod(self.shape)
        self.outputs = [numpy_dtype(group.nodes[j].dtype) for j in group.outputs]
        #: inputs of one element are loaded once, not per element; unused ones (left by a
        #: split head) not at all
        self.used = used = group.used_inputs
        self.single = [math.prod(s) == 1 or k not in used
                       for k, (s, _) in enumerate(group.inputs)]
        self.kernels: dict[int, tuple[Any, list[DeviceArray]]] = {}
        be = c.be
        if be.memory.interpret:
            self.block = c.block or be.block_size(self.size)
        else:
            self.block = c.block or (2048 if self.size >= 1 << 20 else be.block_size(self.size))
        self.warps = c.warps or (8 if self.block >= 2048 else 4)

    def source(self, rank: int) -> tuple[str, list[tuple[Any, np.dtype[Any]]]]:
        g = self.g
        fns = Functions()
        nin = len(g.inputs)
        scalars: list[tuple[Any, np.dtype[Any]]] = []
        params = [f"out{m}" for m in range(len(g.outputs))] + [f"in{k}" for k in range(nin)]
        lines = ["    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
                 "    mask = offs < n"]
        if rank > 1:
            lines += coordinates(rank)
        for k in range(nin):
            if k not in self.used:
                continue
            if self.single[k]:
                # a block, as the unfused kernels load it (stride 0), never a 0-d scalar
                lines.append(f"    x{k} = tl.load(in{k} + offs * 0)")
            elif rank > 1:
                off = " + ".join(f"c{d} * A{k}_{d}" for d in range(rank))
                lines.append(f"    x{k} = tl.load(in{k} + {off}, mask=mask)")
            else:
                lines.append(f"    x{k} = tl.load(in{k} + offs * A{k}_0, mask=mask)")
        outputs = g.slots
        for j, n in enumerate(g.nodes):
            dts = g.arg_dtypes(j)
            e = node_expression(n, dts)
            args = [conv_load(f"v{a}" if a >= 0 else f"x{-1 - a}", d, e.widen)
                    for a, d in zip(n.args, dts, strict=True)]
            for value, dt in e.scalars:
                args.append(conv_load(f"tl.load(sc{len(scalars)})", dt, e.widen))
                scalars.append((value, dt))
            fn = fns.get(e.body, len(n.args), len(e.scalars))
            lines.append(f"    v{j} = {conv_store(fn + '(' + ', '.join(args) + ')', e.out)}")
            if j in outputs:
                lines.append(f"    tl.store(out{outputs[j]} + offs, v{j}, mask=mask)")
        params += [f"sc{i}" for i in range(len(scalars))] + ["n"]
        params += [f"S{d}" for d in range(1, rank)]
        params += [f"A{k}_{d}" for k in range(nin) if not self.single[k] for d in range(rank)]
        head = ["@triton.jit", f"def fused({', '.join(params)}, BLOCK: tl.constexpr):"]
        return fns.source() + "\n".join(head + lines) + "\n", scalars

    def __call__(self, inputs: Sequence[DeviceArray]) -> list[Any]:
        c = self.c
        be = c.be
        shape = self.shape
        strides = [broadcast_strides(x, shape)
                   for x, single in zip(inputs, self.single, strict=True) if not single]
        cshape, cstrides = collapse(shape, strides) if strides else ((self.size,), [])
        if not cshape:
            cshape, cstrides = (1,), [(0,) for _ in cstrides]
        rank = len(cshape)
        got = self.kernels.get(rank)
        if got is None:
            src, scalars = self.source(rank)
            got = self.kernels[rank] = (c.jit(src, "fused"), [be.scalar(v, d) for v, d in scalars])
        kernel, scalar_arrays = got
        outs = [be.empty(shape, d) for d in self.outputs]
        n = self.size
        flat = [s for st in cstrides for s in st]
        c.launch(kernel, (-(-n // self.block),), *outs, *inputs, *scalar_arrays, n,
                 *cshape[1:], *flat, BLOCK=self.block, warps=self.warps)
        return outs
