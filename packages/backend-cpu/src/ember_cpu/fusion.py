"""The CPU fusion compiler: generated numpy code over cache-sized blocks, on two threads.

A group (its description, `ember.backend.FusedGroup`) becomes two Python functions generated
from its nodes:

- ``whole(*inputs)`` calls the cpu backend's own kernel for each node on whole arrays.  It is
  used when the group is small (one block), so small tensors give exactly the cpu's results.
- ``block(lo, hi, ...)`` computes rows ``lo:hi`` of every node.  Intermediates live in scratch
  buffers of one block (reused between nodes: ``out=``), so they stay in cache and are never
  written to memory; common float ops are bare ufunc calls with ``out=``, every other op calls
  the cpu kernel on the block.  Reductions over inner axes run per block; reductions over axis
  0 (``cross``) keep one partial per block, combined pairwise at the end.  The blocks are split
  between threads (numpy releases the GIL inside ufunc loops).
- ``fast(lo, hi, ...)``, for a flat group (`_fusion_loops`): the arithmetic of its ops whose
  kernel-IR definitions match the cpu's bits as numba loops (no GIL), their ``exp``/``log``/...
  and every other op (its cpu kernel) as numpy calls between the loops, over blocks of
  `LOOP_BLOCK_SCALE` chunks.  A kernel of at least
  `LOOP_MIN_BLOCKS` blocks asks for it on its second call and runs numpy's blocks until a
  background thread has loaded it from numba's disk cache (an earlier process compiled it) or
  compiled it (`wait_for_loops` waits for that).

Defaults measured on the 2-core development machine (docs/performance.md): blocks of 64 Ki
elements (256 KiB of float32, so the few live blocks fit L2) and 2 threads.  numexpr was
slower than eager numpy there (its ``exp`` is scalar), so it is not used.
"""

from __future__ import annotations

import math
import os
import queue
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from ember import ops
from ember.backend import numpy_dtype

from . import _fusion_loops, _scratch, _workers

if TYPE_CHECKING:
    from ember import DType
    from ember.backend import FusedGroup, FusedKernel
    from ember.ops import Op

__all__ = ["CpuFusionCompiler", "wait_for_loops"]

EW = ops.elementwise
RD = ops.reduction
_FLOATS = frozenset({"float32", "float64"})
_PLAIN = frozenset({"float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"})

# op -> (numpy function name, dtype names it is used for).  Each is one ufunc call with out=,
# the very function the cpu kernel calls, so a block gives the cpu's values.
_UFUNC: dict[Op, tuple[str, frozenset[str]]] = {}
for _op, _fn in ((EW.exp, "exp"), (EW.expm1, "expm1"), (EW.log, "log"), (EW.log1p, "log1p"),
                 (EW.sqrt, "sqrt"), (EW.sin, "sin"), (EW.cos, "cos"), (EW.tan, "tan"),
                 (EW.tanh, "tanh"), (EW.asin, "arcsin"), (EW.acos, "arccos"),
                 (EW.atan, "arctan"), (EW.sinh, "sinh"), (EW.cosh, "cosh"),
                 (EW.reciprocal, "reciprocal"), (EW.div, "true_divide"),
                 (EW.atan2, "arctan2"), (EW.pow, "power"), (EW.floor, "floor"),
                 (EW.ceil, "ceil"), (EW.round, "rint"), (EW.trunc, "trunc")):
    _UFUNC[_op] = (_fn, _FLOATS)
for _op, _fn in ((EW.neg, "negative"), (EW.abs, "absolute"), (EW.sign, "sign"),
                 (EW.add, "add"), (EW.sub, "subtract"), (EW.mul, "multiply"),
                 (EW.maximum, "maximum"), (EW.minimum, "minimum"),
                 (EW.floordiv, "floor_divide"), (EW.remainder, "remainder"),
                 (EW.eq, "equal"), (EW.ne, "not_equal"), (EW.lt, "less"),
                 (EW.le, "less_equal"), (EW.gt, "greater"), (EW.ge, "greater_equal"),
                 (EW.logical_and, "logical_and"), (EW.logical_or, "logical_or"),
                 (EW.logical_xor, "logical_xor"), (EW.logical_not, "logical_not"),
                 (EW.isnan, "isnan"), (EW.isinf, "isinf"), (EW.bitwise_and, "bitwise_and"),
                 (EW.bitwise_or, "bitwise_or"), (EW.bitwise_xor, "bitwise_xor"),
                 (EW.bitwise_not, "invert")):
    _UFUNC[_op] = (_fn, _PLAIN)

