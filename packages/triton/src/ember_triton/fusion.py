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
are the unfused ones (up to contraction of multiply-adds by the GPU compiler).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from ember import ops
from ember.backend import numpy_dtype

from ._array import DeviceArray
from ._codegen import collapse
from ._fusion_block import BlockGen, node_expression
from ._fusion_source import REDUCE, Functions, acc_dtype, combine_source, conv_load, conv_store
from .reduction import SECOND, reduce_matrix

if TYPE_CHECKING:
    from ember import DType
    from ember.ops import Op
    from ember_fusion import FusedGroup

    from .backend import TritonBackend

__all__ = ["TritonFusionCompiler"]

EW = ops.elementwise
RD = ops.reduction
#: ops a group may hold (argmax/argmin run unfused)
_REDUCTIONS = frozenset(REDUCE)


class TritonFusionCompiler:
    """Compiles fused groups to Triton kernels for a `TritonBackend`.

    Parameters
    ----------
    backend : the backend whose kernels and memory the fused kernels use.
    block : elements per program of flat kernels (default: 65,536 on the interpreter, 2,048
        on GPUs).
    limit : most elements of one value's block in a program of a block kernel.
    warps : ``num_warps`` of flat kernels on GPUs.

    Examples
    --------
    >>> import ember, ember_fusion
    >>> d = ember.device("fusion<triton-interpret>")
    >>> x = ember.arange(4.0, device=d)
    >>> ((x * 2 + 1).relu() - 1).tolist()
    [0.0, 2.0, 4.0, 6.0]
    """

    def __init__(self, backend: TritonBackend | None = None, block: int | None = None,
                 limit: int | None = None, warps: int | None = None) -> None:
        self.backend = backend
        self.block = block
        self.limit = limit
        self.warps = warps
        #: Triton launches made by fused kernels, and groups that ran op by op
        self.launches = 0
        self.unfused_groups = 0
        #: a group of one op runs as the backend's own kernel: a generated one saves no
        #: launch, and the backend's is tuned (cuBLAS matmuls, split reductions) and launched
        #: along its recorded path.  Fusion reads this: an op on computed inputs that a flush
        #: ran so runs eagerly from then on (recording it only cost host time).
        self.plain_nodes = 1

    def configure(self, kernels: dict[Op, Callable[..., Any]] | None = None,
                  block: int | None = None, limit: int | None = None,
                  warps: int | None = None) -> TritonFusionCompiler:
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
                                    warps or self.warps)

    @property
    def be(self) -> TritonBackend:
        assert self.backend is not None, "configure() the compiler with a backend first"
        return self.backend

    def fusible(self, op: Op, dtype: DType) -> bool:
        if self.backend is not None and op not in self.backend.kernels:
            return False
        if op.group == "elementwise" or op is ops.creation.cast:
            return True
        return op in _REDUCTIONS or op is ops.linalg.matmul

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
        ew = [n.op not in _REDUCTIONS and n.op is not ops.linalg.matmul for n in group.nodes]
        shape = group.nodes[0].shape
        if all(ew) and all(n.shape == shape for n in group.nodes):
            return _FlatKernel(self, group)
        limit = self.limit or (1 << 14 if interp else 4096)
        head = group.nodes[0].op is ops.linalg.matmul
        if head:
            # the tile of a program is BM x pad(N) (x BK for float64's multiply-add path): keep
            # it within what a GPU program holds in registers
            f64 = group.nodes[0].dtype.name == "float64"
            widest = 1024 if interp else (64 if f64 else 256)
            ok_head = (group.mode == "rows" and group.rows > 1
                       and 1 < group.nodes[0].shape[1] <= widest
                       and group.nodes[0].dtype.name in ("float32", "float64"))
        else:
            ok_head = True
        if ok_head and not any(n.op is ops.linalg.matmul for n in group.nodes[1:]):
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
        from ember_fusion import FusedGroup, GroupNode

        head = group.nodes[0]
        k_new = len(group.inputs)

        def remap(a: int) -> int:
            return -1 - k_new if a == 0 else (a - 1 if a > 0 else a)

        nodes = tuple(GroupNode(n.op, n.params, n.params_key, n.dtype, n.shape,
                                tuple(remap(a) for a in n.args)) for n in group.nodes[1:])
        rest_outputs = tuple(j - 1 for j in group.outputs if j > 0)
        rest = FusedGroup(nodes, (*group.inputs, (head.shape, head.dtype)), rest_outputs,
                          group.mode, group.rows, frozenset(j - 1 for j in group.cross if j > 0))
        run_rest = self.compile(rest) if rest_outputs else None
        fn = self.be.kernels[head.op]
        params = head.params
        args = [-1 - a for a in head.args]
        outputs = group.outputs

        def kernel(inputs: Sequence[Any]) -> list[Any]:
            h = fn(*[inputs[k] for k in args], **params)
            self.launches += 1
            got = iter(run_rest([*inputs, h]) if run_rest is not None else [])
            return [h if j == 0 else next(got) for j in outputs]

        return kernel

    def _unfused(self, group: FusedGroup) -> Callable[[Sequence[Any]], list[Any]]:
        """Op by op through the backend's kernels (one op; zero-size values, rank above 4)."""
        kernels = self.be.kernels
        steps = [(kernels[n.op], n.args, n.params) for n in group.nodes]
        outputs = group.outputs

        def kernel(inputs: Sequence[Any]) -> list[Any]:
            vals: list[Any] = []
            for fn, args, params in steps:
                vals.append(fn(*[vals[a] if a >= 0 else inputs[-1 - a] for a in args], **params))
                self.launches += 1
            return [vals[j] for j in outputs]

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
        if n.op in _REDUCTIONS:
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
                op = REDUCE[n.op]
                a = n.args[0]
                src = g.nodes[a].shape if a >= 0 else g.inputs[-1 - a][0]
                dims = n.params["dims"]
                q = math.prod(e for d, e in enumerate(src) if d not in dims)
                count = math.prod(src[d] for d in dims)
                acc = acc_dtype(op, numpy_dtype(g.nodes[a].dtype if a >= 0
                                                else g.inputs[-1 - a][1]))
                comb = c.jit(combine_source(op, acc, numpy_dtype(n.dtype), count), "combine")
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
        used = {-1 - a for n in group.nodes for a in n.args if a < 0}
        self.single = [math.prod(s) == 1 or k not in used
                       for k, (s, _) in enumerate(group.inputs)]
        self.used = used
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
            lines.append("    rem = offs")
            for d in reversed(range(rank)):
                if d:
                    lines += [f"    c{d} = rem % S{d}", f"    rem = rem // S{d}"]
                else:
                    lines.append("    c0 = rem")
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
        outputs = {j: m for m, j in enumerate(g.outputs)}
        for j, n in enumerate(g.nodes):
            dts = [numpy_dtype(g.nodes[a].dtype if a >= 0 else g.inputs[-1 - a][1])
                   for a in n.args]
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
        strides = []
        for x, single in zip(inputs, self.single, strict=True):
            if single:
                continue
            pad = (0,) * (len(shape) - x.ndim)
            strides.append(tuple(0 if n == 1 and m != 1 else s for n, m, s in
                                 zip((1,) * len(pad) + x.shape, shape, pad + x.strides,
                                     strict=True)))
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
