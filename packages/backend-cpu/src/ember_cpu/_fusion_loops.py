"""fusion<cpu>'s compiled loops: a flat group's arithmetic as numba loops, its transcendental
functions as numpy calls, block by block.

Each node of the group is expanded into kernel-IR primitives (`ember.backend.ir.expand`, the
op's one definition), one DAG for the whole group.  The primitives numba compiles to branch-free
vector code (arithmetic, comparisons, selects, casts, ``fabs``) run in *loop stages*, one
compiled loop per stage; the C library's functions (``exp``, ``log``, ``tanh``, ...) stay
numpy calls over the block (numba's are scalar on the development machine: FACTS), and each
starts a new stage.  Inside a stage values are registers; only values a later stage, a numpy
call or the caller reads are written to a block buffer or an output.  For the 7-op chain that
is one loop (mul, add, max, mul, sub, neg), ``np.exp``, one loop (add, div, mul).

Every primitive rounds to its dtype as numpy's op by op does (float32 stays float32, integers
wrap to their width), with no fast-math flags and ``error_model="numpy"``: the results are the
cpu backend's bits.  Only ops whose IR definition was checked bit for bit against the cpu
kernel (`LOOP_OPS`; e.g. ``sign`` is not: numpy's sign of -0.0 is +0.0) are expanded; any
other op of the group runs as the cpu kernel itself on the block, between two loops, like a
function.

The generated source is written to ``$EMBER_CACHE_DIR/fusion-cpu/`` (default
``~/.cache/ember``) under the hash of its text and imported from there with numba's
``cache=True``, so another process loads the machine code from disk instead of compiling it.
Loading happens on a background thread (`load_soon`): in a fresh process it costs ~0.3 s
(importing numba, starting LLVM) from the disk cache and ~0.6-1.5 s compiling, time a first
call should not wait for; the kernel runs numpy's blocks until then.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from ember import ops
from ember.backend import ir

if TYPE_CHECKING:
    from ember.backend import FusedGroup

__all__ = ["LOOP_OPS", "LoopPlan", "cache_dir", "load", "load_soon", "loaded", "plan", "wait"]

EW = ops.elementwise
_PLAIN = frozenset({"float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"})
#: elementwise ops rendered from their IR definitions (each checked bit for bit against the
#: cpu kernel by tests/test_fusion_paths.py)
LOOP_OPS = frozenset({
    "add", "sub", "mul", "div", "neg", "abs", "maximum", "minimum", "reciprocal", "sigmoid",
    "rsqrt", "exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tan", "tanh", "asin",
    "acos", "atan", "sinh", "cosh", "floor", "ceil", "round", "trunc", "eq", "ne", "lt", "le",
    "gt", "ge", "logical_and", "logical_or", "logical_xor", "logical_not", "isnan", "isinf",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "where",
})
#: IR float functions computed by numpy over a block (the ufunc numpy's cpu kernel calls)
NUMPY_FUNCTIONS = {"exp": "exp", "expm1": "expm1", "log": "log", "log1p": "log1p",
                   "sqrt": "sqrt", "sin": "sin", "cos": "cos", "tan": "tan", "tanh": "tanh",
                   "asin": "arcsin", "acos": "arccos", "atan": "arctan", "sinh": "sinh",
                   "cosh": "cosh", "floor": "floor", "ceil": "ceil", "rint": "rint",
                   "trunc": "trunc"}
_BINARY = {"add": "+", "sub": "-", "mul": "*", "fdiv": "/", "lt": "<", "le": "<=", "eq": "==",
           "ne": "!=", "gt": ">", "ge": ">=", "and": "&", "or": "|", "xor": "^"}
_WRAP = frozenset({"add", "sub", "mul", "neg", "invert", "and", "or", "xor"})  # ints: wrap
_NB = {d: d for d in _PLAIN} | {"bool": "boolean"}  # numba's type names
#: the fewest loop-stage primitives that make compiling worth it (fewer: numpy is as fast)
MIN_LOOP_PRIMITIVES = 3


def cache_dir() -> Path:
    root = os.environ.get("EMBER_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "ember")
    return Path(root) / "fusion-cpu"


class LoopPlan:
    """The block function's lines and the numba module source of one group."""

    def __init__(self, source: str, lines: list[str], bufs: list[str], stages: int,
                 ns: dict[str, Any] | None = None) -> None:
        self.source = source
        #: names the lines use besides ``np`` and ``M``: cpu kernels ``K<j>``, params ``P<j>``
        self.ns = ns or {}
        #: lines of ``block`` (after ``n = hi - lo``); loops are ``M.L0``... of module ``M``
        self.lines = lines
        #: dtype name of each block buffer ``B[i]`` the lines use
        self.bufs = bufs
        self.stages = stages
        self.key = hashlib.sha256(source.encode()).hexdigest()[:24]


