"""CUDA graphs: record one training step and replay it with one launch.

A Python step on ``cuda:0`` costs microseconds of host time per op; a replayed CUDA graph
launches all of the step's kernels at once (about a microsecond each).  `graph` runs a few
warm-up steps (kernels compile, kernel selection times its candidates, the optimizer makes its
state), then records one step on a side stream into a private memory pool.  Each
`CudaGraph.replay` runs that step again on the same buffers.

ember's tensors are values: an optimizer step gives each parameter a *new* payload.  While
recording, the core reports each such replacement (``ember._capture``); at the end of the
recording the new values are copied back into the buffers the recording read, and the
parameters get their old payloads back.  So every replay reads the parameters and optimizer
state where the previous replay left them, and ``model.state_dict()`` after a replay shows the
trained values.

What cannot be captured raises `CaptureError` and leaves the model and optimizer as they were
after the warm-up: host synchronisation inside the step (``.item()``, ``.numpy()``, printing),
host numbers that change every step (``Adam(capturable=False)``'s step count: create the
optimizer with ``capturable=True``), uploads of new host data.  Learning-rate changes and
random numbers drawn on the host are baked into the recording: re-record after changing them.

Examples
--------
>>> import ember, ember_cuda                                      # doctest: +SKIP
>>> opt = ember.optim.Adam(model.parameters(), capturable=True)   # doctest: +SKIP
>>> def step():                                                   # doctest: +SKIP
...     loss = loss_fn(model(x), y)
...     opt.step(loss.backward())
...     return loss
>>> g = ember_cuda.graph(step, device="cuda:0")                   # doctest: +SKIP
>>> for xb, yb in batches:                                        # doctest: +SKIP
...     g.load(x, xb); g.load(y, yb)
...     loss = g.replay()
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import ember
from ember.backend import CaptureError, Tensor, capturing, lower, lower_to, set_payload

if TYPE_CHECKING:
    from ember_triton.backend import TritonBackend

__all__ = ["CaptureError", "CudaGraph", "graph"]


def _cuda_device(device: Any) -> Any:
    """The ``cuda:N`` device at the bottom of ``device``'s decorator stack."""
    dev = ember.device(device)
    while dev.inner is not None:
        dev = dev.inner
    memory = getattr(dev.backend, "memory", None)
    if memory is None or type(memory).__name__ != "CupyMemory":
        raise ValueError(f"CUDA graphs need a cuda device at the bottom of the stack, got "
                         f"{ember.device(device)}")
    return dev


class _Recording:
    """Replacements seen while recording: tensor -> (old payload, old device array)."""

    def __init__(self, base: Any) -> None:
        self.base = base
        self.replaced: dict[int, tuple[Tensor, Any, Any]] = {}

    def note_replace(self, t: Tensor) -> None:
        if id(t) not in self.replaced:
            try:
                arr = lower_to(t, self.base).payload
            except ValueError:  # a tensor of another device: nothing the recording reads
                arr = None
            self.replaced[id(t)] = (t, t.payload, arr)

    def copy_back(self) -> None:
        """Record copies of the new values into the old buffers; restore the old payloads."""
        from ember_triton._codegen import elementwise

        be = self.base.backend
        for t, old_data, old_arr in self.replaced.values():
            if old_arr is None:
                continue
            new_arr = lower_to(t, self.base).payload
            if new_arr is not old_arr:
                elementwise(be, "r = x0", [new_arr], old_arr.dtype, out=old_arr, widen=False)
            set_payload(t, old_data)

    def restore(self) -> None:
        for t, old_data, _ in self.replaced.values():
            set_payload(t, old_data)


