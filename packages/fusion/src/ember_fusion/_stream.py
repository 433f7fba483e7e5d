"""A per-thread stream of recorded ops, its flush, and the plan cache that makes flushes cheap.

While ops are recorded, the stream builds the *signature* of what it holds (op, params,
dtype, shape and input positions of every node, shapes and dtypes of external inputs).  At a
flush the signature plus "which nodes are still held" is the key of the plan cache: a steady
loop (a training step) finds its plan there and runs it without any analysis.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from ember.backend import TRACE, set_payload

from ._graph import Handle, Node, Shape, params_key, pending
from ._partition import Plan, analyse

if TYPE_CHECKING:
    from ember import DType, Tensor
    from ember.ops import Op

    from ._backend import FusionBackend

__all__ = ["FusionStats", "Stream"]

LOG = logging.getLogger("ember_fusion")
#: a stream this long is flushed at once, bounding what dead pending ops keep alive
MAX_PENDING = 16384
#: a stream whose external inputs (computed tensors it reads) that nothing but its pending ops
#: holds any more reach this many bytes is flushed at once: a long chain over many big inputs
#: (the gradient sum of an unrolled RNN's slices) would otherwise hold hundreds of MiB that
#: eager code frees and reuses as it goes (fresh memory is slow to touch: docs/fusion.md).
#: Inputs a Python object still holds (a chain's big input) cost nothing to keep.
MAX_EXTERNAL_BYTES = 8 << 20


@dataclass
class FusionStats:
    """Counters of one fusion device (``ember_fusion.stats(device)`` returns a copy).

    ``analysis_s`` is time spent deciding what to run: building plan keys, looking them up, and
    on a miss partitioning and compiling; ``execute_s`` is time spent running kernels.
    """

    ops_recorded: int = 0
    eager_ops: int = 0
    flushes: int = 0
    plan_hits: int = 0
    plan_misses: int = 0
    kernels_launched: int = 0
    views_run: int = 0
    values_written: int = 0
    kernels_compiled: int = 0
    kernel_cache_hits: int = 0
    analysis_s: float = 0.0
    execute_s: float = 0.0
    last_groups: tuple[str, ...] = ()
    counters: dict[str, int] = field(default_factory=lambda: {"kernels_compiled": 0,
                                                              "kernel_cache_hits": 0})

    def snapshot(self) -> FusionStats:
        return replace(self, kernels_compiled=self.counters["kernels_compiled"],
                       kernel_cache_hits=self.counters["kernel_cache_hits"],
                       counters=dict(self.counters))


class Stream:
    """The ops one thread recorded on one fusion device since its last flush."""

    def __init__(self, backend: FusionBackend) -> None:
        self.backend = backend
        self.lock = threading.RLock()
        self._clear()

    def _clear(self) -> None:
        self.nodes: list[Node] = []
        #: per node: (op, params, dtype, shape, where its inputs come from: a node's index,
        #: or ``-1 - k`` for external input k)
        self.sig: list[tuple[Any, ...]] = []
        #: the external inputs (computed values the stream reads): their payloads, and the
        #: handle of each one a flush computed (`_dropped_bytes` asks whether it is held)
        self.ext_values: list[Any] = []
        self.ext_handles: list[weakref.ref[Handle] | None] = []
        self.ext_sig: list[tuple[Shape, DType]] = []
        self.ext_index: dict[int, int] = {}
        self.ext_bytes = 0
        self.ext_check = MAX_EXTERNAL_BYTES  # ext_bytes at which to count dropped externals

    def record(self, op: Op, params: dict[str, Any], args: Sequence[Tensor], shape: Shape,
               dtype: DType) -> Handle:
        """Record ``op`` on fusion tensors ``args``; the handle of its pending value."""
        for a in args:
            d = a.payload
            if type(d) is Handle:
                xs = d.node.stream
                if xs is not self and xs is not None:
                    xs.flush()  # pending on another thread: its value is needed here
        with self.lock:
            refs: list[int] = []
            for a in args:
                d = a.payload
                if type(d) is Handle:
                    x: Node = d.node
                    if x.stream is self:
                        refs.append(x.index)
                        continue
                    # computed by a flush (maybe of this stream, by another thread just now)
                    k = self.ext_index.get(id(x.value.payload)) if x.value is not None else None
                    if k is None:
                        k = self._external(a)
                else:  # keyed by payload: one value read twice is one input
                    k = self.ext_index.get(id(d))
                    if k is None:
                        k = self._external(a)
                refs.append(-1 - k)
            nodes = self.nodes
            index = len(nodes)
            handle = pending(shape, dtype, op, params, self, index)  # held: not dead yet
            nodes.append(handle.node)
            self.sig.append((op, params_key(params) if params else (), dtype, shape,
                             tuple(refs)))
            if index + 1 >= MAX_PENDING:
                self.flush()
            elif self.ext_bytes >= self.ext_check:
                if self._dropped_bytes() >= MAX_EXTERNAL_BYTES:
                    self.flush()
                else:
                    self.ext_check = self.ext_bytes + MAX_EXTERNAL_BYTES
        return handle

    def _external(self, tensor: Tensor) -> int:
        """Make the computed value of ``tensor`` an external input; its number."""
        d = tensor.payload
        live: weakref.ref[Handle] | None = None
        if type(d) is Handle:
            x: Node = d.node
            if x.value is None:
                self.backend.unwrap(tensor)  # raises: why the value is missing
            d, live = x.value.payload, x.handle  # type: ignore[union-attr]  # not None here
        k = self.ext_index[id(d)] = len(self.ext_values)
        self.ext_values.append(d)
        self.ext_handles.append(live)
        s = d.shape if type(d.shape) is tuple else tuple(d.shape)
        self.ext_sig.append((s, tensor.dtype))
        self.ext_bytes += math.prod(s) * tensor.dtype.itemsize
        return k

    def _dropped_bytes(self) -> int:
        """Bytes of the external inputs that only this stream's pending ops still hold."""
        total = 0
        values = self.ext_values
        for k, h in enumerate(self.ext_handles):
            if h is not None:  # computed by a flush: its handle is its tensors' payload
                dropped = h() is None
            else:
                # an eager result: its tensors hold the payload itself; here the list and
                # getrefcount's argument do
                dropped = sys.getrefcount(values[k]) <= 2
            if dropped:
                shape, dtype = self.ext_sig[k]
                total += math.prod(shape) * dtype.itemsize
        return total

    def flush(self) -> None:
        """Compute every pending node that is still held; drop the others unwritten."""
        with self.lock:
            nodes = self.nodes
            if not nodes:
                return
            backend = self.backend
            stats = backend.stats
            t0 = time.perf_counter()
            sig, xv, ext_sig = self.sig, self.ext_values, self.ext_sig
            # every pending node has a handle (`pending`): held is "it is still alive"
            held = tuple([n.handle() is not None for n in nodes])  # type: ignore[misc]  # set
            key: Any = (tuple(sig), tuple(ext_sig), held)
            self._clear()
            try:
                plan: Plan | None = backend.plans.get(key)
            except TypeError:  # a param value that is not hashable: key it by its text
                key = repr(key)
                plan = backend.plans.get(key)
            if plan is None:
                backend.trim_caches()
                plan = analyse(nodes, [e[4] for e in sig], ext_sig, held, backend.compiler,
                               backend.inner, backend.kernel_cache, stats.counters)
                backend.plans[key] = plan
                backend.learn(plan)
                stats.plan_misses += 1
                hit = "miss"
            else:
                stats.plan_hits += 1
                hit = "hit"
            t1 = time.perf_counter()
            vals: list[Any] = [None] * len(nodes)
            try:
                if TRACE:  # ember.compile is recording: the whole flush is one call
                    tracer = TRACE[0]
                    tracer.paused += 1
                    try:
                        out = _run_plan(plan, len(nodes), *xv)
                    finally:
                        tracer.paused -= 1
                    tracer.record(partial(_run_plan, plan, len(nodes)), xv, {}, out, True)
                    for i, v in zip(plan.keep, out, strict=True):
                        vals[i] = v
                else:
                    for step in plan.steps:
                        step.run(vals, xv)
            except BaseException as exc:
                # the error surfaces here, at the sync point; the values it took are lost
                for n in nodes:
                    n.stream = None
                    n.error = exc
                raise
            inner = backend.inner
            make = inner.tensor_type.from_payload
            for i in plan.keep:
                n = nodes[i]
                n.value = make(vals[i], inner, n.dtype)
            for n in nodes:
                n.stream = None
            if not TRACE:  # (a trace follows payloads: it reads these through their handles)
                for i in plan.keep:
                    # the tensor that recorded the node holds the computed payload from now
                    # on, as an eagerly computed one does: later ops on it are plain eager ops
                    owner = nodes[i].owner
                    t = owner() if owner is not None else None
                    if t is not None and type(t.payload) is Handle and \
                            t.payload.node is nodes[i]:
                        set_payload(t, vals[i])
            t2 = time.perf_counter()
            stats.flushes += 1
            stats.ops_recorded += len(nodes)
            stats.kernels_launched += plan.kernels
            stats.views_run += plan.views
            stats.values_written += plan.written
            stats.analysis_s += t1 - t0
            stats.execute_s += t2 - t1
            stats.last_groups = plan.groups
            if LOG.isEnabledFor(logging.DEBUG):
                LOG.debug("%s flush: %d ops, %d kept -> %d kernel(s), %d view(s), plan %s: %s",
                          backend.device, len(nodes), len(plan.keep), plan.kernels, plan.views,
                          hit, " ".join(plan.groups))


def _run_plan(plan: Plan, n: int, *xv: Any) -> tuple[Any, ...]:
    """Run a flush's plan on external payloads; the payloads of the nodes it keeps."""
    vals: list[Any] = [None] * n
    ext = list(xv)
    for step in plan.steps:
        step.run(vals, ext)
    return tuple(vals[i] for i in plan.keep)