def _node_value(b: ir.Builder, g: FusedGroup, j: int, vals: dict[int, ir.Value]
                ) -> ir.Value | None:
    """Node ``j`` as primitives over ``vals`` (the values of its arguments), or None."""
    n = g.nodes[j]
    op = n.op
    args = [vals[a] for a in n.args]
    if op is EW.clamp:
        lo, hi = n.params.get("min"), n.params.get("max")
        dt = n.dtype.name
        if (lo is None and hi is None) or not ir.is_float(dt):
            return None
        if lo is not None and hi is not None:
            return _clip(args[0], *(float(np.asarray(v).astype(dt)) for v in (lo, hi)))
        # the cpu kernel: np.maximum(x, lo) / np.minimum(x, hi), the bound cast to x's dtype
        bound = np.asarray(lo if hi is None else hi).astype(dt)
        name, args = ("maximum" if hi is None else "minimum"), [args[0], b.const(float(bound), dt)]
    elif op is ops.creation.cast:
        src, dst = args[0].dtype, n.dtype.name
        if ir.is_float(src) and not ir.is_float(dst) and dst != "bool":
            return None  # float -> int: numpy's (C's) rule for nan and overflow
        return args[0].to(dst)
    elif op.group == "elementwise" and op.name in LOOP_OPS:
        name = op.name
    else:
        return None
    body = ir.expand(name, [v.dtype for v in args])
    if body.dtype != n.dtype.name:
        return None
    mapped: dict[int, ir.Value] = {}
    for v in ir.schedule(body):
        if v.op == "input":
            out = args[v.arg]
        elif v.op not in _BINARY and v.op not in NUMPY_FUNCTIONS and v.op not in (
                "const", "neg", "fabs", "isnan", "isinf", "not", "invert", "where", "cast"):
            return None
        else:
            out = b.node(v.op, v.dtype, tuple(mapped[id(s)] for s in v.src), v.arg)
        mapped[id(v)] = out
    return mapped[id(body)]


def _clip(x: ir.Value, lo: float, hi: float) -> ir.Value:
    """numpy's float ``np.clip`` (the cpu's two-sided clamp), checked on every combination of
    signed zeros, infinities and nan: nan where ``x`` or a bound is nan; ``x`` equal to a
    bound stays ``x`` (``clip(-0.0, 0.0, 1.0)`` is -0.0); the upper bound wins when
    ``lo > hi``."""
    if math.isnan(lo) or math.isnan(hi):
        return x + math.nan
    y = ir.where(x.lt(lo), lo, x)
    return ir.where(y.gt(hi), hi, y)


def _const(v: ir.Value) -> str:
    x = v.arg
    if v.dtype == "bool":
        return "True" if x else "False"
    if ir.is_float(v.dtype):
        text = "np.nan" if math.isnan(x) else ("np.inf" if x == math.inf else
                                                "-np.inf" if x == -math.inf else repr(x))
        return f"np.{v.dtype}({text})"
    return f"np.{v.dtype}({x})"


def _spell(v: ir.Value, s: list[str]) -> str:
    op, dt = v.op, v.dtype
    if op in _BINARY:
        text = f"({s[0]} {_BINARY[op]} {s[1]})"
    elif op == "neg":
        text = f"(-{s[0]})"
    elif op == "invert":
        text = f"(~{s[0]})"
    elif op == "not":
        text = f"(not {s[0]})"
    elif op == "fabs":
        text = f"abs({s[0]})"
    elif op == "isnan":
        text = f"({s[0]} != {s[0]})"
    elif op == "isinf":
        text = f"np.isinf({s[0]})"
    elif op == "where":
        text = f"({s[1]} if {s[0]} else {s[2]})"
    elif op == "cast":
        text = f"({s[0]} != 0)" if dt == "bool" else f"np.{dt}({s[0]})"
    else:
        raise AssertionError(op)
    if op in _WRAP and ir.is_int(dt):  # numba widens small integers: wrap as numpy does
        text = f"np.{dt}({text})"
    return text


def _numpy_step(v: ir.Value) -> bool:
    """Whether ``v`` is computed by numpy over the block: a float function, or a node outside
    `LOOP_OPS` (``call``: the cpu kernel of node ``v.arg``)."""
    return v.op in NUMPY_FUNCTIONS or v.op == "call"


