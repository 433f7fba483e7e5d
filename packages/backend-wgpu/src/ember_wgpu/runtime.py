"""The device page: adapter look-up, one device and queue, a pooled allocator, a host staging
path, a pipeline cache, and `WGArray`, the strided view every kernel reads and writes.

Kernels are recorded into one compute pass of one open command encoder and submitted together
at the next host transfer (or every `BATCH` dispatches, or once `EARLY` work-groups wait), so a
chain of small ops costs one submission.  Each dispatch of a batch reads its parameter words
from its own `SLOT` of one parameter buffer, written once per batch just before the
submission; bind groups are cached by the buffers they bind (pooled buffers recur, so a steady
loop builds none).  Buffers come from a pool of power-of-two size classes and return to it
when their last view dies; a buffer freed while recorded work still reads it is safe to hand
out again, because every later use is recorded after that work on the same queue.  Host
writes (``queue.write_buffer``) run before the commands of the next submission, so the open
encoder is submitted first.
"""

from __future__ import annotations

import math
import os
import tempfile
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.backend import allocation_error
from ember.backend.strided import StridedView, contiguous_strides

__all__ = ["GROUP", "MAXD", "STORAGE", "WGArray", "Runtime", "adapters", "contiguous_strides",
           "storage_dtype"]

#: work-group size of every 1-d kernel
GROUP = 64
#: axes an indexed kernel walks (after merging contiguous ones)
MAXD = 8
#: dispatches recorded before the open encoder is submitted anyway
BATCH = 256
#: bytes of parameter words each dispatch of a batch gets in the shared parameter buffer
SLOT = 512
#: work-groups recorded after which the open encoder is submitted at once, so the device
#: starts on large kernels while Python records the next ones (held until the next host
#: read, an H100's 2^26-element fused chain waited for the host's ~0.15 ms of recording
#: per call: 1.0 TB/s by the wall clock against 1.5 by the GPU's)
EARLY = 1 << 14

#: how each ember dtype is stored in a storage buffer: bools as 0/1 ``u32`` (WGSL's ``bool``
#: has no storage layout); the 8- and 16-bit integers widened to 32 bits (kernels wrap every
#: value they store to the narrow range); bfloat16 as the ``f32`` of its value (kernels round
#: every value they store to bfloat16); the rest natively
STORAGE = {"float32": ("f32", np.float32), "float16": ("f16", np.float16),
           "int32": ("i32", np.int32), "int64": ("i64", np.int64), "uint32": ("u32", np.uint32),
           "bool": ("u32", np.uint32), "int8": ("i32", np.int32), "int16": ("i32", np.int32),
           "uint8": ("u32", np.uint32), "bfloat16": ("f32", np.float32)}


_STORED = {np.dtype(name): np.dtype(kind) for name, (_, kind) in STORAGE.items()
           if name != "bfloat16"}


def storage_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The numpy dtype of ``dtype``'s device storage (bool -> uint32)."""
    got = _STORED.get(dtype)
    return got if got is not None else np.dtype(STORAGE[np.dtype(dtype).name][1])


def _private_runtime_dir() -> None:
    # Mesa's Vulkan loader warns on stderr when XDG_RUNTIME_DIR is unset; a private folder
    # silences it (only where nothing is set)
    if not os.environ.get("XDG_RUNTIME_DIR"):
        os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="ember-xdg-")


def _load_static_llvm_first() -> None:
    # Mesa's software Vulkan driver (lavapipe) brings its shared libLLVM into the process when
    # the adapters are listed; Triton's native library, which carries its own static LLVM,
    # then crashes as it loads (its LLVM symbols bind to Mesa's).  Loaded first, it binds to
    # its own, and either order of use works afterwards.  Only where Triton is installed.
    import importlib.util

    if importlib.util.find_spec("triton") is not None:
        try:
            import triton._C.libtriton  # noqa: F401
        except (ImportError, OSError):
            pass


