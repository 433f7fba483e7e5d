"""The ``fusion<inner>`` decorator: record fusible ops lazily, run everything else eagerly."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from types import MethodType
from typing import TYPE_CHECKING, Any

from ember import Tensor
from ember.backend import TRACE, Backend, Decorator, HostFloat, HostInt

from ._compiler import FusedKernel, ReferenceCompiler
from ._graph import SHAPE_RULES, VIEW_RULES, Handle, Node, Shape, _broadcast, numel
from ._partition import KernelStep
from ._stream import FusionStats, Stream

if TYPE_CHECKING:
    from ember import DType
    from ember.backend import Device
    from ember.ops import Op

    from ._partition import Plan


__all__ = ["FusionBackend"]

#: how many plans / kernels a device keeps before starting afresh (a guard against streams
#: that never recur, e.g. shapes that change every step)
CACHE_LIMIT = 4096


class FusionBackend(Decorator):
    """``fusion<inner>``: tensors are lazy; ops are recorded into a per-thread stream.

    A sync point (``.numpy()``, ``.item()``, printing, a device move, an op the inner device
    cannot fuse) flushes the stream: the recorded graph is cut into fused groups, each run as
    one kernel of the inner backend's fusion compiler.  Intermediates no Python object holds
    any more are never materialised.

    Examples
    --------
    >>> import ember, ember_fusion
    >>> x = ember.arange(4.0, device="fusion<cpu>")
    >>> (x * 2 + 1).tolist()
    [1.0, 3.0, 5.0, 7.0]
    """

    tensor_type = Tensor

    def __init__(self, inner: Device, **options: Any) -> None:
        if inner.inner is not None:
            raise ValueError(
                f"fusion<{inner}> is not supported: Fusion must wrap a hardware device. "
                f"Put other decorators outside it, e.g. autodiff<fusion<{inner.base}>> "
                "(autodiff's backward pass is then fused too)")
        super().__init__(inner)
        self.name = "fusion"
        self.inner_kernels = inner.backend.kernels
        compiler = _compiler_for(inner)
        configure = getattr(compiler, "configure", None)
        if configure is not None:
            # the compiler uses this backend's own table (plugins may have changed kernels)
            compiler = configure(kernels=self.inner_kernels, **options)
        elif options:
            raise ValueError(f"the fusion compiler of {inner} takes no options: {options}")
        self.compiler = compiler
        # the backend's own method: the device's is Decorator.dispatch_noting during a trace
        self._inner_dispatch = inner.backend.dispatch
        #: the inner backend implements what its table holds (`implements` reads the table)
        self._plain_implements = type(inner.backend).implements is Backend.implements
        self._make = self.tensor_type.from_payload
        self._inner_make = inner.tensor_type.from_payload
        # A computed fusion tensor's payload is the inner device's own payload (a pending one's
        # is a `Handle`), so an op run eagerly is the inner kernel called on the very payloads
        # with results made as this device's tensors: `Backend.dispatch` on this backend with
        # the inner table, no wrapping of inputs or results.  An inner backend with a dispatch
        # of its own gets its inputs wrapped as its tensors instead.
        self._kernel: Callable[[Op, Sequence[Tensor], dict[str, Any]], Any] = self._on_inner
        if type(inner.backend).dispatch is Backend.dispatch:
            self.kernels = self.inner_kernels
            self._kernel = MethodType(Backend.dispatch, self)
        #: ops whose inputs are all computed and whose tensors have at most this many
        #: elements run eagerly (the compiler's measured break-even; 0: always record)
        self.eager_below: int = int(getattr(compiler, "eager_below", 0))
        #: a flush ran groups of at most this many ops as the inner kernels, unfused
        self.plain_nodes: int = int(getattr(compiler, "plain_nodes", 0))
        #: (op, input shapes, params) of ops on computed inputs bigger than the eager threshold
        #: -> run them eagerly: their result is small, or a flush ran them as a group of their
        #: own (`learn`: recording them only added a flush)
        self.decided: dict[tuple[Any, ...], bool] = {}
        #: (op, input shapes, params) of ops on pending inputs that a flush ran as a group of
        #: their own -> their inputs are computed and they run eagerly (a matmul after a fused
        #: chain: it heads a group of its own anyway; recording it only made the flush longer)
        self.alone: dict[tuple[Any, ...], bool] = {}
        self._alone_ops: set[Op] = set()
        self.plans: dict[Any, Plan] = {}
        self.kernel_cache: dict[Any, FusedKernel] = {}
        self.stats = FusionStats()
        self._fusible: dict[tuple[Op, DType], bool] = {}
        self._local = threading.local()
        #: core's fast path of eager binary ops, where the inner backend has one: two
        #: computed inputs whose op, shapes and params Fusion decided to run eagerly go
        #: straight to the inner backend's (the result retagged as this device's)
        inner_binary = inner.backend.dispatch_binary
        if inner_binary is not None:
            self._inner_binary = inner_binary
            self.dispatch_binary = self._dispatch_binary

    # -- streams ---------------------------------------------------------------------------

    def stream(self) -> Stream:
        """This thread's stream."""
        try:
            s: Stream = self._local.stream
        except AttributeError:
            s = self._local.stream = Stream(self)
        return s

    def trim_caches(self) -> None:
        """Start the caches afresh when streams never recur (called at each plan miss)."""
        if len(self.plans) > CACHE_LIMIT:
            self.plans.clear()
        if len(self.alone) > CACHE_LIMIT:
            self.alone.clear()
            self._alone_ops.clear()
        if len(self.kernel_cache) > CACHE_LIMIT:
            self.kernel_cache.clear()

    def learn(self, plan: Plan) -> None:
        """After a plan miss: remember the ops whose groups ran unfused (alone, or with at
        most ``plain_nodes - 1`` others): recording them only added work to a flush."""
        if not self.plain_nodes:
            return
        for step in plan.steps:
            if type(step) is not KernelStep or len(step.group.nodes) > self.plain_nodes:
                continue
            head = step.group.nodes[0]
            inputs = step.group.inputs
            key = _decision_key(head.op, [inputs[-1 - a][0] for a in head.args], head.params)
            # group input k is step.ins[k]: a stream slot, or an external (computed) value
            learnt = (self.decided if all(step.ins[-1 - a] < 0 for a in head.args)
                      else self.alone)
            try:
                learnt[key] = True
            except TypeError:  # a param value that is not hashable: not remembered
                continue
            if learnt is self.alone:
                self._alone_ops.add(head.op)

    def synchronize(self) -> None:
        self.stream().flush()
        self.inner.synchronize()

    # -- dispatch ----------------------------------------------------------------------------

    def implements(self, op: Op) -> bool:
        """A composite (softmax, layer_norm, linear, an LSTM cell, an Adam step...) runs as the
        inner device's own kernel where it has one: that kernel beats the decomposition's
        primitives, fused or not.  It runs eagerly (a sync point for its inputs)."""
        if not op.composite:
            return False
        if self._plain_implements:
            return op in self.inner_kernels
        return self.inner.implements(op)

    def dispatch(self, op: Op, args: Sequence[Tensor], params: dict[str, Any]) -> Any:
        if TRACE:  # ember.compile is recording (core has shown it the args: dispatch_noting)
            if any(isinstance(v, HostFloat | HostInt) for v in params.values()):
                return self._eager(op, args, params)  # replays re-read it: not baked in
        # every input computed: a view, an op Fusion does not record, an op whose result is
        # small, or one that a flush ran alone costs less run now than recorded and flushed (a
        # group that fits one block runs the inner device's kernels op by op, so fusing it
        # gains nothing; a reduction or matmul of big inputs to a small result runs whole,
        # fused or not, and so would the small ops after it; a view is a view either way).
        # A computed payload is the inner device's own (its numpy array on cpu): the op is
        # the inner kernel called on the very payloads, as on the inner device itself.
        for a in args:
            d = a.payload
            if type(d) is Handle:
                if d.node.value is None:  # pending: record (or sync)
                    return self._lazy(op, SHAPE_RULES.get(op), args, params)
                return self._handles(op, args, params)
        rule = SHAPE_RULES.get(op)
        if rule is not None:
            limit = self.eager_below
            if limit:
                # a bound of the result's elements: an elementwise op on inputs of one shape
                # has that shape; otherwise at most the product of the inputs' elements (one
                # input: no more than it has; a tensor and a scalar: the tensor's)
                n = len(args)
                if n == 1:
                    size = args[0].payload.size
                elif n == 2:
                    x, y = args[0].payload, args[1].payload
                    size = x.size * y.size
                    if size > limit and rule is _broadcast and x.shape == y.shape:
                        size = x.size
                else:
                    size = 1
                    for a in args:
                        size *= a.payload.size
                if size > limit and not self._decide(op, rule, args, params):
                    return self._lazy(op, rule, args, params)
            elif not self._decide(op, rule, args, params):
                return self._lazy(op, rule, args, params)
        self.stats.eager_ops += 1
        return self._kernel(op, args, params)

    def _dispatch_binary(self, op: Op, a: Tensor, b: Tensor) -> Tensor | None:
        """`Backend.dispatch_binary`: an op already decided to run eagerly on these computed
        inputs' shapes runs as the inner backend's fast path; anything else (a pending input,
        an op not decided yet, or one the inner fast path declines) returns ``None``, and core
        calls `dispatch`."""
        x, y = a.payload, b.payload
        if type(x) is Handle or type(y) is Handle or not self.decided.get((op, x.shape, y.shape)):
            return None
        out = self._inner_binary(op, a, b)  # reads the payloads and dtypes only
        if out is None:
            return None
        self.stats.eager_ops += 1
        return self._make(out.payload, self.device, out.dtype)

    def _decide(self, op: Op, rule: Any, args: Sequence[Tensor], params: dict[str, Any]) -> bool:
        """Whether an op on computed inputs above the eager threshold runs eagerly anyway:
        its result is small, or `learn` saw a flush run it alone.  Decided once per op,
        shapes and params."""
        # `_decision_key`, spelled out for one and two inputs: this runs for every such op
        n = len(args)
        if n == 2:
            s0, s1 = args[0].payload.shape, args[1].payload.shape
            key = (op, s0, s1, *params.items()) if params else (op, s0, s1)
        elif n == 1:
            s0 = args[0].payload.shape
            key = (op, s0, *params.items()) if params else (op, s0)
        else:
            key = (op, *[a.payload.shape for a in args], *params.items())
        try:
            now = self.decided.get(key)
        except TypeError:  # a param value that is not hashable
            return bool(numel(rule([a.payload.shape for a in args], params)) <= self.eager_below)
        if now is None:
            if len(self.decided) > CACHE_LIMIT:
                self.decided.clear()
            now = numel(rule([a.payload.shape for a in args], params)) <= self.eager_below
            self.decided[key] = now
        return now

    def _lazy(self, op: Op, rule: Any, args: Sequence[Tensor], params: dict[str, Any]) -> Any:
        """Record ``op`` (whose `SHAPE_RULES` entry is ``rule``, or ``None``) in this thread's
        stream, or run it now where it cannot be fused."""
        if rule is not None:
            dtype: DType = args[0].dtype if op.result == "same" else op.result_rule(  # type: ignore[assignment]  # 1 output
                args, params)
            key = (op, dtype)
            ok = self._fusible.get(key)
            if ok is None:
                ok = self._fusible[key] = bool(self.compiler.fusible(op, dtype))
            if not ok:
                return self._eager(op, args, params)
            if op in self._alone_ops:
                try:
                    alone = self.alone.get(
                        _decision_key(op, [a.payload.shape for a in args], params), False)
                except TypeError:  # a param value that is not hashable
                    alone = False
                if alone:
                    return self._eager(op, args, params)
        else:
            rule = VIEW_RULES.get(op)
            if rule is None:
                return self._eager(op, args, params)
            dtype = args[0].dtype
        # a payload's shape: a handle's, or the inner payload's (a tuple on every backend;
        # made one where it is not, since shapes key plans)
        n = len(args)
        shape = rule([args[0].payload.shape, args[1].payload.shape] if n == 2 else
                     [a.payload.shape for a in args], params)
        if type(shape) is not tuple:
            shape = tuple(shape)
        try:
            stream: Stream = self._local.stream
        except AttributeError:
            stream = self.stream()
        handle = stream.record(op, params, args, shape, dtype)
        t = self._make(handle, self.device, dtype)
        handle.node.owner = weakref.ref(t)
        return t

    def _handles(self, op: Op, args: Sequence[Tensor], params: dict[str, Any]) -> Any:
        """Some inputs' payloads are handles: record the op where one is pending; else decide
        again on the inner payloads that a flush computed, as for eagerly computed inputs."""
        plain = []
        for a in args:
            d = a.payload
            if type(d) is Handle:
                value = d.node.value
                if value is None:  # pending: record (or sync)
                    return self._lazy(op, SHAPE_RULES.get(op), args, params)
                a = self._make(value.payload, self.device, a.dtype)
            plain.append(a)
        return self.dispatch(op, plain, params)

    def _on_inner(self, op: Op, args: Sequence[Tensor], params: dict[str, Any]) -> Any:
        """Run ``op`` on computed inputs through the inner device's own dispatch."""
        make, inner = self._inner_make, self.inner
        return self._wrap_out(self._inner_dispatch(
            op, [make(a.payload, inner, a.dtype) for a in args], params))

    def _eager(self, op: Op, args: Sequence[Tensor], params: dict[str, Any]) -> Any:
        """An op the compiler cannot fuse: a sync point for its inputs, run on the inner
        device as every eager op is (`_kernel`), on their computed payloads."""
        plain = [a if type(a.payload) is not Handle
                 else self._make(self.unwrap(a).payload, self.device, a.dtype) for a in args]
        self.stats.eager_ops += 1
        return self._kernel(op, plain, params)

    def _wrap_out(self, out: Any) -> Any:
        if type(out) is tuple:
            return tuple(self.wrap(o) for o in out)
        return self._make(out.payload, self.device, out.dtype)

    # -- host transfer -------------------------------------------------------------------------

    def wrap(self, inner: Tensor) -> Tensor:
        return self._make(inner.payload, self.device, inner.dtype)

    def peek(self, tensor: Tensor) -> Tensor | None:
        """The inner tensor behind ``tensor`` if it is computed already, else ``None``."""
        d = tensor.payload
        if type(d) is Handle:
            value: Tensor | None = d.node.value
            return value
        return self._inner_make(d, self.inner, tensor.dtype)

    def unwrap(self, tensor: Tensor) -> Tensor:
        """The inner tensor behind ``tensor``: a sync point that runs its pending stream."""
        d = tensor.payload
        if type(d) is not Handle:
            return self._inner_make(d, self.inner, tensor.dtype)
        node: Node = d.node
        value = node.value
        if value is None:
            stream = node.stream
            if stream is not None:
                stream.flush()
            value = node.value
            if value is None and node.error is not None:
                raise RuntimeError("this value was pending in a flush that failed: "
                                   f"{type(node.error).__name__}: {node.error}") from node.error
            if value is None:
                raise RuntimeError(f"ember_fusion: {node!r} was dropped unmaterialised although "
                                   "a tensor still refers to it (a bug: please report it)")
        return value


def _decision_key(op: Op, shapes: list[Shape], params: dict[str, Any]) -> tuple[Any, ...]:
    """``FusionBackend.decided``'s key: the op, its inputs' shapes, its params (flat)."""
    return (op, *shapes, *params.items())


def _compiler_for(inner: Device) -> Any:
    from ember.backend import plugin_manager

    compiler = plugin_manager().hook.ember_fusion_compiler(backend=inner.backend.name)
    if compiler is None:
        return ReferenceCompiler(inner)
    return compiler