#: ops on computed inputs up to this many blocks (of ``chunk`` elements) run eagerly
EAGER_BLOCKS = 2
#: groups of at most this many ops always run whole (the cpu kernels, op by op)
PLAIN_NODES = 2
#: fewer blocks than this run on the calling thread alone
THREAD_MIN_BLOCKS = 8
#: kernels of at least this many blocks compile their arithmetic into loops (`_fusion_loops`)
LOOP_MIN_BLOCKS = 4
#: a compiled-loop block is this many chunks
LOOP_BLOCK_SCALE = 4
#: a kernel asks for its loops on this call (a chain run once never imports numba)
LOOP_AFTER_CALLS = 2


class _Helpers:
    """Threads that help the caller run one kernel's blocks, taking the next block whenever
    they are free (`_workers._Job`).

    Nothing is split in advance: a helper that another process keeps off its core, or that
    wakes late, holds back the caller by at most the one block it runs, where a fixed half
    each (the former ``ThreadPoolExecutor`` split) made the caller wait for half the work.
    Helpers sleep on a queue between kernels (no spin-wait: that needs numba, whose import
    in a fresh process took ~0.7-1 s, holding the GIL the caller's blocks need, and a wake-up's
    tens of microseconds are small beside a kernel of eight or more blocks).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.jobs: queue.SimpleQueue[_workers._Job] = queue.SimpleQueue()
        self.count = 0

    def run(self, fn: Callable[[int], object], chunks: int, workers: int) -> None:
        with self.lock:
            while self.count < workers - 1:
                threading.Thread(target=self._serve, args=(self.jobs,), daemon=True,
                                 name="ember-fusion").start()
                self.count += 1
        job = _workers._Job(fn, chunks)
        for _ in range(workers - 1):
            self.jobs.put(job)
        job.work()
        job.finished.wait()
        if job.error is not None:
            raise job.error

    @staticmethod
    def _serve(jobs: queue.SimpleQueue[_workers._Job]) -> None:
        while True:
            jobs.get().work()


_HELPERS = _Helpers()
if hasattr(os, "register_at_fork"):  # a forked child has none of the parent's threads
    os.register_at_fork(after_in_child=lambda: globals().update(_HELPERS=_Helpers()))


class CpuFusionCompiler:
    """Compiles `FusedGroup` s into numpy code for the ``cpu`` backend.

    Parameters
    ----------
    kernels : the cpu backend's op table (its kernels are the reference for every op).
    chunk : elements per block (per node), sized so a block's intermediates fit in L2.
    threads : how many threads share the blocks of one kernel.
    loops : 1 (default) compiles a flat group's arithmetic into numba loops between numpy's
        transcendental calls (`_fusion_loops`); 0 keeps every block numpy calls.

    Examples
    --------
    >>> import ember, ember_fusion
    >>> x = ember.ones(4, device="fusion<cpu>")
    >>> ((x * 2 + 1).sigmoid() * 3).shape
    (4,)
    """

    def __init__(self, kernels: dict[Op, Callable[..., Any]] | None = None, chunk: int = 65536,
                 threads: int = 2, eager: int | None = None, loops: int = 1) -> None:
        if chunk < 1 or threads < 1:
            raise ValueError(f"fusion<cpu>: chunk and threads must be >= 1, got {chunk}, "
                             f"{threads}")
        if eager is not None and eager < 0:
            raise ValueError(f"fusion<cpu>: eager must be >= 0, got {eager}")
        if kernels is None:
            from ember_cpu.backend import KERNELS

            kernels = KERNELS
        self.kernels = kernels
        self.chunk = chunk
        self.threads = threads
        self.loops = bool(loops)
        #: ops on computed inputs with at most this many elements run eagerly (Fusion reads
        #: it): a group that fits one block runs the cpu kernels op by op anyway, and fusing
        #: measured slower than eager numpy up to 2 blocks (docs/fusion.md)
        self.eager_below = EAGER_BLOCKS * chunk if eager is None else eager
        #: groups of at most this many ops run as the plain cpu kernels (Fusion reads it: an
        #: op a flush ran so, from computed inputs, runs eagerly from then on)
        self.plain_nodes = PLAIN_NODES if self.eager_below else 0

    def configure(self, kernels: dict[Op, Callable[..., Any]] | None = None,
                  chunk: int | None = None, threads: int | None = None,
                  eager: int | None = None, loops: int | None = None) -> CpuFusionCompiler:
        """A compiler for another kernel table, block size, thread count, eager threshold or
        loop setting (``fusion<cpu,chunk=4096,threads=1>``; ``eager=0`` records every op;
        ``loops=0`` numpy calls only)."""
        return CpuFusionCompiler(kernels or self.kernels, chunk or self.chunk,
                                 threads or self.threads, eager,
                                 self.loops if loops is None else loops)

    def fusible(self, op: Op, dtype: DType) -> bool:
        # the decorator asks only of ops it records (elementwise, reductions, matmul)
        return op in self.kernels

    def compile(self, group: FusedGroup) -> FusedKernel:
        return _Codegen(group, self).build()


class _Codegen:
    """Writes the source of one group's ``whole`` and ``block`` functions."""

    def __init__(self, group: FusedGroup, compiler: CpuFusionCompiler) -> None:
        self.g = group
        self.c = compiler
        self.ns: dict[str, Any] = {"np": np}
        shape = group.nodes[0].shape
        # one loop over the elements: inputs of the shape or of one element
        self.flat = (group.mode == "rows" and group.flat and math.prod(shape) > 0
                     and all(s == shape or math.prod(s) == 1 for s, _ in group.inputs))
        # the matmul at the head of a group runs whole, before the blocks
        self.head = group.mode == "rows" and group.head
        self.last_use = group.last_use
        #: scalars that ``block`` reads as blocks of copies (``F``), see `_fill`
        self.fills: list[tuple[str, Any]] = []

    # -- the exact path ------------------------------------------------------------------------

    def whole_source(self) -> str:
        g = self.g
        lines = [f"def whole({', '.join(f'x{k}' for k in range(len(g.inputs)))}):"]
        for j, n in enumerate(g.nodes):
            self.ns[f"K{j}"] = self.c.kernels[n.op]
            self.ns[f"P{j}"] = n.params
            args = ", ".join(f"v{a}" if a >= 0 else f"x{-1 - a}" for a in n.args)
            lines.append(f"    v{j} = K{j}({args}, **P{j})")
        lines.append(f"    return [{', '.join(f'v{i}' for i in g.outputs)}]")
        return "\n".join(lines)

    # -- the blocked path ----------------------------------------------------------------------

    def _row_elems(self) -> int:
        if self.flat:
            return 1
        elems = [math.prod(n.shape[1:]) for n in self.g.nodes]
        elems += [math.prod(s[1:]) for s, _ in self.g.inputs if s]
        return max(1, *elems)

    def block_source(self) -> tuple[str, list[tuple[tuple[int, ...], Any]]]:
        """The ``block`` function, and the (shape, dtype) of each scratch buffer it uses."""
        g = self.g
        nodes = g.nodes
        outputs = g.slots
        lines = ["def block(lo, hi, X, O, B, parts, ci, F):", "    n = hi - lo"]
        sliced: dict[int, str] = {}
        bufs: list[tuple[tuple[int, ...], Any]] = []
        free: dict[tuple[Any, ...], list[int]] = {}
        holder: dict[int, int] = {}  # node -> buffer it lives in

        def ext(k: int, consumer: int) -> str:
            shape = g.inputs[k][0]
            cons = nodes[consumer]
            if self.flat:
                return f"X[{k}]" if math.prod(shape) == 1 else self._slice_ext(k, sliced, lines)
            if (cons.op.group == "reduction" and shape) or (len(shape) == len(cons.shape) and shape
                                        and shape[0] != 1):
                return self._slice_ext(k, sliced, lines)
            return f"X[{k}]"

        for j, n in enumerate(nodes):
            if self.head and j == 0:
                lines.append("    v0 = X[-1][lo:hi]")
                continue
            args = [f"v{a}" if a >= 0 else ext(-1 - a, j) for a in n.args]
            if self.flat and n.op in (EW.maximum, EW.minimum):
                # numpy's SIMD loop for these needs two contiguous operands: with a scalar
                # operand they took 0.33 ns an element instead of 0.07 (float32, 64 Ki)
                args = [f"F[{self._fill(('x', -1 - a))}][:n]"
                        if a < 0 and math.prod(g.inputs[-1 - a][0]) == 1 else arg
                        for a, arg in zip(n.args, args, strict=True)]
            # each dying argument once: ``x - x`` must free x's buffer once, not twice
            dying = [a for a in dict.fromkeys(n.args)
                     if a >= 0 and self.last_use[a] == j and a in holder]
            shape_key = (n.dtype, () if self.flat else n.shape[1:])
            tmpl = self._template(j)
            if j in g.cross:
                # a partial per block (a mean's partial is a sum): own name, as whole() uses K
                self.ns[f"R{j}"] = self.c.kernels[RD.sum if n.op is RD.mean else n.op]
                lines.append(f"    parts[{sorted(g.cross).index(j)}][ci] = "
                             f"R{j}({', '.join(args)}, **P{j})")
            elif tmpl is None:
                self.ns[f"K{j}"] = self.c.kernels[n.op]
                self.ns[f"P{j}"] = n.params
                lines.append(f"    v{j} = K{j}({', '.join(args)}, **P{j})")
                if j in outputs:
                    lines.append(f"    O[{outputs[j]}][lo:hi] = v{j}")
            else:
                code, alias_ok = tmpl
                if alias_ok:
                    for a in dying:
                        free.setdefault(bufs_key(bufs[holder[a]]), []).append(holder[a])
                if j in outputs:
                    lines.append(f"    v{j} = O[{outputs[j]}][lo:hi]")
                else:
                    pool = free.get(shape_key)
                    if pool:
                        b = pool.pop()
                    else:
                        b = len(bufs)
                        bufs.append(((self.c.chunk if self.flat else 0, *shape_key[1]),
                                     shape_key[0]))
                    holder[j] = b
                    lines.append(f"    v{j} = B[{b}][:n]")
                lines.extend("    " + line.format(*args, out=f"v{j}") for line in code)
                if not alias_ok:
                    for a in dying:
                        free.setdefault(bufs_key(bufs[holder[a]]), []).append(holder[a])
        return "\n".join(lines), bufs

    def _fill(self, what: tuple[str, Any]) -> int:
        """The index in ``F`` of a block filled with a scalar: ``("x", k)`` input ``k``,
        ``("c", value)`` a constant (a 0-d array)."""
        for m, have in enumerate(self.fills):
            if have[0] == what[0] and (have[1] == what[1] if what[0] == "x"
                                       else have[1].dtype == what[1].dtype
                                       and have[1].tobytes() == what[1].tobytes()):
                return m
        self.fills.append(what)
        return len(self.fills) - 1

    def _slice_ext(self, k: int, sliced: dict[int, str], lines: list[str]) -> str:
        if k not in sliced:
            sliced[k] = f"s{k}"
            lines.insert(2, f"    s{k} = X[{k}][lo:hi]")
        return sliced[k]

    def _template(self, j: int) -> tuple[list[str], bool] | None:
        """numpy calls with ``out=`` computing node ``j`` as the cpu kernel does, or None."""
        g = self.g
        n = g.nodes[j]
        dt = n.dtype.name
        op = n.op
        in_dt = g.dtype(n.args[1 if op is EW.where else 0]).name if n.args else ""
        if op is EW.reciprocal and in_dt in _FLOATS and dt == in_dt:
            # np.reciprocal has no SIMD loop here: 1 / x by division is ~2x faster and is
            # the same correctly rounded value
            return ["np.divide(1.0, {0}, out={out})"], True
        if op in _UFUNC:
            fn, dtypes = _UFUNC[op]
            if in_dt in dtypes and dt in _PLAIN:
                args = ", ".join(f"{{{i}}}" for i in range(len(n.args)))
                return [f"np.{fn}({args}, out={{out}})"], True
            return None
        if in_dt not in _FLOATS and op not in (EW.where, EW.clamp, ops.creation.cast):
            return None
        if op is EW.sigmoid:
            return ["np.negative({0}, out={out})", "np.exp({out}, out={out})",
                    "np.add({out}, 1.0, out={out})", "np.divide(1.0, {out}, out={out})"], True
        if op is EW.rsqrt:
            return ["np.sqrt({0}, out={out})", "np.reciprocal({out}, out={out})"], True
        if op is EW.where and dt in _PLAIN:
            return ["np.copyto({out}, {2})", "np.copyto({out}, {1}, where={0})"], False
        if op is EW.clamp and dt in _PLAIN and dt != "bool":
            lo, hi = n.params.get("min"), n.params.get("max")
            npdt = numpy_dtype(n.dtype)
            self.ns[f"L{j}"] = None if lo is None else np.asarray(lo).astype(npdt)
            self.ns[f"H{j}"] = None if hi is None else np.asarray(hi).astype(npdt)
            if hi is None:
                bound = f"F[{self._fill(('c', self.ns[f'L{j}']))}][:n]" if self.flat else f"L{j}"
                return [f"np.maximum({{0}}, {bound}, out={{out}})"], True
            if lo is None:
                bound = f"F[{self._fill(('c', self.ns[f'H{j}']))}][:n]" if self.flat else f"H{j}"
                return [f"np.minimum({{0}}, {bound}, out={{out}})"], True
            return [f"np.clip({{0}}, L{j}, H{j}, out={{out}})"], True
        if op is ops.creation.cast and dt in _PLAIN and in_dt in _PLAIN:
            return ["np.copyto({out}, {0}, casting='unsafe')"], True
        return None

    def build(self) -> FusedKernel:
        whole_src = self.whole_source()
        exec(compile(whole_src, "<ember-fusion whole>", "exec"), self.ns)  # generated code
        whole: Callable[..., list[Any]] = self.ns["whole"]
        g = self.g
        if g.mode != "rows":
            return _quiet_whole(whole)
        block_src, bufs = self.block_source()
        self.source = whole_src + "\n\n" + block_src
        exec(compile(block_src, "<ember-fusion block>", "exec"), self.ns)  # generated code
        block: Callable[..., None] = self.ns["block"]
        # the loops run over flat blocks (the elements, inputs of the shape or one element)
        loops = _fusion_loops.plan(g, self.c.kernels) if self.c.loops and self.flat else None
        return _BlockedKernel(self, whole, block, bufs, loops)


