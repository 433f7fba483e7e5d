"""`ember.compile`: trace a function once, replay its kernels with no per-op Python.

The first call with a given *signature* (the guards: argument shapes, dtypes and devices,
non-tensor arguments by value, grad mode, the `ember.autocast` regions open in the thread, the
train/eval mode of the modules and the options of the optimizers the function refers to) runs
the function eagerly while a `Tracer` records every kernel the device stack runs.  The
recording becomes a `Program`: straight-line Python that calls those kernels on the payloads
of the new arguments and of the tensors the function read (parameters, optimizer state), then
gives the tensors the function updated in place (`ember.nn._values.rebind`, optimizer state)
their new payloads and returns fresh tensors in the shape of the traced result.  Later calls
with the same signature run the program.

What the trace cannot see is baked in: Python numbers computed from values that are not
arguments, tensors the function reads that are not arguments, parameters, buffers or
optimizer state.  Learning rates (read through `ember._trace.HostFloat`) and random numbers
(a generator's counter, `HostInt`) are re-read on every replay.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import types
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from . import _capture, _trace
from ._grad_mode import STATE
from ._program import Program, base_payload, maker, putter
from ._tensor import Tensor
from .amp._state import guard_key as _autocast_key

__all__ = ["CompileStats", "CompiledFunction", "compile"]

LOG = logging.getLogger("ember.compile")
if os.environ.get("EMBER_COMPILE_LOG", "") not in ("", "0"):
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    LOG.addHandler(_handler)
    LOG.setLevel(logging.INFO)

_LOCK = threading.RLock()


# -- flattening arguments and results ------------------------------------------------------

def _flatten(obj: Any, leaves: list[Any]) -> Any:
    """``obj``'s structure with every leaf replaced by its index in ``leaves``."""
    if isinstance(obj, Tensor):
        leaves.append(obj)
        return _Leaf(len(leaves) - 1)
    if type(obj) in (tuple, list):
        return type(obj)(_flatten(o, leaves) for o in obj)
    if _is_namedtuple(obj):  # sort, topk, max(dim) return (values, indices)
        return type(obj)(*(_flatten(o, leaves) for o in obj))
    if type(obj) is dict:
        return {k: _flatten(v, leaves) for k, v in obj.items()}
    leaves.append(obj)
    return _Leaf(len(leaves) - 1)


@dataclass(frozen=True)
class _Leaf:
    index: int


def _unflatten(tree: Any, leaves: list[Any]) -> Any:
    if type(tree) is _Leaf:
        return leaves[tree.index]
    if type(tree) in (tuple, list):
        return type(tree)(_unflatten(t, leaves) for t in tree)
    if _is_namedtuple(tree):
        return type(tree)(*(_unflatten(t, leaves) for t in tree))
    if type(tree) is dict:
        return {k: _unflatten(v, leaves) for k, v in tree.items()}
    return tree


def _is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(type(obj), "_fields")


def _leaf_guard(x: Any) -> Any:
    if isinstance(x, Tensor):
        return (x._device, x._dtype, tuple(x._data.shape), x.requires_grad)
    try:
        hash(x)
    except TypeError:
        return ("id", type(x).__name__, id(x))
    return (type(x).__name__, x)


# -- what the function refers to -------------------------------------------------------------