def adapters() -> list[Any]:
    """The adapters ``wgpu:N`` indexes: the high-performance one first, then every other
    compute-capable adapter of another backend or name (wgpu-native lists each physical
    device once per API; the GL ones cannot run compute shaders and are left out)."""
    _private_runtime_dir()
    _load_static_llvm_first()
    import wgpu

    best = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    out = [best] if best is not None else []
    seen = {(best.info["backend_type"], best.info["device"])} if best is not None else set()
    for a in wgpu.gpu.enumerate_adapters_sync():
        key = (a.info["backend_type"], a.info["device"])
        if key in seen or a.info["backend_type"] == "OpenGL":
            continue
        seen.add(key)
        out.append(a)
    return out


def describe(adapter: Any) -> str:
    info = adapter.info
    return f"{info['device']} ({info['adapter_type']}, {info['backend_type']})"


class Block:
    """One pooled storage buffer; gives itself back to the pool when the last view dies.

    The runtime keeps every buffer it made reachable (``Runtime._owned``): a block dying in a
    reference cycle (a traceback's frames) must not find its buffer released by the same
    collection (wgpu-py releases a buffer's handle in its ``__del__``).
    """

    __slots__ = ("__weakref__", "buffer", "nbytes", "pool")

    def __init__(self, buffer: Any, nbytes: int, pool: dict[int, list[Any]]) -> None:
        self.buffer, self.nbytes, self.pool = buffer, nbytes, pool

    def __del__(self) -> None:
        self.pool.setdefault(self.nbytes, []).append(self.buffer)


class WGArray(StridedView):
    """A strided view of a storage buffer: ``shape``, ``strides`` and ``offset`` in elements;
    ``dtype`` is the ember (numpy) dtype, stored as `storage_dtype` of it.

    Tensors are immutable, so views share blocks freely; no kernel writes into an input.
    """

    __slots__ = ("block", "dtype", "offset", "shape", "strides")

    def __init__(self, block: Block, shape: Sequence[int], dtype: np.dtype[Any],
                 strides: Sequence[int] | None = None, offset: int = 0) -> None:
        self.block = block
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        self.strides = contiguous_strides(self.shape) if strides is None else tuple(strides)
        self.offset = int(offset)

    @property
    def buffer(self) -> Any:
        return self.block.buffer

    def view(self, shape: Sequence[int], strides: Sequence[int], offset: int) -> WGArray:
        return WGArray(self.block, shape, self.dtype, strides, offset)

    def __repr__(self) -> str:
        return f"WGArray(shape={self.shape}, dtype={self.dtype}, strides={self.strides})"