def plan(g: FusedGroup, kernels: dict[Any, Callable[..., Any]] | None = None
         ) -> LoopPlan | None:
    """The compiled-loop plan of a flat group, or None where it keeps the numpy path (a dtype
    outside the plain ones, too little arithmetic to gain).  A node outside `LOOP_OPS` runs
    as its cpu kernel (from ``kernels``) on the block between two loops, like a function;
    without ``kernels`` such a group keeps the numpy path."""
    if g.mode != "rows" or not g.flat or g.head:
        return None
    shape = g.nodes[0].shape
    if any(d.name not in _PLAIN for _, d in g.inputs) or any(
            n.dtype.name not in _PLAIN for n in g.nodes):
        return None
    if any(s != shape and math.prod(s) != 1 for k, (s, _) in enumerate(g.inputs)
           if k in g.used_inputs):
        return None  # an input broadcast along rows (a bias) is neither a block nor a scalar
    b = ir.Builder()
    vals: dict[int, ir.Value] = {}
    ns: dict[str, Any] = {}  # the cpu kernels (and their params) the block calls
    arrays: dict[int, int] = {}  # id(input value) -> input index
    for k, (in_shape, d) in enumerate(g.inputs):
        if k not in g.used_inputs:
            continue
        v = b.input(k, d.name) if in_shape == shape else b.scalar(k, d.name)
        if in_shape == shape:
            arrays[id(v)] = k
        vals[-1 - k] = v
    for j in range(len(g.nodes)):
        nv = _node_value(b, g, j, vals)
        if nv is None:
            n = g.nodes[j]
            node_args = tuple(vals[a] for a in n.args)
            if kernels is None or n.op not in kernels or any(
                    v.op == "const" for v in node_args):
                return None
            # not a primitive: outside the builder (never shared), rendered by its kernel
            nv = ir.Value(b, "call", n.dtype.name, node_args, j)
            ns[f"K{j}"], ns[f"P{j}"] = kernels[n.op], n.params
        vals[j] = nv
    roots = {j: vals[j] for j in g.outputs}
    if any(r.op in ("input", "scalar", "const") for r in roots.values()):
        return None  # an output that is an input: nothing to compute (rare; numpy's path)
    # every needed primitive, sources first; its stage (functions start the next one)
    order: list[ir.Value] = []
    seen: set[int] = set()
    for r in roots.values():
        for v in ir.schedule(r):
            if id(v) not in seen:
                seen.add(id(v))
                order.append(v)
    stage: dict[int, int] = {}
    for v in order:
        after = max((stage[id(s)] for s in v.src), default=0)
        stage[id(v)] = after + 1 if _numpy_step(v) else after
    loops = [v for v in order if not _numpy_step(v) and v.src]
    if len(loops) < MIN_LOOP_PRIMITIVES:
        return None
    # values read outside the stage that computes them are arrays
    consumers: dict[int, set[int]] = {}
    for v in order:
        for s in v.src:
            consumers.setdefault(id(s), set()).add(-1 if _numpy_step(v)
                                                   else stage[id(v)])
    uses: dict[int, int] = {}
    for v in order:
        for ref in {id(x) for x in v.src}:
            uses[ref] = uses.get(ref, 0) + 1
    slot = {id(vals[j]): g.slots[j] for j in g.outputs}
    name: dict[int, str] = {}  # id -> array name in block()
    bufs: list[str] = []
    lines: list[str] = []
    for v in order:
        if v.op == "input" and id(v) in arrays:
            name[id(v)] = f"s{v.arg}"
            lines.append(f"s{v.arg} = X[{v.arg}][lo:hi]")
    mem = {id(v) for v in order if v.src and (
        id(v) in slot or _numpy_step(v)
        or any(c != stage[id(v)] for c in consumers.get(id(v), ())))}

    def array_of(v: ir.Value) -> str:
        if id(v) not in name:
            if id(v) in slot:
                name[id(v)] = f"o{slot[id(v)]}"
                lines.append(f"o{slot[id(v)]} = O[{slot[id(v)]}][lo:hi]")
            else:
                name[id(v)] = f"b{len(bufs)}"
                lines.append(f"b{len(bufs)} = B[{len(bufs)}][:n]")
                bufs.append(v.dtype)
        return name[id(v)]

    src_lines = ["import numba", "import numpy as np", ""]
    nstages = max(stage[id(v)] for v in order) + 1
    made = 0
    for st in range(nstages):
        body = [v for v in loops if stage[id(v)] == st]
        if body:
            reads: list[ir.Value] = []
            scalars: list[ir.Value] = []
            for v in body:
                for s in v.src:
                    if s.op == "scalar" and s not in scalars:
                        scalars.append(s)
                    elif (s.op == "input" or (id(s) in mem and stage[id(s)] != st)
                          or _numpy_step(s)) and s not in reads:
                        reads.append(s)
            writes = [v for v in body if id(v) in mem]
            params = ([f"a{i}" for i in range(len(reads))] + [f"c{i}" for i in range(len(scalars))]
                      + [f"w{i}" for i in range(len(writes))])
            sig = ", ".join([f"{_NB[v.dtype]}[::1]" for v in reads]
                            + [_NB[v.dtype] for v in scalars]
                            + [f"{_NB[v.dtype]}[::1]" for v in writes])
            fn = [f"@numba.njit('void(intp, {sig})', cache=True, nogil=True, "
                  "error_model='numpy')", f"def L{made}(n, {', '.join(params)}):",
                  "    for i in range(n):"]
            local: dict[int, str] = {}
            for i, v in enumerate(reads):
                local[id(v)] = f"r{i}"
                fn.append(f"        r{i} = a{i}[i]")
            for i, v in enumerate(scalars):
                local[id(v)] = f"c{i}"
            for t, v in enumerate(body):
                srcs = [local[id(s)] if id(s) in local else _const(s) for s in v.src]
                fn.append(f"        t{t} = {_spell(v, srcs)}")
                local[id(v)] = f"t{t}"
            for i, v in enumerate(writes):
                fn.append(f"        w{i}[i] = {local[id(v)]}")
            src_lines += [*fn, ""]
            args = ([array_of(v) if v.op != "input" else name[id(v)] for v in reads]
                    + [f"X[{v.arg}][()]" for v in scalars] + [array_of(v) for v in writes])
            lines.append(f"M.L{made}(n, {', '.join(args)})")
            made += 1
        for v in order:
            if v.op == "call" and stage[id(v)] == st + 1:
                args = [f"X[{s.arg}]" if s.op == "scalar" else name[id(s)] if s.op == "input"
                        else array_of(s) for s in v.src]
                call = f"K{v.arg}({', '.join(args)}, **P{v.arg})"
                if id(v) in slot:
                    lines.append(f"np.copyto({array_of(v)}, {call})")
                else:
                    name[id(v)] = f"k{v.arg}"
                    lines.append(f"k{v.arg} = {call}")
            elif v.op in NUMPY_FUNCTIONS and stage[id(v)] == st + 1:
                s = v.src[0]
                arg = name[id(s)] if s.op == "input" else array_of(s)
                # in place over a buffer nothing else reads
                if name[id(s)].startswith("b") and uses[id(s)] == 1 and id(v) not in slot:
                    name[id(v)] = name[id(s)]
                out = array_of(v)
                lines.append(f"np.{NUMPY_FUNCTIONS[v.op]}({arg}, out={out})")
    if made == 0:
        return None
    return LoopPlan("\n".join(src_lines), lines, bufs, made, ns)