def wait_for_loops(timeout: float | None = None) -> None:
    """Wait until the compiled loops asked for so far are loaded (or failed to load: those
    kernels keep numpy's blocks); a benchmark's warm-up calls it before timing."""
    _fusion_loops.wait(timeout)


def bufs_key(buf: tuple[tuple[int, ...], Any]) -> tuple[Any, ...]:
    shape, dtype = buf
    return (dtype, shape[1:])


def _quiet_whole(whole: Callable[..., list[Any]]) -> FusedKernel:
    def kernel(inputs: Sequence[Any]) -> list[Any]:
        with np.errstate(all="ignore"):
            return whole(*inputs)

    return kernel


class _BlockedKernel:
    """Runs a rows-mode group: whole when it fits one block, else blocks over threads."""

    def __init__(self, gen: _Codegen, whole: Callable[..., list[Any]],
                 block: Callable[..., None], bufs: list[tuple[tuple[int, ...], Any]],
                 loops: _fusion_loops.LoopPlan | None = None) -> None:
        g = gen.g
        self.source = gen.source
        self.whole = whole
        self.block = block
        self.flat = gen.flat
        self.head = gen.head
        self.threads = gen.c.threads
        self.rows_per_block = gen.c.chunk if gen.flat else max(1, gen.c.chunk // gen._row_elems())
        self.rows = g.rows if not gen.flat else math.prod(g.nodes[0].shape)
        self.bufs = [((self.rows_per_block, *shape[1:]), numpy_dtype(dtype))
                     for shape, dtype in bufs]
        self.fills = gen.fills
        self.fill_dtypes = [numpy_dtype(g.inputs[v][1]) if what == "x" else v.dtype
                            for what, v in self.fills]
        self.outputs = [(g.nodes[i].shape, numpy_dtype(g.nodes[i].dtype), i in g.cross,
                         g.nodes[i]) for i in g.outputs]
        self.cross = sorted(g.cross)
        self.cross_out = {i: m for m, i in enumerate(g.outputs) if i in g.cross}
        self.head_kernel = gen.c.kernels[ops.linalg.matmul] if self.head else None
        self.group = g
        self.nodes = g.nodes
        # a group of 1-2 ops gains nothing from blocks: it runs as the plain cpu kernels
        # (blocked, one op measured 2.4x and two ops 1.0-1.8x eager numpy's time)
        self.plain = len(g.nodes) <= PLAIN_NODES
        #: the compiled-loop plan, its block function once its module is loaded, whether the
        #: module was asked for, and the calls of enough blocks so far (see LOOP_AFTER_CALLS)
        self.loops = loops
        self.fast: Callable[..., None] | None = None
        self.asked = False
        self.calls = 0
        if loops is not None:
            self.source += "\n\n# compiled loops\n" + loops.source
            # a loop block holds fewer live buffers than numpy's: blocks of LOOP_BLOCK_SCALE
            # chunks (fewer Python calls per element; docs/performance.md)
            self.loop_rows = self.rows_per_block * LOOP_BLOCK_SCALE
            self.loop_bufs = [((self.loop_rows,), np.dtype(d)) for d in loops.bufs]

    def _ask_loops(self) -> None:
        """Use the compiled loops from when their module is loaded: at once where this process
        has it, else from when a background thread has loaded it from numba's disk cache
        (~0.3 s in a fresh process, most of it importing numba and starting LLVM) or compiled
        it (~0.6-1.5 s); numpy's blocks run meanwhile, so a first call never waits."""
        self.asked = True
        assert self.loops is not None
        module = _fusion_loops.loaded(self.loops)
        if module is not None:
            self._loaded(module)
        else:
            _fusion_loops.load_soon(self.loops, self._loaded)

    def _loaded(self, module: Any) -> None:
        assert self.loops is not None
        src = "\n    ".join(["def fast(lo, hi, X, O, B, parts, ci, F):", "n = hi - lo",
                              *self.loops.lines])
        ns = {"np": np, "M": module, **self.loops.ns}
        exec(compile(src, "<ember-fusion loops>", "exec"), ns)  # generated code
        self.fast = ns["fast"]

    def __call__(self, inputs: Sequence[Any]) -> list[Any]:
        with np.errstate(all="ignore"):
            if self.rows <= self.rows_per_block or self.plain:
                return self.whole(*inputs)
            return self._blocked(inputs)

    def _thread_buffers(self, fills: list[tuple[str, Any]], fast: bool = False
                        ) -> tuple[list[Any], list[Any]]:
        """This thread's block buffers and filled scalar blocks for one call (`_scratch`: a
        buffer is only used within the call, and a thread runs one block at a time)."""
        if fast:
            return [_scratch.scratch(("ember-fusion-loop", b), shape, dtype)[0]
                    for b, (shape, dtype) in enumerate(self.loop_bufs)], []
        bufs = [_scratch.scratch(("ember-fusion", b), shape, dtype)[0]
                for b, (shape, dtype) in enumerate(self.bufs)]
        filled = []
        for (_, value), dtype in zip(fills, self.fill_dtypes, strict=True):
            value = np.asarray(value, dtype)
            # keyed by the value: a filled block is only read, so kernels share it
            buf, fresh = _scratch.scratch(("ember-fusion-fill", value.tobytes()),
                                          (self.rows_per_block,), dtype)
            if fresh:
                buf.fill(value)
            filled.append(buf)
        return bufs, filled

    def _blocked(self, inputs: Sequence[Any]) -> list[Any]:
        rows, r = self.rows, self.rows_per_block
        xs = list(inputs)
        if self.flat:
            xs = [x.reshape(-1) if x.size == rows else x.reshape(()) for x in xs]
        if self.head_kernel is not None:
            a_ix, b_ix = self.nodes[0].args
            xs.append(self.head_kernel(xs[-1 - a_ix], xs[-1 - b_ix]))
        outs: list[Any] = []
        for shape, npdt, cross, _ in self.outputs:
            if cross:
                outs.append(None)
            elif self.flat:
                outs.append(np.empty(rows, npdt))
            else:
                outs.append(np.empty(shape, npdt))
        if self.loops is not None and not self.asked and -(-rows // r) >= LOOP_MIN_BLOCKS:
            self.calls += 1
            if self.calls >= LOOP_AFTER_CALLS:
                self._ask_loops()
        fast = self.fast  # one path for the whole call (the block buffers differ)
        block = fast or self.block
        if fast is not None:
            r = self.loop_rows
            xs = [np.ascontiguousarray(x) if x.ndim else x for x in xs]  # contiguous blocks
        starts = list(range(0, rows, r))
        parts: list[list[Any]] = [[None] * len(starts) for _ in self.cross]
        if self.head:
            # the head's value is computed above; an output of it is that array itself
            for m, (_, _, _, node) in enumerate(self.outputs):
                if node is self.nodes[0]:
                    outs[m] = xs[-1]

        nblocks = len(starts)
        # per thread: its block buffers (kept between calls: fresh ones are faulted in page
        # by page) and the scalars' filled blocks, taken when the thread runs its first block
        mine: dict[int, tuple[list[Any], list[Any]]] = {}
        fills = [("x", xs[k]) if what == "x" else ("c", k) for what, k in self.fills]

        def one(ci: int) -> None:
            got = mine.get(threading.get_ident())
            if got is None:
                got = mine[threading.get_ident()] = self._thread_buffers(fills, fast is not None)
            lo = starts[ci]
            with np.errstate(all="ignore"):
                block(lo, min(lo + r, rows), xs, outs, got[0], parts, ci, got[1])

        # a hand-off to another thread costs tens of microseconds (and BLAS threads may still
        # be spinning after a matmul): only groups of many blocks are split
        # and only onto cores other processes leave idle: with the other core taken, a
        # helper only takes turns with the caller, and the GIL passed between them at every
        # ufunc call made two threads slower than one (2026-12-07, 2^22 chain: 1.5x cpu on
        # two threads, 1.9x on one, in each of ten processes)
        workers = self.threads
        if workers > 1 and nblocks >= THREAD_MIN_BLOCKS:
            workers = min(workers, max(1, round(_workers.idle_cores())))
        if workers > 1 and nblocks >= THREAD_MIN_BLOCKS:
            _HELPERS.run(one, nblocks, workers)
        else:
            for ci in range(nblocks):
                one(ci)
        for c, i in enumerate(self.cross):
            node = self.nodes[i]
            combined = _combine(node, parts[c], self.group.reduced_count(i))
            if i in self.cross_out:
                outs[self.cross_out[i]] = combined
        if self.flat:
            outs = [o.reshape(shape) if not cross else o
                    for o, (shape, _, cross, _) in zip(outs, self.outputs, strict=True)]
        return outs


def _combine(node: Any, parts: list[Any], count: int) -> Any:
    how = "sum" if node.op is RD.mean else node.op.name  # partial means are sums
    npdt = numpy_dtype(node.dtype)
    stacked = np.stack(parts)
    if how == "sum":
        total = np.sum(stacked, axis=0)
        if node.op is RD.mean:
            total = total / count
        return np.asarray(total, dtype=npdt)
    fn = getattr(np, how)  # prod, max, min, any, all
    return np.asarray(fn(stacked, axis=0), dtype=npdt)
