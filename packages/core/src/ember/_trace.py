"""Recording the kernels one call of a function runs, for `ember.compile` to replay.

While a `Tracer` is active, every kernel a primitive backend runs (``Backend.dispatch``) and
every fused group a Fusion device executes is reported to it with the payloads it read and
the payloads it returned.  Payloads are identified by object: one the trace produced is a
*slot* of the program; one it did not produce is an *external*, resolved at the end of the
trace to what holds it (an argument of the compiled function, or a tensor object such as a
parameter or an optimizer's moment, noted when decorators and backends saw it as an
argument), or else kept as a constant.

Host numbers that must change between replays (a learning rate, a random op's counter) reach
kernels as `HostFloat` / `HostInt`: a number that remembers how to read itself again; the
program calls that again on every replay instead of baking the traced value.
"""

from __future__ import annotations

import operator
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._tensor import Tensor

__all__ = ["TRACE", "VALUE_SHAPED", "HostFloat", "HostInt", "Tracer", "host_number", "plain"]

#: called with ``True`` when the first trace opens and with ``False`` when the last one closes
#: (`ember._device` points decorator devices at `Decorator.dispatch_noting` meanwhile)
ON_TRACING: list[Callable[[bool], None]] = []


class _Traces(list["Tracer"]):
    """The stack of open traces.  Opening the first and closing the last tell `ON_TRACING`, so
    decorators need no per-op test of their own; ``if TRACE:`` costs what it costs on a list."""

    def append(self, tracer: Tracer) -> None:
        super().append(tracer)
        if len(self) == 1:
            for hook in ON_TRACING:
                hook(True)

    def remove(self, tracer: Tracer) -> None:
        super().remove(tracer)
        if not self:
            for hook in ON_TRACING:
                hook(False)


#: the active tracer, if any (a list so that hot paths test it with one global look-up)
TRACE: list[Tracer] = _Traces()


#: ops whose output *shape* depends on the values of their inputs: a replay cannot reuse the
#: traced shape, so tracing one breaks the trace (boolean-mask indexing goes through nonzero)
VALUE_SHAPED = frozenset({"nonzero"})


# -- host numbers that replays read again ----------------------------------------------------

def _host(value: Any, getter: Callable[[], Any]) -> Any:
    return HostInt(value, getter) if type(value) is int else HostFloat(value, getter)


class _HostArithmetic:
    """Arithmetic on host numbers that keeps the link: ``lr * wd`` re-reads ``lr``."""

    getter: Callable[[], Any]

    def _lift(self, other: Any, fn: Callable[[Any, Any], Any]) -> Any:
        mine = self.getter
        value = self._plain()
        if isinstance(other, _HostArithmetic):
            theirs = other.getter
            return _host(fn(value, other._plain()), lambda: fn(mine(), theirs()))
        if isinstance(other, int | float) and not isinstance(other, bool):
            c = other
            return _host(fn(value, c), lambda: fn(mine(), c))
        return NotImplemented

    def _rlift(self, other: Any, fn: Callable[[Any, Any], Any]) -> Any:
        return self._lift(other, lambda a, b: fn(b, a))

    def _plain(self) -> Any:
        raise NotImplementedError

    def __add__(self, o: Any) -> Any: return self._lift(o, operator.add)
    def __radd__(self, o: Any) -> Any: return self._rlift(o, operator.add)
    def __sub__(self, o: Any) -> Any: return self._lift(o, operator.sub)
    def __rsub__(self, o: Any) -> Any: return self._rlift(o, operator.sub)
    def __mul__(self, o: Any) -> Any: return self._lift(o, operator.mul)
    def __rmul__(self, o: Any) -> Any: return self._rlift(o, operator.mul)
    def __truediv__(self, o: Any) -> Any: return self._lift(o, operator.truediv)
    def __rtruediv__(self, o: Any) -> Any: return self._rlift(o, operator.truediv)
    def __pow__(self, o: Any) -> Any: return self._lift(o, operator.pow)
    def __rpow__(self, o: Any) -> Any: return self._rlift(o, operator.pow)

    def __neg__(self) -> Any:
        g = self.getter
        return _host(-self._plain(), lambda: -g())


