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

Defaults measured on the 2-core development machine (docs/performance.md): blocks of 64 Ki
elements (256 KiB of float32, so the few live blocks fit L2) and 2 threads.  numexpr was
slower than eager numpy there (its ``exp`` is scalar), so it is not used.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
from ember import ops
from ember.backend import numpy_dtype

if TYPE_CHECKING:
    from ember import DType
    from ember.backend import FusedGroup, FusedKernel
    from ember.ops import Op

__all__ = ["CpuFusionCompiler"]

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
_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOL_LOCK = threading.Lock()


def _pool(threads: int) -> ThreadPoolExecutor:
    with _POOL_LOCK:
        pool = _POOLS.get(threads)
        if pool is None:
            pool = _POOLS[threads] = ThreadPoolExecutor(threads - 1,
                                                        thread_name_prefix="ember-fusion")
        return pool


class CpuFusionCompiler:
    """Compiles `FusedGroup` s into numpy code for the ``cpu`` backend.

    Parameters
    ----------
    kernels : the cpu backend's op table (its kernels are the reference for every op).
    chunk : elements per block (per node), sized so a block's intermediates fit in L2.
    threads : how many threads share the blocks of one kernel.

    Examples
    --------
    >>> import ember, ember_fusion
    >>> x = ember.ones(4, device="fusion<cpu>")
    >>> ((x * 2 + 1).sigmoid() * 3).shape
    (4,)
    """

    def __init__(self, kernels: dict[Op, Callable[..., Any]] | None = None, chunk: int = 65536,
                 threads: int = 2, eager: int | None = None) -> None:
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
        #: ops on computed inputs with at most this many elements run eagerly (Fusion reads
        #: it): a group that fits one block runs the cpu kernels op by op anyway, and fusing
        #: measured slower than eager numpy up to 2 blocks (docs/fusion.md)
        self.eager_below = EAGER_BLOCKS * chunk if eager is None else eager
        #: groups of at most this many ops run as the plain cpu kernels (Fusion reads it: an
        #: op a flush ran so, from computed inputs, runs eagerly from then on)
        self.plain_nodes = PLAIN_NODES if self.eager_below else 0

    def configure(self, kernels: dict[Op, Callable[..., Any]] | None = None,
                  chunk: int | None = None, threads: int | None = None,
                  eager: int | None = None) -> CpuFusionCompiler:
        """A compiler for another kernel table, block size, thread count or eager threshold
        (``fusion<cpu,chunk=4096,threads=1>``; ``eager=0`` records every op)."""
        return CpuFusionCompiler(kernels or self.kernels, chunk or self.chunk,
                                 threads or self.threads, eager)

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
        lines = ["def block(lo, hi, X, O, B, parts, ci):", "    n = hi - lo"]
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
                    "np.add({out}, 1.0, out={out})", "np.reciprocal({out}, out={out})"], True
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
                return [f"np.maximum({{0}}, L{j}, out={{out}})"], True
            if lo is None:
                return [f"np.minimum({{0}}, H{j}, out={{out}})"], True
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
        return _BlockedKernel(self, whole, block, bufs)


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
                 block: Callable[..., None], bufs: list[tuple[tuple[int, ...], Any]]) -> None:
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

    def __call__(self, inputs: Sequence[Any]) -> list[Any]:
        with np.errstate(all="ignore"):
            if self.rows <= self.rows_per_block or self.plain:
                return self.whole(*inputs)
            return self._blocked(inputs)

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
        starts = list(range(0, rows, r))
        parts: list[list[Any]] = [[None] * len(starts) for _ in self.cross]
        if self.head:
            # the head's value is computed above; an output of it is that array itself
            for m, (_, _, _, node) in enumerate(self.outputs):
                if node is self.nodes[0]:
                    outs[m] = xs[-1]

        def work(ids: range) -> None:
            with np.errstate(all="ignore"):
                bufs = [np.empty(s, d) for s, d in self.bufs]
                block = self.block
                for ci in ids:
                    lo = starts[ci]
                    block(lo, min(lo + r, rows), xs, outs, bufs, parts, ci)

        nblocks = len(starts)
        # a hand-off to another thread costs tens of microseconds (and BLAS threads may still
        # be spinning after a matmul): only groups of many blocks are split
        if self.threads > 1 and nblocks >= THREAD_MIN_BLOCKS:
            step = -(-nblocks // self.threads)
            pool = _pool(self.threads)
            futures: list[Future[None]] = [pool.submit(work, range(s, min(s + step, nblocks)))
                                           for s in range(step, nblocks, step)]
            work(range(0, min(step, nblocks)))
            for f in futures:
                f.result()
        else:
            work(range(nblocks))
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