class CudaGraph:
    """A recorded step (see `graph`): `replay` runs it; `output` is what it returned."""

    def __init__(self, graph: Any, output: Any, keep: list[Any], base: Any) -> None:
        self._graph = graph
        self.output = output
        self._keep = keep  # memory pool, stream, scalars: alive as long as the recording
        self._base = base

    def replay(self) -> Any:
        """Run the recorded step once more on the current stream; returns `output` (its tensors
        hold this replay's values once the stream gets there)."""
        be = self._base.backend
        be.memory.activate()
        self._graph.launch(stream=be.memory.cupy.cuda.get_current_stream())
        return self.output

    __call__ = replay

    def load(self, dst: Tensor, src: Any) -> None:
        """Copy ``src`` into the buffer of ``dst`` (a tensor the step reads): new batch data."""
        from ember_triton._codegen import elementwise

        if not isinstance(src, Tensor):
            src = ember.tensor(src, dtype=dst.dtype, device=self._base)
        if tuple(src.shape) != tuple(dst.shape):
            raise ValueError(f"cannot load a {list(src.shape)} tensor into a recorded input "
                             f"of shape {list(dst.shape)}")
        d = lower(dst)
        if d.device is not self._base:
            raise ValueError(f"the recorded input lives on {dst.device}, not on the graph's "
                             f"device {self._base}")
        s = lower(src).to(self._base).to(dtype=dst.dtype)
        elementwise(cast("TritonBackend", self._base.backend), "r = x0", [s.payload],
                    d.payload.dtype, out=d.payload, widen=False)


def graph(step: Callable[[], Any], *, device: Any = "cuda:0", warmup: int = 3) -> CudaGraph:
    """Run ``step`` ``warmup`` times, then record one call of it as a CUDA graph.

    ``device`` is the stack the step runs on (``"autodiff<cuda:0>"`` works as well as
    ``"cuda:0"``).  The recorded call is not executed: after `graph` returns, the model is in
    its state after the warm-up steps, and each `CudaGraph.replay` advances it by one step.
    Raises `CaptureError` (naming the cause) when the step cannot be recorded.
    """
    if warmup < 1:
        raise ValueError("graph needs at least one warm-up step (kernels compile there)")
    base = _cuda_device(device)
    be = base.backend
    memory = be.memory
    cupy = memory.cupy
    memory.activate()
    base.synchronize()
    stream = cupy.cuda.Stream(non_blocking=True)
    pool = cupy.cuda.MemoryPool()
    # CuPy refuses cuBLAS calls while a stream captures: matmuls use ember's Triton kernels
    # (kernel selection picks among its tile configs during the warm-up)
    use_vendor, be.use_vendor_gemm = be.use_vendor_gemm, False
    with stream:
        try:
            for _ in range(warmup):
                step()
        finally:
            be.use_vendor_gemm = use_vendor
        stream.synchronize()
        rec = _Recording(base)
        keep: list[Any] = [pool, stream]
        be.capture_keep = keep  # scalars uploaded for the step stay alive with the graph
        be.use_vendor_gemm = False
        try:
            with cupy.cuda.using_allocator(pool.malloc), capturing(rec):
                stream.begin_capture()
                try:
                    output = step()
                    rec.copy_back()
                except BaseException:
                    rec.restore()
                    try:
                        stream.end_capture()
                    except Exception:  # the capture is already invalid: its error is the news
                        pass
                    raise
                recorded = stream.end_capture()
        except CaptureError:
            raise
        except Exception as exc:
            raise CaptureError(
                f"the step could not be recorded as a CUDA graph ({type(exc).__name__}: "
                f"{exc}); steps that read values back to the host (.item(), .numpy(), "
                "printing) or upload new host data cannot be captured") from exc
        finally:
            be.capture_keep = None
            be.use_vendor_gemm = use_vendor
    stream.synchronize()
    return CudaGraph(recorded, output, keep, base)


# -- ember.compile's programs as CUDA graphs ---------------------------------------------------