class HostFloat(_HostArithmetic, float):  # type: ignore[misc]  # pow returns a host number, not float's overloads
    """A float that a replay recomputes with ``getter()`` (a learning rate)."""

    def __new__(cls, value: float, getter: Callable[[], float]) -> HostFloat:
        self = float.__new__(cls, value)
        self.getter = getter
        return self

    def _plain(self) -> float:
        return float.__float__(self)

    def __reduce__(self) -> Any:  # pickles / deep-copies as the plain number
        return (float, (float.__float__(self),))


class HostInt(_HostArithmetic, int):  # type: ignore[misc]  # as HostFloat
    """An int that a replay recomputes with ``getter()`` (a step count, a random op's
    counter)."""

    #: whether reading it again changes state (a random op's counter): a replay that must not
    #: call it twice, or bake it, cannot be captured once and launched many times
    advances = False

    def __new__(cls, value: int, getter: Callable[[], int], advances: bool = False) -> HostInt:
        self = int.__new__(cls, value)
        self.getter = getter
        self.advances = advances
        return self

    def _plain(self) -> int:
        return int.__int__(self)

    def __reduce__(self) -> Any:
        return (int, (int.__int__(self),))


def host_number(value: Any, getter: Callable[[], Any]) -> Any:
    """``value`` linked to ``getter`` while a trace records (plain numbers otherwise)."""
    if TRACE and type(value) in (int, float):
        return _host(value, getter)
    return value


def plain(v: Any) -> Any:
    """A traced parameter value without its host link."""
    if isinstance(v, _HostArithmetic):
        return v._plain()
    return v


# -- the tracer ------------------------------------------------------------------------------

class Call:
    """One recorded kernel call: ``outs = fn(*ins, **params, **{k: g() for k, g in dyn})``."""

    __slots__ = ("dyn", "fn", "ins", "outs", "params", "tuple_out", "where")

    def __init__(self, fn: Callable[..., Any], ins: list[int], params: dict[str, Any],
                 dyn: dict[str, Callable[[], Any]], outs: list[int], tuple_out: bool,
                 where: str) -> None:
        self.fn, self.ins, self.params, self.dyn = fn, ins, params, dyn
        self.outs, self.tuple_out, self.where = outs, tuple_out, where


class TraceBreak(RuntimeError):
    """Raised inside a trace where the function cannot be recorded (a host read)."""