# -- compiling: source files in the cache directory, numba's on-disk cache beside them ---------

_MODULES: dict[str, Any] = {}
_PENDING: dict[str, threading.Thread] = {}
_STARTED: list[threading.Thread] = []
#: why a module could not be loaded, by source hash (its kernels keep numpy's path)
FAILED: dict[str, BaseException] = {}


def _after_fork() -> None:
    # a forked child has none of the parent's compile threads, and maybe a held lock
    global _LOCK
    _LOCK = threading.Lock()
    _PENDING.clear()
    _STARTED.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
_LOCK = threading.Lock()


def _module_path(key: str) -> Path:
    return cache_dir() / f"ember_fused_{key}.py"


def loaded(p: LoopPlan) -> Any:
    """The module of ``p`` if this process loaded it already, else None."""
    return _MODULES.get(p.key)


def load(p: LoopPlan) -> Any:
    """The compiled module of ``p``: imported (numba loads or compiles each loop) on first
    use in this process, the source written first where no earlier process wrote it."""
    with _LOCK:
        got = _MODULES.get(p.key)
        if got is not None:
            return got
        path = _module_path(p.key)
        if not path.exists() or path.read_text() != p.source:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_text(p.source)
            os.replace(tmp, path)  # atomic: another process never imports half a file
        name = f"ember_fused_{p.key}"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # numba's cache locates functions through the module
        spec.loader.exec_module(module)
        _MODULES[p.key] = module
        return module


def load_soon(p: LoopPlan, ready: Callable[[Any], None]) -> None:
    """`load` on a background thread, then ``ready(module)``; errors leave numpy's path."""
    def work() -> None:
        try:
            ready(load(p))
        except Exception as e:  # no numba, an unwritable cache: the numpy path stays
            FAILED[p.key] = e

    with _LOCK:
        first = _PENDING.get(p.key)
        if first is None:
            thread = threading.Thread(target=work, daemon=True, name="ember-fusion-compile")
            _PENDING[p.key] = thread
        else:  # another kernel of the same source is compiling it: wait there, then load
            def after() -> None:
                first.join()
                work()

            thread = threading.Thread(target=after, daemon=True, name="ember-fusion-compile")
        _STARTED[:] = [t for t in _STARTED if t.is_alive()]
        _STARTED.append(thread)
    thread.start()


def wait(timeout: float | None = None) -> None:
    """Wait for the background compilations started so far (tests, benchmarks)."""
    with _LOCK:
        threads = list(_STARTED)
    for thread in threads:
        thread.join(timeout)
