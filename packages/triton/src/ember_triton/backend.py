"""`TritonBackend`: the device-independent Triton backend, parametrised by a memory layer.

``ember_cuda`` and ``ember_rocm`` give it CuPy memory and their driver (`ember_triton.gpu`);
``ember_cuda`` adds cuBLAS and its own launcher through the hooks of `ember_triton.vendor`.
The ``triton-interpret`` device gives it host memory, and its kernels run under Triton's
interpreter.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from ember.backend import (
    ALL_DTYPES,
    Backend,
    DType,
    Kernel,
    guard_kernels,
    ir,
    numpy_dtype,
)
from ember.backend import rows as row_programs
from ember.ops import Op

from . import (
    _aot,
    activation,
    attention,
    creation,
    elementwise,
    linalg,
    movement,
    nn,
    optim,
    reduction,
    rows,
)
from ._array import DeviceArray
from ._autotune import KernelSelector
from ._codegen import contiguous, run_binary
from ._inplace import TritonInplace
from ._jit import KernelLibrary
from ._memory import Memory
from .vendor import Launcher, VendorGemm, triton_launch

__all__ = ["TritonBackend"]

_FAMILIES = (creation, elementwise, reduction, movement, linalg, nn, rows, optim, attention,
             activation)


def _fast_launch_allowed() -> bool:
    if os.environ.get("EMBER_FAST_LAUNCH", "1") == "0":
        return False
    from triton import knobs

    # launch hooks (profilers) need the JIT's launch metadata: keep its path then.  Triton
    # >= 3.5 keeps them in (usually empty) HookChain objects, older versions as None.
    return not any(getattr(hook, "calls", hook) for hook in
                   (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook))


def launch_key(kernel: Any, args: Sequence[Any],
               meta: dict[str, Any]) -> tuple[tuple[Any, ...], list[Any]]:
    """What Triton specialises a compiled kernel on, computed cheaply; and the raw arguments.

    At least as fine as Triton's own specialisation: pointers by dtype and 16-byte alignment;
    integers by value (finer than Triton's ``== 1``, divisibility by 16 and width, and cheaper
    to compute: sizes and strides recur in a training loop); floats and bools by type;
    constexpr values as given.  Arrays (``DeviceArray`` or objects with ``data_ptr``) become
    their addresses in the raw arguments: a compiled launcher takes plain integers.
    """
    spec: list[Any] = [kernel]
    raw: list[Any] = []
    for a in args:
        t = type(a)
        if t is DeviceArray:
            p = a.ptr
            spec.append((a.dtype, p & 15 == 0))
            raw.append(p)
            continue
        if t is int:
            spec.append(a)
        elif t is float or t is bool or a is None:
            spec.append(t)
        elif hasattr(a, "data_ptr"):
            p = a.data_ptr()
            spec.append((a.dtype, p % 16 == 0))
            raw.append(p)
            continue
        else:
            spec.append(a)
        raw.append(a)
    spec.extend(meta.items())
    return tuple(spec), raw


class TritonBackend(Backend):
    """Every primitive as Triton kernels over a `Memory` layer.

    Parameters
    ----------
    memory : where arrays live (`HostMemory` for the interpreter, CuPy memory on GPUs).
    name : the backend's name (``triton-interpret``, ``cuda``, ``rocm``).
    matmul_precision : float32 matmul mode, ``"ieee"`` (strict, the default, like PyTorch) or
        ``"tf32"`` (tensor cores).

    Examples
    --------
    >>> import numpy as np
    >>> from ember import ops
    >>> from ember_triton import HostMemory, TritonBackend
    >>> be = TritonBackend(HostMemory(), "triton-interpret")
    >>> x = be.memory.from_numpy(np.arange(3.0))
    >>> be.to_numpy(be.kernels[ops.add](x, x), None)
    array([0., 2., 4.])
    """

    dtypes = frozenset(ALL_DTYPES)

    #: `ember.compile` may write an Adam update into the buffers it replaces (``_inplace``)
    inplace = TritonInplace()

    def __init__(self, memory: Memory, name: str = "triton",
                 matmul_precision: str = "ieee") -> None:
        self.memory = memory
        self.name = name
        self.matmul_precision = matmul_precision
        self.library = KernelLibrary.get(memory.interpret)
        #: long rows with few of them are reduced in two passes of ``reduce_chunk`` pieces
        self.split_reductions = not memory.interpret
        self.reduce_chunk = 1 << 14
        #: matmul's kernel selection: timed choices per shape bucket, cached on disk per GPU
        self.selector = KernelSelector(memory.device_id(), memory.timer)
        #: a vendor GEMM library's matmul candidates (`ember_triton.vendor`; set by a device
        #: plugin, ``None``: Triton's kernels only), and whether matmuls consult it
        self.vendor_gemm: VendorGemm | None = None
        self.use_vendor_gemm = True
        #: how a compiled kernel is launched again (`launch`): Triton's launcher, unless the
        #: device plugin sets its own (`ember_triton.vendor.Launcher`)
        self.make_launch: Launcher = triton_launch
        #: the device's multiprocessors (split-K matmuls fill them)
        self.processors = memory.processors()
        #: Hopper's TMA: kernel selection adds the persistent tensor-descriptor matmuls
        self.tma = memory.tma()
        #: deferred errors: a device int32 word of the first failed check's code (0: none)
        self._error_word: DeviceArray | None = None
        self._error_codes: dict[tuple[str, type[Exception]], int] = {}
        self._error_messages: dict[int, tuple[str, type[Exception]]] = {}
        self._errors_pending = False
        self._scalars: dict[tuple[Any, bytes], DeviceArray] = {}
        self._scalar_values: dict[tuple[Any, ...], DeviceArray] = {}
        #: recurring elementwise launches by operand layout (see `_codegen.elementwise`)
        self.elementwise_plans: dict[Any, tuple[Any, ...]] = {}
        #: compiled kernels by `launch_key`, launched without the JIT's binding
        self._launchers: dict[Any, Any] = {}
        self._planned: dict[Any, Any] = {}
        #: recurring matmuls by their arguments: one recorded launch each (`linalg._matmul_dot`)
        self.matmul_plans: dict[Any, Any] = {}
        #: recurring reductions likewise (`reduction._reduction`)
        self.reduce_plans: dict[Any, Any] = {}
        #: and fused optimizer updates (`optim._update`)
        self.adam_plans: dict[Any, Any] = {}
        self.fast_launch = not memory.interpret and _fast_launch_allowed()
        #: while a CUDA graph records (``ember_cuda.graph``): what must outlive the recording
        self.capture_keep: list[Any] | None = None
        self.kernels = {}
        own: dict[Any, functools.partial[Any]] = {}
        for family in _FAMILIES:
            for op, fn in family.KERNELS.items():
                self.kernels[op] = own[op] = functools.partial(fn, self)
        #: binary ops whose result has the operands' dtype, served by `dispatch_binary`
        self._same_binary = {op: name for op, name in elementwise.SAME_DTYPE_BINARY.items()
                             if own[op].func is elementwise.KERNELS[op]}
        guard_kernels(self)  # direct calls of the table check params and index values too
        super().__init__()

    def recording(self) -> bool:
        return self.capture_keep is not None  # a CUDA graph records (``ember_cuda.graph``)

    def dispatch_binary(self, op: Any, a: Any, b: Any) -> Any:
        """Core's fast path of eager binary ops (`ember._backend.Backend.dispatch_binary`): an
        arithmetic op whose operands' layouts recur runs its recorded launch (`run_binary`)
        and returns the tensor in this one call; anything else returns ``None`` and goes
        through `dispatch` (which records the launch)."""
        name = self._same_binary.get(op)
        if name is None:
            return None
        x, y = a.payload, b.payload
        plan = self.elementwise_plans.get(("binary", name, x.shape, x.strides, x.dtype, y.shape,
                                           y.strides, y.dtype))
        if plan is None:
            return None
        device = self.device
        return device.tensor_type.from_payload(run_binary(self, plan, x, y), device, a.dtype)

    # -- helpers for kernel families ---------------------------------------------------------

    def kernel_scope(self) -> dict[str, Any]:
        """Globals of generated kernels: triton, tl and the device math functions."""
        return self.library.scope()

    def module(self, name: str) -> Any:
        return self.library.module(name)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> DeviceArray:
        return self.memory.empty(shape, dtype)

    def scalar(self, value: Any, dtype: Any) -> DeviceArray:
        """A one-element array holding ``value`` in ``dtype`` (kernels load scalars).

        Kernels only read scalars, so each distinct value is uploaded once and reused: an
        upload is a host-to-device copy that would cost more than the launch it feeds.
        """
        # by the Python value first (converting it to bytes costs microseconds); -0.0 equals
        # 0.0 as a key, so the sign of zero is part of it
        fast = (value, type(value), dtype, value == 0 and math.copysign(1.0, value) < 0)
        arr = self._scalar_values.get(fast)
        if arr is None:
            host = np.asarray(value).astype(np.dtype(dtype)).reshape(())
            key = (host.dtype, host.tobytes())
            arr = self._scalars.get(key)
            if arr is None:
                if len(self._scalars) >= 4096:
                    self._scalars.clear()
                    self._scalar_values.clear()
                arr = self._scalars[key] = self.memory.from_numpy(host)
            if type(value) in (int, float, bool) and len(self._scalar_values) < 4096:
                self._scalar_values[fast] = arr
        if self.capture_keep is not None:  # a recorded launch keeps reading this address
            self.capture_keep.append(arr)
        return arr

    def block_size(self, n: int, cap: int = 1024) -> int:
        # the interpreter pays per program instance, so it takes big blocks
        top = 1 << 16 if self.memory.interpret else cap
        b = 16
        while b < n and b < top:
            b *= 2
        return b

    def launch(self, kernel: Any, grid: tuple[int, ...], *args: Any, **meta: Any) -> Any:
        """Run ``kernel`` over ``grid`` (``DeviceArray`` arguments become pointers).

        On a GPU, the first launch of a specialisation goes through Triton's JIT (which
        compiles it); later ones call the compiled kernel's launcher directly, skipping the
        JIT's argument binding (see `launch_key`).  ``EMBER_FAST_LAUNCH=0`` turns that off.
        Returns the compiled kernel's launch entry (see `run_compiled`) when it has one.
        """
        self.memory.activate()
        if self.fast_launch:
            key, raw = launch_key(kernel, args, meta)
            hit = self._launchers.get(key)
            if hit is not None:
                self.run_compiled(hit, grid, raw)
                return hit
        call = [a.arg() if isinstance(a, DeviceArray) else a for a in args]
        if self.memory.interpret:
            if _aot.recording():
                _aot.note_launch(self.library.origins.get(id(kernel)), kernel, call, meta)
            # the interpreter computes with numpy, which warns about inf/nan where a GPU is silent
            with np.errstate(all="ignore"):
                kernel[grid](*call, **meta)
            return None
        compiled = kernel[grid](*call, **meta)
        if self.fast_launch:
            rest = kernel.arg_names[len(call):]
            if compiled is not None and all(n in meta for n in rest):  # else: JIT each time
                if len(self._launchers) >= 16384:  # integers that never recur
                    self._launchers.clear()
                hit = self._launchers[key] = self.make_launch(compiled, raw,
                                                              tuple(meta[n] for n in rest))
                return hit
        return None

    def launch_planned(self, key: Any, kernel: Any, grid: tuple[int, ...],
                       arrays: Sequence[DeviceArray], scalars: Sequence[Any],
                       **meta: Any) -> None:
        """`launch` for a kernel whose arguments are ``arrays`` then ``scalars``, by a caller
        that knows a cheap ``key`` standing for the kernel, ``meta``, the arrays' dtypes, the
        scalars and ``grid``: a recurring key whose arrays are all 16-byte aligned runs its
        compiled entry without computing `launch_key` (what matmuls and reductions use)."""
        entry = self._planned.get(key)
        if entry is not None:
            bits = 0
            raw = []
            for a in arrays:
                p = a.ptr
                bits |= p
                raw.append(p)
            if not bits & 15:
                raw += scalars
                entry(grid, self.memory.stream(), raw)
                return
        hit = self.launch(kernel, grid, *arrays, *scalars, **meta)
        if hit is not None and not any(a.ptr & 15 for a in arrays):
            if len(self._planned) >= 16384:
                self._planned.clear()
            self._planned[key] = hit

    def run_compiled(self, entry: Any, grid: tuple[int, ...], raw: Sequence[Any]) -> None:
        """Launch a compiled kernel again without the JIT: ``entry`` is what `launch`
        returned (`make_launch`'s entry), ``raw`` the arguments with arrays as addresses
        (see `launch_key`)."""
        entry(grid, self.memory.stream(), raw)

    def contiguous(self, a: DeviceArray) -> DeviceArray:
        return contiguous(self, a)

    # -- Backend ----------------------------------------------------------------------------

    def row_kernel(self, op: Op) -> Kernel | None:
        """A row kernel known only from its row program (`ember_triton._rows_source`)."""
        from . import _rows_source

        if not row_programs.defined(op.name):
            return None
        return functools.partial(_rows_source.kernel(op.name), self)

    def ir_kernel(self, op: Op) -> Kernel | None:
        """An elementwise op known only from its kernel IR definition, rendered to Triton."""
        if not ir.defined(op.name):
            return None
        return functools.partial(elementwise.ir_kernel(op.name), self)

    def from_numpy(self, array: np.ndarray, dtype: DType) -> DeviceArray:
        return self.memory.from_numpy(np.asarray(array, dtype=numpy_dtype(dtype)))

    def to_numpy(self, payload: DeviceArray, dtype: DType | None) -> np.ndarray:
        # a fresh host copy: the caller may write into it
        out = self.memory.to_numpy(contiguous(self, payload))
        if self._errors_pending:
            self.raise_recorded_error()
        return out

    def synchronize(self) -> None:
        self.memory.synchronize()
        if self._errors_pending:
            self.raise_recorded_error()

    # -- deferred errors (PyTorch's device-side asserts) -------------------------------------

    def record_error(self, values: DeviceArray, low: int, high: int, message: str,
                     exc: type[Exception], *, inside: bool = False,
                     skip: int | None = None) -> bool:
        """Core's value checks (`ember._checks`) on this device, with no host sync: one
        kernel over ``values`` (failing where a value lies outside ``[low, high)``, or inside
        it with ``inside``; ``skip`` always passes) sets the device's error word to the
        check's code, which the next sync reads and raises as ``exc(message)``."""
        key = (message, exc)
        code = self._error_codes.get(key)
        if code is None:
            if len(self._error_codes) >= 1 << 16:  # distinct messages (shapes): start over
                self.synchronize()
                self._error_codes.clear()
                self._error_messages.clear()
            code = self._error_codes[key] = len(self._error_codes) + 1
            self._error_messages[code] = key
        if self._error_word is None:
            self._error_word = self.memory.from_numpy(np.zeros((1,), np.int32))
        flat = contiguous(self, values)
        n = flat.size
        block = self.block_size(n)
        self.launch(self.module("movement").check_values, (-(-n // block),), self._error_word,
                    flat, n, int(low), int(high), 0 if skip is None else int(skip), code,
                    INSIDE=inside, SKIP=skip is not None, BLOCK=block)
        self._errors_pending = True
        return True  # deferred: the next sync raises

    def raise_recorded_error(self) -> None:
        """Raise the first error recorded since the last sync (and clear the error word)."""
        self._errors_pending = False
        word = self._error_word
        if word is None:
            return
        code = int(self.memory.to_numpy(word)[0])
        if code:
            self._error_word = self.memory.from_numpy(np.zeros((1,), np.int32))
            message, exc = self._error_messages[code]
            raise exc(f"{message} (a check on {self.name} recorded when the op ran; "
                      "reported at this sync)")

    def memory_stats(self) -> dict[str, int]:
        return self.memory.stats()