class ProgramGraph:
    """Replays an `ember.compile` program (``ember._program.Program``) as one CUDA graph.

    The first replay of a program runs it as Python (kernels compile, kernel selection
    times its candidates, the stream's cuBLASLt workspace is made) and records it on a side
    stream into a private memory pool; later replays copy new inputs into the buffers the
    recording reads (only those whose array changed: a new batch; parameters keep theirs) and
    launch the graph.  Tensors the program updates (parameters, optimizer state) are updated
    in the buffers the recording reads, inside the graph, and keep those buffers: an Adam
    step writes into them (``Program.updating``), other updates are copied there;
    results are copied out of the pool, so a returned tensor outlives the next replay.

    Host numbers the kernels read (a learning rate) are baked into a recording: a replay
    that finds one changed records again.  Programs with random ops (their generator's
    counter advances at every replay) run as Python, as do steps the graph cannot record.
    """

    def __init__(self, program: Any, base: Any) -> None:
        self.program = program
        self.base = base
        self.graph: Any = None
        self.static: list[Any] = []
        self.keep: list[Any] = []
        self.dyn: tuple[Any, ...] | None = None
        self.records = 0
        readers = program.readers
        self.write_ext = []
        for t, _ in program.writes:
            hit = [i for i, (kind, src) in enumerate(readers) if kind == "tensor" and src is t]
            self.write_ext.append(hit[0] if hit else None)

    def __call__(self, ext: list[Any]) -> Any:
        dyn = tuple(g() for g in self.program.dynamic)
        if self.graph is None or dyn != self.dyn:
            try:
                return self._record(ext, dyn)
            except CaptureError:
                self.program.runner = self.program._program  # as Python from now on
                return self.program._program(ext)
        from ember_triton._codegen import elementwise

        be = self.base.backend
        for cur, static in zip(ext, self.static, strict=True):
            if cur is not static and cur.ptr != static.ptr:
                elementwise(be, "r = x0", [cur], static.dtype, out=static, widen=False)
        be.memory.activate()
        self.graph.launch(stream=be.memory.cupy.cuda.get_current_stream())
        n = self.program.n_out
        res = []
        for i, arr in enumerate(self.results):
            e = self.write_ext[i - n] if i >= n else None
            res.append(self.static[e] if e is not None else
                       elementwise(be, "r = x0", [arr], arr.dtype, widen=False))
        return tuple(res)

    def _record(self, ext: list[Any], dyn: tuple[Any, ...]) -> Any:
        from ember_triton._codegen import elementwise

        program, be = self.program, self.base.backend
        memory = be.memory
        cupy = memory.cupy
        memory.activate()
        self.base.synchronize()
        stream = cupy.cuda.Stream(non_blocking=True)
        pool = cupy.cuda.MemoryPool()
        with stream:
            # the recording reads its inputs from fixed buffers, which replays refill: the
            # arguments' buffers are the graph's own copies (a replay must never write into
            # the caller's batch); the tensors it reads and updates (parameters, optimizer
            # state) it takes over, since the program rebinds them to these buffers
            static = [elementwise(be, "r = x0", [a], a.dtype, widen=False)
                      if kind == "arg" else a
                      for a, (kind, _) in zip(ext, program.readers, strict=True)]
            # this call's results: a real run, on the stream the recording uses
            out = program._program(static)
            stream.synchronize()
            keep: list[Any] = [pool, stream, static]
            be.capture_keep = keep
            try:
                with cupy.cuda.using_allocator(pool.malloc):
                    stream.begin_capture()
                    try:
                        # updates the kernels can write in place land in the buffers they
                        # replace (an Adam step's parameters and moments); others are copied
                        # there, where the next replay reads them
                        res = (program.updating or program._program)(static)
                        n = program.n_out
                        for j, e in enumerate(self.write_ext):
                            if e is not None and res[n + j] is not static[e]:
                                elementwise(be, "r = x0", [res[n + j]], static[e].dtype,
                                            out=static[e], widen=False)
                    except BaseException:
                        try:
                            stream.end_capture()
                        except Exception:  # the capture is invalid already: its error is news
                            pass
                        raise
                    graph = stream.end_capture()
            except Exception as exc:
                raise CaptureError(f"the compiled program could not be recorded as a CUDA "
                                   f"graph ({type(exc).__name__}: {exc})") from exc
            finally:
                be.capture_keep = None
        stream.synchronize()
        self.graph, self.static, self.keep, self.dyn = graph, static, keep, dyn
        self.results = list(res)
        self.records += 1
        return out


def capture_program(base: Any) -> Any:
    """``Backend.capture_program`` for a ``cuda:N`` backend: a `ProgramGraph` per program
    (``None``, Python replay, for programs with random ops or ``EMBER_COMPILE_GRAPHS=0``)."""
    import os

    def capture(program: Any) -> Any:
        if program.advancing or os.environ.get("EMBER_COMPILE_GRAPHS", "1") == "0":
            return None
        return ProgramGraph(program, base)
    return capture