class Runtime:
    """One WebGPU device: its queue, buffer pool, staging buffer and compiled pipelines."""

    def __init__(self, adapter: Any) -> None:
        import wgpu

        self.wgpu = wgpu
        self.adapter = adapter
        offered = set(adapter.features)
        #: WGSL extensions this device has: f16 storage and math, 64-bit integers
        self.f16 = "shader-f16" in offered
        self.i64 = "shader-int64" in offered
        #: subgroup operations (the fused reductions' trees use them where offered)
        self.subgroups = "subgroup" in offered
        #: a software adapter (lavapipe: kernels run as JIT-compiled SIMD on the CPU, where a
        #: work-group barrier is costly; some kernels take other shapes there)
        self.software = adapter.info["adapter_type"] == "CPU"
        # timestamp-query: passes can be timed by the GPU's clock (benchmarks/gpu's probes)
        features = [f for f in ("shader-f16", "shader-int64", "subgroup", "timestamp-query")
                    if f in offered]
        #: cooperative matrices (wgpu's experimental extension): float16 matmuls on tensor
        #: cores where `ember_wgpu.coopmat`'s self-check passes; ``coop_status`` says
        self.coop = False
        self.coop_status: str | None = None
        coop = [f for f in offered if "cooperative-matrix" in f]
        lim = adapter.limits
        limits = {k: lim[k] for k in ("max-storage-buffer-binding-size", "max-buffer-size",
                                      "max-storage-buffers-per-shader-stage",
                                      "max-compute-workgroup-storage-size",
                                      "max-compute-invocations-per-workgroup")}
        device: Any = None
        if os.environ.get("EMBER_WGPU_COOP", "1") == "0":
            coop, self.coop_status = [], "off: EMBER_WGPU_COOP=0"
        if coop and self.f16:
            try:  # an experimental feature: a device without it if it is refused
                device = adapter.request_device_sync(
                    required_features=[*features, *coop], required_limits=limits)
                self.coop = True
            except Exception as exc:
                self.coop_status = f"off: the device refused the feature ({exc})"
        if device is None:
            device = adapter.request_device_sync(required_features=features,
                                                 required_limits=limits)
        self.device: Any = device
        self.queue = self.device.queue
        self.max_binding = int(limits["max-storage-buffer-binding-size"])
        self.max_groups = int(lim["max-compute-workgroups-per-dimension"])
        U = wgpu.BufferUsage
        self._usage = U.STORAGE | U.COPY_SRC | U.COPY_DST
        self._pool: dict[int, list[Any]] = {}
        self._owned: list[Any] = []
        self._staging: Any = None
        self._encoder: Any = None
        self._pass: Any = None
        self._pending = 0
        self._pending_groups = 0
        align = int(lim["min-storage-buffer-offset-alignment"])
        #: the alignment of a storage binding's offset
        self.offset_alignment = align
        self._slot = max(SLOT, align)
        #: while a compiled program is recorded (`ember_wgpu.replay`): its dispatches, kept
        #: instead of encoded, as (pipeline, buffers bound, how many read, words, groups)
        self.capture: list[Any] | None = None
        #: ... and where the recording's freed buffers go, and the blocks it made
        self.capture_pool: dict[int, list[Any]] | None = None
        self.capture_blocks: weakref.WeakSet[Block] | None = None
        #: ... and the arrays uploaded while it is recorded (never reused by it)
        self.capture_keep: list[WGArray] | None = None
        self._params = self.device.create_buffer(size=BATCH * self._slot,
                                                 usage=U.STORAGE | U.COPY_DST)
        self._words = np.zeros(BATCH * self._slot // 4, np.int32)
        self._groups: dict[tuple[Any, ...], Any] = {}
        #: dispatches recorded so far (tests count kernels with it)
        self.dispatches = 0
        self._pipelines: dict[str, Any] = {}
        self._layouts: dict[tuple[int, int], tuple[Any, Any]] = {}

    @property
    def name(self) -> str:
        return str(self.adapter.info["device"])

    # -- memory -------------------------------------------------------------------------------

    def empty(self, shape: Sequence[int], dtype: np.dtype[Any]) -> WGArray:
        """A new contiguous array from the pool; a size the device cannot bind is an
        `ember.OutOfMemoryError` naming the shape, dtype and bytes."""
        shape = tuple(int(n) for n in shape)
        item = storage_dtype(dtype).itemsize
        need = math.prod(shape) * item
        if need > self.max_binding:
            raise allocation_error(shape, dtype, need, reason=(
                f"the WebGPU adapter {self.name!r} binds at most {self.max_binding} bytes "
                "per storage buffer"))
        nbytes = max(16, 1 << (max(need, 1) - 1).bit_length())
        # while a program is recorded, its buffers come back to a pool of the recording's
        # (reused by its later kernels, as they run in the same order at every replay)
        pool = self._pool if self.capture_pool is None else self.capture_pool
        free = pool.get(nbytes) or self._pool.get(nbytes)
        if free:
            buffer = free.pop()
        else:
            try:
                buffer = self.device.create_buffer(size=nbytes, usage=self._usage)
                self._owned.append(buffer)
            except Exception as exc:  # wgpu-native reports allocation failures as errors
                raise allocation_error(shape, dtype, nbytes, reason=f"WebGPU: {exc}") from exc
        block = Block(buffer, nbytes, pool)
        if self.capture_blocks is not None:
            self.capture_blocks.add(block)
        return WGArray(block, shape, dtype)

    def upload(self, host: np.ndarray) -> WGArray:
        """A new array holding ``host`` (of the ember dtype it stands for)."""
        if self.capture_keep is None:
            out = self.empty(host.shape, host.dtype)
        else:
            # written once, now, not at each replay: a buffer the recording never used (its
            # earlier kernels would overwrite the data at each replay), kept from reuse
            pool, self.capture_pool = self.capture_pool, None
            try:
                out = self.empty(host.shape, host.dtype)
            finally:
                self.capture_pool = pool
            self.capture_keep.append(out)
        data = np.ascontiguousarray(host, dtype=storage_dtype(host.dtype)).reshape(-1)
        if data.size:
            raw = data.view(np.uint8)
            if raw.size % 4:
                raw = np.concatenate([raw, np.zeros(4 - raw.size % 4, np.uint8)])
            self.flush()  # the write runs before the next submission: commands first
            self.queue.write_buffer(out.buffer, 0, raw)
        return out

    def read(self, arr: WGArray) -> np.ndarray:
        """The values of a contiguous ``arr`` on the host, through the reusable staging buffer
        (a copy, a submission, a map): the one place that waits for the device."""
        if self.capture is not None:
            from ember.backend import CaptureError

            raise CaptureError("a kernel of the compiled program reads values back to the "
                               "host (a data-dependent size or a sync): it cannot be recorded")
        st = storage_dtype(arr.dtype)
        n = arr.size
        if n == 0:
            return np.empty(arr.shape, arr.dtype)
        start = arr.offset * st.itemsize
        begin = start - start % 4
        size = -(-(start + n * st.itemsize - begin) // 4) * 4
        if self._staging is None or self._staging.size < size:
            U = self.wgpu.BufferUsage
            cap = max(1 << (size - 1).bit_length(), 4096)
            self._staging = self.device.create_buffer(size=cap, usage=U.MAP_READ | U.COPY_DST)
        enc = self._encoder_now()
        self._end_pass()
        enc.copy_buffer_to_buffer(arr.buffer, begin, self._staging, 0, size)
        self.flush()
        self._staging.map_sync(self.wgpu.MapMode.READ, 0, size)
        try:
            raw = np.frombuffer(self._staging.read_mapped(0, size, copy=True), np.uint8)
        finally:
            self._staging.unmap()
        vals = raw[start - begin:start - begin + n * st.itemsize].view(st).reshape(arr.shape)
        out: np.ndarray = vals != 0 if arr.dtype == np.bool_ else vals.astype(arr.dtype,
                                                                            copy=False)
        return out

    # -- pipelines and dispatch ---------------------------------------------------------------

    def _layout(self, n_read: int, n_write: int) -> tuple[Any, Any]:
        """The bind-group and pipeline layouts of ``n_read`` read-only storage buffers, then
        ``n_write`` written ones, then the read-only parameter words."""
        key = (n_read, n_write)
        got = self._layouts.get(key)
        if got is None:
            wgpu = self.wgpu
            entries = []
            for b in range(n_read + n_write + 1):
                kind = (wgpu.BufferBindingType.storage if n_read <= b < n_read + n_write
                        else wgpu.BufferBindingType.read_only_storage)
                entries.append({"binding": b, "visibility": wgpu.ShaderStage.COMPUTE,
                                "buffer": {"type": kind}})
            bgl = self.device.create_bind_group_layout(entries=entries)
            got = self._layouts[key] = (bgl, self.device.create_pipeline_layout(
                bind_group_layouts=[bgl]))
        return got

    def pipeline(self, source: str, n_read: int, n_write: int) -> Any:
        """The compute pipeline of WGSL ``source`` (entry point ``main``), built once per
        process."""
        p = self._pipelines.get(source)
        if p is None:
            from .render import prelude

            helpers = prelude(source)  # helper functions the source calls, after directives
            code = source.replace("enable f16;\n", "enable f16;\n" + helpers, 1) \
                if source.startswith("enable f16;") else helpers + source
            module = self.device.create_shader_module(code=code)
            p = self._pipelines[source] = self.device.create_compute_pipeline(
                layout=self._layout(n_read, n_write)[1],
                compute={"module": module, "entry_point": "main"})
        return p

    def _encoder_now(self) -> Any:
        if self._encoder is None:
            self._encoder = self.device.create_command_encoder()
        return self._encoder

    def dispatch(self, source: str, reads: Sequence[WGArray], writes: Sequence[WGArray],
                 words: Sequence[int], threads: int, group: int = GROUP) -> None:
        """Record one dispatch of ``source`` over ``threads`` invocations in work-groups of
        ``group`` (spread over a 2-d grid beyond the per-dimension limit; kernels compute
        their index as ``gid.x + gid.y * nwg.x * group``), with ``words`` as its
        parameters."""
        if threads <= 0:
            return
        groups = -(-threads // group)
        gx, gy = groups, 1
        if groups > self.max_groups:
            gy = -(-groups // self.max_groups)
            gx = -(-groups // gy)
        self.record(source, reads, writes, words, (gx, gy, 1))

    def record(self, source: str, reads: Sequence[WGArray], writes: Sequence[WGArray],
               words: Sequence[int], groups: tuple[int, int, int]) -> None:
        """Record one dispatch of ``groups`` work-groups."""
        pipe = self.pipeline(source, len(reads), len(writes))
        if self.capture is not None:
            self.capture.append((pipe, [x.buffer for x in (*reads, *writes)], len(reads),
                                 [*words, 0], groups))
            return
        params = np.asarray([*words, 0], dtype=np.int64).astype(np.int32)
        k = self._pending
        buffers = [x.buffer for x in (*reads, *writes)]
        if params.size * 4 <= self._slot:
            self._words[k * self._slot // 4:k * self._slot // 4 + params.size] = params
            key: tuple[Any, ...] = (len(reads), k, *map(id, buffers))
            bg = self._groups.get(key)
            if bg is None:
                if len(self._groups) > 8192:
                    self._groups.clear()
                bg = self._groups[key] = self._bind(
                    buffers, len(reads), {"buffer": self._params, "offset": k * self._slot,
                                          "size": self._slot})
        else:  # more words than a slot: a buffer of their own
            pbuf = self.device.create_buffer_with_data(data=params,
                                                       usage=self.wgpu.BufferUsage.STORAGE)
            bg = self._bind(buffers, len(reads), {"buffer": pbuf})
        cp = self._pass
        if cp is None:
            cp = self._pass = self._encoder_now().begin_compute_pass()
        cp.set_pipeline(pipe)
        cp.set_bind_group(0, bg)
        cp.dispatch_workgroups(*groups)
        self._pending += 1
        self._pending_groups += groups[0] * groups[1] * groups[2]
        self.dispatches += 1
        if self._pending >= BATCH or self._pending_groups >= EARLY:
            self.flush()

    def encode(self, steps: Sequence[tuple[Any, Any, tuple[int, int, int]]]) -> None:
        """Encode recorded dispatches, ``(pipeline, bind group, groups)`` each, after what is
        recorded so far (their parameter words are their bind groups' own)."""
        cp = self._pass
        if cp is None:
            cp = self._pass = self._encoder_now().begin_compute_pass()
        for pipe, bg, groups in steps:
            cp.set_pipeline(pipe)
            cp.set_bind_group(0, bg)
            cp.dispatch_workgroups(*groups)
        self.dispatches += len(steps)

    def _bind(self, buffers: Sequence[Any], n_read: int, params: dict[str, Any]) -> Any:
        entries = [{"binding": b, "resource": {"buffer": x}} for b, x in enumerate(buffers)]
        entries.append({"binding": len(entries), "resource": params})
        return self.device.create_bind_group(
            layout=self._layout(n_read, len(buffers) - n_read)[0], entries=entries)

    def _end_pass(self) -> None:
        if self._pass is not None:
            self._pass.end()
            self._pass = None

    def flush(self) -> None:
        """Submit what is recorded, after writing the batch's parameter words (queue writes
        run before the submission's commands, after every earlier submission's)."""
        if self._encoder is not None:
            self._end_pass()
            if self._pending:
                self.queue.write_buffer(self._params, 0,
                                        self._words[:self._pending * self._slot // 4])
            enc, self._encoder, self._pending = self._encoder, None, 0
            self._pending_groups = 0
            self.queue.submit([enc.finish()])

    def synchronize(self) -> None:
        """Wait until the device is idle (a tiny read: ``on_submitted_work_done_sync`` is
        broken in wgpu-py 0.32.0)."""
        self.read(self.empty((1,), np.dtype(np.int32)))  # waits for all earlier submissions
