"""What a backend is: a name, its dtypes, host transfer, and a table ``{Op: kernel}``.

A *primitive backend* (cpu, opencl, cuda) subclasses `Backend`, fills ``kernels`` and stores
whatever array type it likes as the tensor payload (``Tensor.payload``); the payload must expose
a ``shape`` tuple.  Kernels are called as ``kernel(*payloads, **params)`` and return a payload (or
a tuple for multi-output ops); core works out the result dtype from the op's rule.

A *decorator* (autodiff, fusion) subclasses `Decorator` and overrides :meth:`dispatch`, which
sees whole tensors and may hand any op to its inner device unchanged.

The contract between core and a plugin is public names only (docs/writing-a-decorator.md):
a tensor's ``payload``, ``device`` and ``dtype``, ``tensor_type.from_payload(payload, device,
dtype)`` to make one, and the optional hooks below, each declared here with its default.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ._dtype import DType
from ._errors import DTypeError, OutOfMemoryError, allocation_error
from ._tensor import Tensor
from ._trace import TRACE, VALUE_SHAPED

if TYPE_CHECKING:
    from ._device import Device
    from .ops import Op

__all__ = ["Backend", "Decorator", "Kernel", "lift", "lower", "lower_to", "set_payload"]

def _distinct(out: Any) -> Any:
    """``out`` with numpy scalars made 0-d arrays: numpy returns one interned object for every
    0-d bool result (``np.True_``), and a trace tells values apart by their objects."""
    if type(out) is tuple:
        return tuple(np.array(o) if isinstance(o, np.generic) else o for o in out)
    return np.array(out) if isinstance(out, np.generic) else out


#: backends that render the kernel IR, told of ops defined after they were made
_RENDERING: weakref.WeakSet[Backend] = weakref.WeakSet()


def adopt_everywhere(name: str) -> None:
    """Give every backend that renders the kernel IR a kernel for newly defined op ``name``
    (`ember.backend.ir.define` calls it)."""
    for backend in list(_RENDERING):
        backend.adopt(name)


#: backends that render row programs, told of row kernels defined after they were made
_ROW_RENDERING: weakref.WeakSet[Backend] = weakref.WeakSet()


def adopt_rows_everywhere(name: str) -> None:
    """Give every backend that renders row programs a kernel for newly defined row kernel
    ``name`` (`ember.backend.rows.define` calls it)."""
    for backend in list(_ROW_RENDERING):
        backend.adopt_row(name)

Kernel = Callable[..., Any]

# how numpy refuses a size beyond the address space (before trying to allocate it)
_TOO_BIG = ("array is too big", "Maximum allowed dimension exceeded",
            "Maximum allowed size exceeded")


class Backend:
    """Base class of primitive backends.

    Subclasses set ``name``, ``dtypes`` and ``kernels`` and implement :meth:`from_numpy` and
    :meth:`to_numpy`.  ``device`` is filled in by core when the backend is attached.
    """

    name: str = "backend"
    dtypes: frozenset[DType] = frozenset()
    kernels: dict[Op, Kernel]
    device: Device
    #: the class of this backend's tensors: `Tensor`, or a subclass with methods of its own
    #: (``AutodiffTensor.backward``); core makes results with ``tensor_type.from_payload``
    tensor_type: type[Tensor] = Tensor
    #: optional fast path of the eager binary ops: ``dispatch_binary(op, a, b)`` for two
    #: floating tensors of this device with one dtype (broadcasting already checked) returns
    #: the result tensor, or ``None`` to have core call :meth:`dispatch` as usual.  A backend
    #: that can answer recurring calls in one step (the Triton backends' recorded launches)
    #: sets it to a method; ``None`` costs core one attribute look-up.
    dispatch_binary: Callable[[Op, Tensor, Tensor], Tensor | None] | None = None
    #: optional: how this backend replays an `ember.compile` program.  ``capture_program(p)``
    #: gets a new ``ember._program.Program`` and returns a callable that does what
    #: ``p.runner(externals)`` does (runs the recorded kernels on the external payloads and
    #: returns the result payloads), e.g. as one CUDA graph launch; or ``None`` to keep the
    #: generated Python.  ``None`` (the default): every backend's kernels are replayed as calls.
    capture_program: Callable[[Any], Callable[[list[Any]], Any] | None] | None = None
    #: optional: lets `ember.compile` write a kernel's result into an input that dies there.
    #: An object with ``can_overwrite(kernel, inputs, position, output) -> bool`` (the traced
    #: payloads: may ``kernel(*inputs, out=inputs[position])`` compute ``output`` in place?)
    #: and ``shares(a, b) -> bool`` (may two payloads share memory?); optionally
    #: ``can_update(kernel, inputs, position, index, outputs) -> bool`` (may
    #: ``kernel(*inputs, out=...)`` write its result ``index`` into ``inputs[position]``, the
    #: value that result replaces: an optimizer step's parameter), used by a program's
    #: ``updating`` variant (`ember._program.Program`).  ``None``: never.
    inplace: Any = None

    def __init__(self) -> None:
        if not hasattr(self, "kernels"):
            self.kernels = {}
        if type(self).ir_kernel is not Backend.ir_kernel:
            from .backend import ir

            _RENDERING.add(self)
            for name in ir.names():
                self.adopt(name)
        if type(self).row_kernel is not Backend.row_kernel:
            from .backend import rows

            _ROW_RENDERING.add(self)
            for name in rows.names(ops=True):
                self.adopt_row(name)

    # -- ops from the kernel IR --------------------------------------------------------------

    def ir_kernel(self, op: Op) -> Kernel | None:
        """A kernel for elementwise ``op`` rendered from its definition in the kernel IR
        (`ember.backend.ir`), or ``None``.  A backend that renders the IR overrides this; core
        then calls it for every defined elementwise op the backend's table lacks (also for ops
        declared and defined after the backend was made), so a new op needs no backend code."""
        return None

    def adopt(self, name: str) -> None:
        """Add the kernel of IR-defined op ``name`` to the table, unless it has one."""
        from .ops import registry

        op = registry.get(name)
        if op is not None and op.group == "elementwise" and op not in self.kernels:
            kernel = self.ir_kernel(op)
            if kernel is not None:
                self.kernels[op] = kernel

    def row_kernel(self, op: Op) -> Kernel | None:
        """A kernel for ``op`` rendered from its row program (`ember.backend.rows`), or
        ``None``.  A backend that renders row programs overrides this; core calls it for every
        defined row kernel whose op the table lacks (also for ones defined later), so a new
        row kernel needs no backend code.  The kernel takes the op's payloads (the row is the
        last axis of the elem inputs) and its params."""
        return None

    def adopt_row(self, name: str) -> None:
        """Add the kernel of row kernel ``name`` to the table, unless it has one."""
        from .ops import registry

        op = registry.get(name)
        if op is not None and op not in self.kernels:
            kernel = self.row_kernel(op)
            if kernel is not None:
                self.kernels[op] = kernel

    # -- data movement ---------------------------------------------------------------------

    def from_numpy(self, array: np.ndarray, dtype: DType) -> Any:
        """Copy a host array (already of ``dtype``'s numpy type) into a new payload."""
        raise NotImplementedError

    def to_numpy(self, payload: Any, dtype: DType) -> np.ndarray:
        """Copy a payload back to a host array; this is a synchronisation point."""
        raise NotImplementedError

    def synchronize(self) -> None:
        """Block until queued work is done.  Synchronous backends need not override."""

    def recording(self) -> bool:
        """Whether device work is being recorded for replay now (a CUDA graph, a WebGPU
        command recording), so that nothing may be read back to the host: the kernel guards
        (`ember.backend.guard`) skip their index-value check then.  ``False`` by default."""
        return False

    def supports(self, dtype: DType) -> bool:
        return dtype in self.dtypes

    def memory_stats(self) -> dict[str, int]:
        """Allocator figures (bytes) where the backend keeps them."""
        return {}

    # -- optional hooks: each has a default that core relies on ------------------------------

    def record_error(self, values: Any, low: int, high: int, message: str,
                     exc: type[Exception], *, inside: bool = False,
                     skip: int | None = None) -> bool:
        """Check on the device, with no host sync, that every value of payload ``values`` lies
        in ``[low, high)`` (inside it with ``inside``; ``skip`` always passes), raising
        ``exc(message)`` at the next sync if one does not (PyTorch's device-side asserts).

        Core's value checks (index bounds, integer division by zero) call it first; ``False``
        (the default) means "not deferred here": core reads the values to the host and checks
        them there.  A backend that defers (the Triton backends) returns ``True``.
        """
        return False

    def to_dlpack(self, payload: Any, stream: Any = None) -> Any:
        """A DLPack capsule sharing ``payload``'s memory, or ``None`` (the default) to have
        ``Tensor.__dlpack__`` export a host copy."""
        return None

    def dlpack_device(self) -> tuple[int, int]:
        """The DLPack ``(device_type, index)`` of this backend's payloads; ``(1, 0)`` (the
        host) by default."""
        return (1, 0)

    def from_dlpack(self, obj: Any) -> tuple[Any, DType] | None:
        """``(payload, dtype)`` sharing a DLPack producer's memory, or ``None`` (the default)
        to have `ember.from_dlpack` import it through a host numpy array."""
        return None

    # -- dispatch ---------------------------------------------------------------------------

    def implements(self, op: Op) -> bool:
        """Whether ``op`` runs here as a kernel of this backend's own.

        Core asks this of composite ops (`ember.ops.composite`) before dispatching one, and
        computes the op from primitives when the answer is no.  A table look-up.
        """
        return op in self.kernels

    def dispatch(self, op: Op, args: Sequence[Tensor], params: dict[str, Any]) -> Any:
        """Run ``op`` on tensors of this device and wrap the result(s) as tensors.

        The op's shape rule (``op.check``, see `ember.ops.check_shapes`) runs first: params
        and shapes that do not fit raise `ShapeError` before any kernel runs, on every device
        and behind every decorator (they all end here), and behind Remote's server."""
        check = op.check
        if check is not None:  # params and shapes checked before any kernel sees them; None
            # (nothing to check: elementwise ops) costs one attribute look-up
            n = len(args)  # one and two inputs spelled out: no comprehension call
            if n == 1:
                check((args[0]._data.shape,), params)
            elif n == 2:
                check((args[0]._data.shape, args[1]._data.shape), params)
            else:
                check([a._data.shape for a in args], params)
        kernel = self.kernels.get(op)
        if kernel is None:
            raise NotImplementedError(f"op {op.name!r} is not implemented on device {self.device}")
        n = len(args)
        try:  # free unless raised (Python 3.11's zero-cost exceptions)
            if TRACE:  # ember.compile is recording: the kernel call is part of the program
                tracer = TRACE[0]
                if op.name in VALUE_SHAPED:
                    tracer.value_shaped(op.name)
                tracer.note_args(args)
                payloads = [a._data for a in args]
                out = _distinct(kernel(*payloads, **params))
                tracer.record(kernel, payloads, params, out, op.outputs != 1)
            # one and two inputs spelled out: a comprehension is a call of its own on Python 3.11
            elif params:
                if n == 1:
                    out = kernel(args[0]._data, **params)
                else:
                    out = kernel(*[a._data for a in args], **params)
            elif n == 2:
                out = kernel(args[0]._data, args[1]._data)
            elif n == 1:
                out = kernel(args[0]._data)
            else:
                out = kernel(*[a._data for a in args])
        except (MemoryError, ValueError) as exc:
            oom = self.memory_error(op, args, params, exc)
            if oom is None or oom is exc:
                raise
            raise oom from exc
        device = self.device
        if op.outputs == 1:
            t = object.__new__(device.tensor_type)
            t._data = out
            t._device = device
            t._dtype = args[0]._dtype if op.result == "same" else op.result_rule(  # type: ignore[assignment]  # single-output rules give one DType
                args, params)
            return t
        dtype: Any = op.result_rule(args, params)
        make = device.tensor_type._make
        return tuple(make(o, device, d) for o, d in zip(out, dtype, strict=True))

    def memory_error(self, op: Op, args: Sequence[Tensor], params: dict[str, Any],
                     exc: BaseException) -> OutOfMemoryError | None:
        """The `OutOfMemoryError` that ``exc``, raised by ``op``'s kernel, stands for; ``None``
        if ``exc`` is no allocation failure (it is then re-raised as it is).

        Called by :meth:`dispatch` only when a kernel raises.  A `MemoryError` is one (the
        shape and dtype are taken from it where it carries them, as backends' own
        `OutOfMemoryError` and numpy's do, else from a creation op's parameters), and so is
        numpy's `ValueError` for a size beyond the address space.  The error names the op and
        this device; a backend whose allocator fails another way overrides this.
        """
        if isinstance(exc, ValueError):
            if not str(exc).startswith(_TOO_BIG):
                return None
        elif not isinstance(exc, MemoryError):
            return None
        if isinstance(exc, OutOfMemoryError) and exc.device is not None:
            return exc  # complete already (raised by a dispatch inside this kernel)
        shape = getattr(exc, "shape", None)
        dtype = getattr(exc, "dtype", None)
        nbytes = getattr(exc, "nbytes", None)
        if isinstance(exc, OutOfMemoryError):
            reason = exc.reason
        elif shape is not None:  # numpy's own: its message says no more than the fields
            reason = ""
        else:
            reason = f"{type(exc).__name__}: {exc}"
        if shape is None and "shape" in params:
            shape, dtype, nbytes = params["shape"], params.get("dtype"), None
        if shape is None and args:
            inputs = ", ".join(f"{tuple(a.shape)} {a._dtype.name}" for a in args)
            reason = f"inputs {inputs}" + (f"; {reason}" if reason else "")
        return allocation_error(shape, dtype, nbytes, self.device, op=op.name, reason=reason)

    def require(self, dtype: DType) -> None:
        if not self.supports(dtype):
            raise DTypeError(f"device {self.device} does not support dtype {dtype.name}")


class Decorator(Backend):
    """Base class of decorator devices: a device that wraps ``inner``.

    By default everything falls through to the inner device (:meth:`dispatch` unwraps the
    arguments, runs the op there and wraps the results); a decorator overrides
    :meth:`dispatch` for the ops it has work for, and :meth:`wrap`/:meth:`unwrap`.
    """

    tensor_type: type[Tensor]

    def __init__(self, inner: Device) -> None:
        super().__init__()
        self.inner = inner
        self.name = type(self).__name__.lower()

    def supports(self, dtype: DType) -> bool:
        return self.inner.supports(dtype)

    def implements(self, op: Op) -> bool:
        """Composites decompose into primitives unless a decorator says it handles the op
        (then its inner device must implement it too)."""
        return False

    def synchronize(self) -> None:
        self.inner.synchronize()

    def memory_stats(self) -> dict[str, int]:
        return self.inner.backend.memory_stats()

    def dispatch(self, op: Op, args: Sequence[Tensor], params: dict[str, Any]) -> Any:
        """Run ``op`` on the inner device: each argument unwrapped, each result wrapped.

        A decorator overrides this for the ops it has work for and hands the rest here (or
        straight to ``self.inner.dispatch``).  It need not deal with `ember.compile`: while a
        trace is open, the device calls :meth:`dispatch_noting` instead."""
        unwrap, wrap = self.unwrap, self.wrap
        out = self.inner.dispatch(op, [unwrap(a) for a in args], params)
        if type(out) is tuple:
            return tuple([wrap(o) for o in out])
        return wrap(out)

    def dispatch_noting(self, op: Op, args: Sequence[Tensor], params: dict[str, Any]) -> Any:
        """:meth:`dispatch`, having shown the open `ember.compile` trace the arguments (what
        holds the payloads a program reads from outside).  Core points a decorator device's
        ``dispatch`` here while a trace is open, and back when the last one closes, so that
        no decorator tests for a trace on its per-op path."""
        if TRACE:
            TRACE[0].note_args(args)
        return self.dispatch(op, args, params)

    def wrap(self, inner: Tensor) -> Tensor:
        """An inner-device tensor seen as a tensor of this device."""
        raise NotImplementedError

    def unwrap(self, tensor: Tensor) -> Tensor:
        """The inner-device tensor behind a tensor of this device (a sync point where the
        decorator defers work)."""
        raise NotImplementedError

    def peek(self, tensor: Tensor) -> Tensor | None:
        """The inner-device tensor behind ``tensor`` if no deferred work must run to get it,
        else ``None``; `ember.compile`'s trace reads payloads this way.  The default is
        :meth:`unwrap`, right for a decorator that defers nothing; Fusion overrides it."""
        return self.unwrap(tensor)

    def from_numpy(self, array: np.ndarray, dtype: DType) -> Any:
        raise NotImplementedError  # decorators create tensors through wrap()

    def to_numpy(self, payload: Any, dtype: DType) -> np.ndarray:
        raise NotImplementedError  # decorators read through unwrap()


# -- decorator stacks ------------------------------------------------------------------------------

def _decorator(device: Device) -> Decorator:
    return cast(Decorator, device.backend)


def lower(t: Tensor) -> Tensor:
    """The tensor behind ``t`` on the innermost device of its decorator stack (no tape)."""
    dev = t.device
    while dev.inner is not None:
        t = _decorator(dev).unwrap(t)
        dev = t.device
    return t


def lower_to(t: Tensor, device: Device) -> Tensor:
    """``t`` unwrapped until it lives on ``device`` (one of the devices of its stack)."""
    dev = t.device
    while dev is not device:
        if dev.inner is None:
            raise ValueError(f"device {device} is not part of {t.device}'s stack")
        t = _decorator(dev).unwrap(t)
        dev = t.device
    return t


def lift(t: Tensor, device: Device) -> Tensor:
    """``t`` (on ``device`` or on a device inside its stack) seen as a tensor of ``device``."""
    if t.device is device:
        return t
    if device.inner is None:
        raise ValueError(f"cannot lift a tensor of {t.device} to {device}")
    return _decorator(device).wrap(lift(t, device.inner))


def set_payload(t: Tensor, payload: Any) -> None:
    """Give ``t`` another payload in place: how a decorator that defers work swaps its
    placeholder for the computed payload once it has run (Fusion), and how a capture puts back
    the payload it lent.  Anything that already read ``t`` keeps what it read.  (Optimizers
    give a parameter a new value the same way, through core's capture-aware path; a plugin
    that changes a tensor's value while `ember.compile` traces is not seen by the trace.)"""
    t._data = payload