def _referenced(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[list[Any], list[Any]]:
    """Modules and optimizers ``fn`` can reach, a few references deep: the globals its code
    names, its closure and defaults, a bound method's ``self``, the attributes of plain objects
    among those (a trainer holding a model), nested functions, and its arguments."""
    from .nn.module import Module
    from .optim.optimizer import Optimizer

    modules: dict[int, Any] = {}
    optimizers: dict[int, Any] = {}
    seen: set[int] = set()
    todo: list[tuple[Any, int]] = [(fn, 0)] + [(a, 1) for a in args]
    while todo:
        obj, depth = todo.pop()
        if id(obj) in seen or depth > 3 or isinstance(obj, Tensor | type | types.ModuleType):
            continue
        seen.add(id(obj))
        if isinstance(obj, Module):
            for m in obj.modules():
                modules.setdefault(id(m), m)
            continue
        if isinstance(obj, Optimizer):
            optimizers.setdefault(id(obj), obj)
            continue
        nxt: list[Any] = []
        if isinstance(obj, types.FunctionType):
            glb = obj.__globals__
            nxt += [glb[n] for n in obj.__code__.co_names if n in glb]
            nxt += [c.cell_contents for c in obj.__closure__ or () if _has_contents(c)]
            nxt += list(obj.__defaults__ or ())
        elif isinstance(obj, types.MethodType):
            nxt += [obj.__self__, obj.__func__]
        elif isinstance(obj, functools.partial):
            nxt += [obj.func, *obj.args, *obj.keywords.values()]
        elif isinstance(obj, list | tuple):
            nxt += list(obj)[:64]
        elif isinstance(obj, dict):
            nxt += list(obj.values())[:64]
        elif hasattr(obj, "__dict__"):  # a plain object: a trainer, a step object
            nxt += list(vars(obj).values())
        todo += [(o, depth + 1) for o in nxt]
    return list(modules.values()), list(optimizers.values())


def _has_contents(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018  # an empty cell raises
    except ValueError:
        return False
    return True


def _options_guard(optimizers: list[Any]) -> Any:
    """Every option of every group but the learning rate (which replays re-read), and each
    optimizer's version (an eager step or a load replaces its state tensors)."""
    out: list[Any] = []
    for opt in optimizers:
        out.append(("version", getattr(opt, "_version", 0)))
        for g in opt.param_groups:
            out.append(tuple(sorted((k, _hashable(v)) for k, v in g.items()
                                    if k not in ("params", "lr", "initial_lr"))))
    return tuple(out)


def _hashable(v: Any) -> Any:
    try:
        hash(v)
    except TypeError:
        return repr(v)
    return v


# -- compile ---------------------------------------------------------------------------------

@dataclass
class CompileStats:
    """What a compiled function did: traces (and why), replays, warm-ups, evictions."""

    traces: int = 0
    replays: int = 0
    warmups: int = 0
    evictions: int = 0
    reasons: list[str] = field(default_factory=list)


class CompiledFunction:
    """``ember.compile(fn)``: call it like ``fn``.  See `compile`."""

    def __init__(self, fn: Callable[..., Any], cache_size: int = 8) -> None:
        if cache_size < 1:
            raise ValueError(f"cache_size must be at least 1, got {cache_size}")
        self.fn = fn
        self.cache_size = int(cache_size)
        self.stats = CompileStats()
        self._cache: OrderedDict[Any, Program] = OrderedDict()
        self._last_key: Any = None
        self._refs: tuple[list[Any], list[Any]] | None = None
        self.__name__ = getattr(fn, "__name__", "compiled")
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        """As a method decorator: one compiled function per instance."""
        if obj is None:
            return self
        name = f"_ember_compiled_{id(self)}"
        bound = obj.__dict__.get(name)
        if bound is None:
            bound = CompiledFunction(self.fn.__get__(obj, objtype), self.cache_size)
            obj.__dict__[name] = bound
        return bound

    def _key(self, flat: list[Any], tree: Any) -> Any:
        if self._refs is None:  # found once: the objects a function refers to rarely change
            self._refs = _referenced(self.fn, tuple(flat))
        modules, optimizers = self._refs
        return (repr(tree), tuple(_leaf_guard(x) for x in flat), STATE.enabled,
                _autocast_key(), tuple(m.training for m in modules),
                _options_guard(optimizers), _capture.GENERATION[0])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        flat: list[Any] = []
        tree = _flatten((args, kwargs), flat)
        key = self._key(flat, tree)
        program = self._cache.get(key)
        if program is not None:
            self._cache.move_to_end(key)
            self.stats.replays += 1
            return program.run(flat)
        return self._record(key, flat, args, kwargs)

    def _why(self, key: Any) -> str:
        old = self._last_key
        if old is None:
            return "first call"
        names = ("argument structure", "argument shapes/dtypes/devices/values", "grad mode",
                 "autocast regions", "module train/eval mode",
                 "optimizer options or eager optimizer steps",
                 "parameters or optimizer state replaced outside the function")
        changed = [n for n, a, b in zip(names, old, key, strict=True) if a != b]
        if not changed:
            return "the previous trace was a warm-up" if old == key else "new signature"
        if "argument shapes/dtypes/devices/values" in changed:
            diffs = [f"argument {i}: {a} -> {b}"
                     for i, (a, b) in enumerate(zip(old[1], key[1], strict=False)) if a != b]
            return "; ".join(diffs[:3]) or ", ".join(changed)
        return ", ".join(changed)

    def _record(self, key: Any, flat: list[Any], args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> Any:
        from ._backend import lower

        why = self._why(key)
        self.stats.traces += 1
        self.stats.reasons.append(why)
        del self.stats.reasons[:-16]
        LOG.info("%s: tracing (%s)", self.__name__, why)
        tensors = [x for x in flat if isinstance(x, Tensor)]
        for t in tensors:  # nothing pending from before the call belongs to the trace
            t._device.synchronize()
        tr = _trace.Tracer()
        arg_payloads = {id(base_payload(t)): i for i, t in enumerate(flat)
                        if isinstance(t, Tensor)}
        with _LOCK:
            _trace.TRACE.append(tr)
            _capture._ACTIVE.append(tr)
            try:
                result = self.fn(*args, **kwargs)
                out_flat: list[Any] = []
                out_tree = _flatten(result, out_flat)
                outputs = []
                for i, x in enumerate(out_flat):
                    if isinstance(x, Tensor):
                        outputs.append((lower(x)._data, (maker(x), i)))
                writes = []
                for t, _old in tr.replaced.values():
                    writes.append((lower(t)._data, t, putter(t)))
            finally:
                _capture._ACTIVE.remove(tr)
                _trace.TRACE.remove(tr)
        self._last_key = key
        if tr.new_state is not None:
            self.stats.warmups += 1
            LOG.info("%s: warm-up trace, not kept (%s)", self.__name__, tr.new_state)
            return result
        slots = []
        for payload, spec in outputs:
            slots.append((self._slot(tr, payload, arg_payloads), spec))
        wslots = [(self._slot(tr, p, arg_payloads), t, put) for p, t, put in writes]
        leaves = [None if isinstance(x, Tensor) else x for x in out_flat]
        base = next((t._device.base for t in [*flat, *out_flat] if isinstance(t, Tensor)), None)
        inplace = getattr(base.backend, "inplace", None) if base is not None else None
        program = Program(tr, arg_payloads, slots, wslots, out_tree, leaves, _unflatten,
                          inplace)
        if len(self._cache) >= self.cache_size:
            self._cache.popitem(last=False)
            self.stats.evictions += 1
            LOG.info("%s: trace cache full (%d), dropped the oldest", self.__name__,
                     self.cache_size)
        capture = getattr(base.backend, "capture_program", None) if base is not None else None
        if capture is not None:  # the backend replays the program its own way (CUDA graphs)
            runner = capture(program)
            if runner is not None:
                program.runner = runner
        self._cache[key] = program
        LOG.info("%s: recorded %d kernel call(s), %d constant(s), %d in place", self.__name__,
                 program.kernels, program.constants, program.inplace)
        return result

    @staticmethod
    def _slot(tr: _trace.Tracer, payload: Any, arg_payloads: dict[int, int]) -> int:
        s = tr.slot.get(id(payload))
        if s is None:  # never read by a kernel: an argument returned as it is, or a constant
            s = tr._new_slot(payload)
            tr.external[s] = s
        return s

    def programs(self) -> Iterator[Program]:
        """The recorded programs, oldest first."""
        return iter(list(self._cache.values()))


def compile(fn: Callable[..., Any] | None = None, *, cache_size: int = 8) -> Any:
    """Trace ``fn`` once per signature and replay the recorded kernels afterwards.

    Usable as ``ember.compile(fn)`` or as a decorator (``@ember.compile`` or
    ``@ember.compile(cache_size=4)``).  ``fn`` may run a whole training step (forward,
    ``backward()``, ``optimizer.step``) or an inference function on any device stack.
    See ``docs/compile.md`` for what is captured, the guards and what breaks a trace.

    Examples
    --------
    >>> import ember
    >>> @ember.compile
    ... def f(x):
    ...     return (x * 2).exp().sum()
    >>> x = ember.tensor([0.0, 1.0])
    >>> round(f(x).item(), 4), round(f(x + 1).item(), 4)
    (8.3891, 61.9872)
    >>> f.stats.traces, f.stats.replays
    (1, 1)
    """
    if fn is None:
        return lambda f: CompiledFunction(f, cache_size)
    if not callable(fn):
        raise TypeError(f"ember.compile expects a function, got {type(fn).__name__}")
    return CompiledFunction(fn, cache_size)