class Tracer:
    """Collects `Call`s; payloads become integer slots (see the module docstring)."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.calls: list[Call] = []
        self.slot: dict[int, int] = {}          # id(payload) -> slot
        self.values: list[Any] = []             # slot -> the traced payload (kept alive)
        self.external: dict[int, int] = {}      # slot -> index in self.values of an external
        self.holder: dict[int, Any] = {}        # id(payload) -> ("arg", i) | tensor holder
        self.seen: dict[int, Any] = {}          # id(tensor) -> tensor, classified already
        self.replaced: dict[int, tuple[Tensor, Any]] = {}  # id(t) -> (t, payload before)
        self.replaced_payloads: dict[int, Tensor] = {}     # id(payload before) -> first t
        self.new_state: str | None = None      # why this trace made state (a warm-up)
        #: host numbers the call changed (a step count): (dict, key, how a replay recomputes)
        self.host_writes: list[tuple[dict[Any, Any], Any, Callable[[], Any]]] = []
        self.paused = 0
        self.advancing = False                  # a kernel reads a counter that advances

    # -- what backends call ---------------------------------------------------------------

    def record(self, fn: Callable[..., Any], payloads: Sequence[Any], params: dict[str, Any],
               out: Any, multi: bool) -> None:
        """``fn(*payloads, **params)`` returned ``out`` (a tuple when ``multi``)."""
        if self.paused or threading.get_ident() != self.thread:
            return
        slot = self.slot
        ins = []
        for p in payloads:
            s = slot.get(id(p))
            if s is None:
                s = self._new_slot(p)
                self.external[s] = s
            ins.append(s)
        static: dict[str, Any] = {}
        dyn: dict[str, Callable[[], Any]] = {}
        for k, v in params.items():
            if isinstance(v, _HostArithmetic):
                dyn[k] = v.getter
                self.advancing = self.advancing or getattr(v, "advances", False)
            static[k] = plain(v)
        outs = [self._new_slot(o) for o in (out if multi else (out,))]
        self.calls.append(Call(fn, ins, static, dyn, outs, multi, _user_line()))

    def _new_slot(self, payload: Any) -> int:
        s = len(self.values)
        self.values.append(payload)
        self.slot[id(payload)] = s
        return s

    def note_args(self, args: Sequence[Tensor]) -> None:
        """Tensors some device saw as arguments: candidate holders of external payloads."""
        if self.paused or threading.get_ident() != self.thread:
            return
        seen = self.seen
        for a in args:
            if id(a) in seen:
                continue
            seen[id(a)] = a
            payload = peek_payload(a)
            if payload is not None and id(payload) not in self.slot:
                self.holder.setdefault(id(payload), a)

    def note_replace(self, t: Tensor) -> None:
        """`ember._capture.replace` is about to give ``t`` a new payload."""
        if id(t) not in self.replaced:
            self.replaced[id(t)] = (t, t._data)
            payload = peek_payload(t)
            if payload is None:
                return
            other = self.replaced_payloads.setdefault(id(payload), t)
            if other is not t and self.new_state is None:
                # two tensors held one payload (``b = a.detach().clone()`` shares it) and each
                # gets its own new value: the program has one slot for both, so a replay would
                # read one tensor for the other's uses.  After this call they hold separate
                # payloads: it is a warm-up, and the next call traces them apart.
                self.new_state = (f"two tensors ({other.dtype.name} {list(other.shape)}) "
                                  "shared one payload until this call gave each its own value")
            if id(payload) not in self.slot:
                # what gets a new value is the identity that lasts: it beats any other holder
                self.holder[id(payload)] = t

    def note_new_state(self, why: str) -> None:
        """The traced call created state that later calls read (an optimizer's first step):
        this trace is a warm-up, and the next call traces again."""
        if self.new_state is None:
            self.new_state = why

    def value_shaped(self, op: str) -> None:
        """An op whose output shape depends on values (`VALUE_SHAPED`) is about to run."""
        if threading.get_ident() != self.thread or self.paused:
            return
        raise TraceBreak(
            f"ember.compile: {op} at {_user_line()} makes a tensor whose shape depends on the "
            "values of its input (nonzero, indexing with a boolean mask); a compiled function "
            "replays with the shapes of its trace, so it cannot contain one. Use a "
            "shape-preserving form (where, masked_fill, multiplying by the mask) or leave "
            "that code out of the compiled function.")

    def host_read(self, t: Tensor) -> None:
        """A value is about to be read back to the host inside the trace."""
        if threading.get_ident() != self.thread or self.paused:
            return
        raise TraceBreak(
            f"ember.compile: the function reads a tensor's value back to the host at "
            f"{_user_line()} ({t.dtype.name} {list(t.shape)} on {t.device}); a compiled "
            "function runs as a recording that cannot depend on values, so .item(), "
            ".numpy(), .tolist(), printing, bool() and data-dependent Python branches are "
            "not allowed inside it. Return the tensor and read it after the call, or leave "
            "that code out of the compiled function.")


def peek_payload(t: Tensor) -> Any:
    """The innermost payload behind ``t`` without forcing lazy values (``None`` if pending)."""
    dev = t._device
    while dev.inner is not None:
        inner = dev.backend.peek(t)  # type: ignore[attr-defined]  # a Decorator: dev.inner is set
        if inner is None:
            return None
        t, dev = inner, inner._device
    return t._data


_OWN = ("ember", "ember_")


def _user_line() -> str:
    """``file:line`` of the innermost frame outside ember's own packages (the conformance
    suite's cases in ``ember.testing`` count as the user's)."""
    f = sys._getframe(2)
    while f is not None:
        name = f.f_globals.get("__name__", "")
        # ember.testing's cases call ember as users do: their lines are the user's
        if not (name == "ember" or name.startswith(("ember.", "ember_"))) or \
                name.startswith("ember.testing"):
            return f"{f.f_code.co_filename}:{f.f_lineno}"
        f = f.f_back  # type: ignore[assignment]  # loop ends at None
    return "<unknown>"
