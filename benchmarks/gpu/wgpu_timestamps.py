"""Where the WebGPU backend's bandwidth goes: GPU timestamps beside the wall clock.

    python benchmarks/gpu/wgpu_timestamps.py [--log2n 24,26] [--reps 20] [--json PATH]

``wgpu_bench.py`` times by the wall clock (a round of calls, then a wait).  This probe times
the same work by the GPU's own clock too (``timestamp-query``: each dispatch in a compute
pass of its own, the pass's begin and end written to a query set), so the two can be set
side by side:

* on a device of its own with buffers of its own: plain WGSL kernels (``c = a*b + tanh(a)``,
  copies at work-groups of 64 and 256 and in ``vec4``), the kernel ember's elementwise
  renderer writes (an index walk with ``%`` and ``/``, parameters read from a buffer), and
  the driver's buffer copy (``copy_buffer_to_buffer``, timed by encoder timestamps where the
  adapter offers them);
* on ``wgpu:0``'s own runtime (its device, pooled buffers, open encoder): the backend's copy
  kernel, an eager ``a*b+c`` and the fused 7-op chain of ``wgpu_bench.py``, each recorded
  into a timestamped pass;
* PyTorch's device copy by CUDA events, where torch has a GPU.

Bandwidth is bytes moved (reads + writes) over time.  Prints a table and a ``RESULT {...}``
line; every kernel's output is checked against numpy on a slice (exit status 1 when wrong).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MAXG = 65535

PLAIN = """
@group(0) @binding(0) var<storage, read> a: array<{t}>;
@group(0) @binding(1) var<storage, read> b: array<{t}>;
@group(0) @binding(2) var<storage, read_write> c: array<{t}>;
@compute @workgroup_size({wg})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let i = gid.x + gid.y * nwg.x * {wg}u;
    if (i >= arrayLength(&c)) {{ return; }}
    c[i] = {expr};
}}
"""

# the shape of ember's elementwise kernels (ember_wgpu.strided): the walk over merged axes
# with % and /, every word from a parameter buffer
WALK = """
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<storage, read> P: array<i32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = i32(gid.x + gid.y * nwg.x * 64u);
    if (i >= P[0]) { return; }
    var r = i;
    var o0 = P[10];
    var o1 = P[19];
    for (var d = P[1] - 1; d >= 0; d = d - 1) {
        let n = P[2 + d];
        let q = r % n; r = r / n; o0 = o0 + q * P[11 + d]; o1 = o1 + q * P[20 + d];
    }
    c[o1] = a[o0];
}
"""

# the same walk with the outermost axis taken without % and / (the index left over is its
# coordinate): no division at all for a contiguous operand
WALK0 = WALK.replace("d >= 0;", "d >= 1;").replace(
    "    c[o1] = a[o0];", "    if (P[1] > 0) { o0 = o0 + r * P[11]; o1 = o1 + r * P[20]; }\n"
    "    c[o1] = a[o0];")

#: name -> (source, work-group size, elements per invocation, bytes per element, expected)
Kernel = tuple[str, int, int, int, Callable[[np.ndarray, np.ndarray], np.ndarray]]
KERNELS: dict[str, Kernel] = {
    "a*b+tanh(a) wg256": (PLAIN.format(t="f32", wg=256, expr="a[i] * b[i] + tanh(a[i])"),
                          256, 1, 12, lambda x, y: x * y + np.tanh(x)),
    "copy wg256": (PLAIN.format(t="f32", wg=256, expr="a[i]"), 256, 1, 8, lambda x, y: x),
    "copy wg64": (PLAIN.format(t="f32", wg=64, expr="a[i]"), 64, 1, 8, lambda x, y: x),
    "copy wg128": (PLAIN.format(t="f32", wg=128, expr="a[i]"), 128, 1, 8, lambda x, y: x),
    "copy vec4 wg256": (PLAIN.format(t="vec4<f32>", wg=256, expr="a[i]"), 256, 4, 8,
                        lambda x, y: x),
    "copy ember walk wg64": (WALK, 64, 1, 8, lambda x, y: x),
    "copy walk, outer axis undivided": (WALK0, 64, 1, 8, lambda x, y: x),
}


def grid(threads: int, wg: int) -> tuple[int, int, int]:
    groups = -(-threads // wg)
    gy = -(-groups // MAXG)
    return (-(-groups // gy), gy, 1)


class Clock:
    """Timestamped passes on one device: ``R`` pairs of queries, resolved and read at once."""

    def __init__(self, device: Any, pairs: int) -> None:
        import wgpu

        self.wgpu, self.device, self.pairs = wgpu, device, pairs
        self.qs = device.create_query_set(type=wgpu.QueryType.timestamp, count=2 * pairs)
        U = wgpu.BufferUsage
        self.resolve = device.create_buffer(size=16 * pairs, usage=U.QUERY_RESOLVE | U.COPY_SRC)
        self.host = device.create_buffer(size=16 * pairs, usage=U.MAP_READ | U.COPY_DST)

    def writes(self, k: int) -> dict[str, Any]:
        return {"query_set": self.qs, "beginning_of_pass_write_index": 2 * k,
                "end_of_pass_write_index": 2 * k + 1}

    def read(self, encoder: Any, used: int) -> list[float]:
        """Resolve the first ``used`` pairs on ``encoder`` (then submitted here) and return
        each pair's milliseconds (the values are nanoseconds in wgpu-native)."""
        encoder.resolve_query_set(self.qs, 0, 2 * used, self.resolve, 0)
        encoder.copy_buffer_to_buffer(self.resolve, 0, self.host, 0, 16 * used)
        self.device.queue.submit([encoder.finish()])
        self.host.map_sync(self.wgpu.MapMode.READ, 0, 16 * used)
        try:
            ts = np.frombuffer(self.host.read_mapped(0, 16 * used, copy=True), np.uint64)
        finally:
            self.host.unmap()
        return [float(ts[2 * k + 1] - ts[2 * k]) / 1e6 for k in range(used)]


def wait(device: Any, tiny: Any, host: Any) -> None:
    """Wait for every submission: copy 4 bytes into a mapped buffer and map it (ember's way)."""
    import wgpu

    enc = device.create_command_encoder()
    enc.copy_buffer_to_buffer(tiny, 0, host, 0, 4)
    device.queue.submit([enc.finish()])
    host.map_sync(wgpu.MapMode.READ, 0, 4)
    host.unmap()


def read_slice(device: Any, buf: Any, count: int) -> np.ndarray:
    import wgpu

    U = wgpu.BufferUsage
    host = device.create_buffer(size=4 * count, usage=U.MAP_READ | U.COPY_DST)
    enc = device.create_command_encoder()
    enc.copy_buffer_to_buffer(buf, 0, host, 0, 4 * count)
    device.queue.submit([enc.finish()])
    host.map_sync(wgpu.MapMode.READ, 0, 4 * count)
    try:
        return np.frombuffer(host.read_mapped(0, 4 * count, copy=True), np.float32).copy()
    finally:
        host.unmap()


def sync_cost(sync: Callable[[], None]) -> float:
    sync()
    ts = []
    for _ in range(9):
        t = time.perf_counter()
        sync()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


def wall_per_call(record: Callable[[], None], sync: Callable[[], None], reps: int,
                  sync_ms: float, rounds: int = 3) -> float:
    """Best over ``rounds`` of (``reps`` calls, then ``sync``) less the wait, per call."""
    best = float("inf")
    record()
    sync()
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(reps):
            record()
        sync()
        best = min(best, ((time.perf_counter() - t) * 1e3 - sync_ms) / reps)
    return best


def own_device(log2ns: list[int], reps: int, rows: list[dict[str, Any]],
               errors: list[str]) -> None:
    import wgpu
    from ember_wgpu.runtime import adapters

    adapter = adapters()[0]
    offered = set(adapter.features)
    want = [f for f in ("timestamp-query", "timestamp-query-inside-encoders") if f in offered]
    lim = adapter.limits
    device = adapter.request_device_sync(required_features=want, required_limits={
        k: lim[k] for k in ("max-storage-buffer-binding-size", "max-buffer-size")})
    if "timestamp-query" not in want:
        errors.append("the adapter offers no timestamp-query: GPU times are missing")
    U = wgpu.BufferUsage
    usage = U.STORAGE | U.COPY_SRC | U.COPY_DST
    tiny = device.create_buffer(size=16, usage=usage)
    thost = device.create_buffer(size=16, usage=U.MAP_READ | U.COPY_DST)

    def sync() -> None:
        wait(device, tiny, thost)

    sync_ms = sync_cost(sync)
    clock = Clock(device, reps) if "timestamp-query" in want else None
    rng = np.random.default_rng(0)
    for log2n in log2ns:
        n = 1 << log2n
        ha = rng.standard_normal(n).astype(np.float32)
        hb = rng.standard_normal(n).astype(np.float32)
        a = device.create_buffer_with_data(data=ha, usage=usage)
        b = device.create_buffer_with_data(data=hb, usage=usage)
        c = device.create_buffer(size=4 * n, usage=usage)
        words = np.zeros(32, np.int32)
        words[[0, 1, 2, 11, 20]] = [n, 1, n, 1, 1]
        P = device.create_buffer_with_data(data=words, usage=U.STORAGE)
        for name, (src, wg, per, nbytes, want_fn) in KERNELS.items():
            walk = "P[" in src
            entries = [{"binding": k, "resource": {"buffer": x}}
                       for k, x in enumerate([a, b, c, *([P] if walk else [])])]
            kinds = ["read-only-storage", "read-only-storage", "storage",
                     *(["read-only-storage"] if walk else [])]
            bgl = device.create_bind_group_layout(entries=[
                {"binding": k, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": t}}
                for k, t in enumerate(kinds)])
            pipe = device.create_compute_pipeline(
                layout=device.create_pipeline_layout(bind_group_layouts=[bgl]),
                compute={"module": device.create_shader_module(code=src),
                         "entry_point": "main"})
            bg = device.create_bind_group(layout=bgl, entries=entries)
            groups = grid(n // per, wg)

            def one(enc: Any, writes: dict[str, Any] | None = None, pipe: Any = pipe,
                    bg: Any = bg, groups: tuple[int, int, int] = groups) -> None:
                cp = enc.begin_compute_pass(**({"timestamp_writes": writes} if writes else {}))
                cp.set_pipeline(pipe)
                cp.set_bind_group(0, bg)
                cp.dispatch_workgroups(*groups)
                cp.end()

            gpu = None
            if clock is not None:
                enc = device.create_command_encoder()
                for k in range(reps):
                    one(enc, clock.writes(k))
                gpu = statistics.median(clock.read(enc, reps)[1:])

            def batch(pipe: Any = pipe, bg: Any = bg,
                      groups: tuple[int, int, int] = groups) -> None:
                # reps dispatches in one pass, one submission (ember's way)
                enc = device.create_command_encoder()
                cp = enc.begin_compute_pass()
                for _ in range(reps):
                    cp.set_pipeline(pipe)
                    cp.set_bind_group(0, bg)
                    cp.dispatch_workgroups(*groups)
                cp.end()
                device.queue.submit([enc.finish()])

            wall = wall_per_call(batch, sync, 1, sync_ms) / reps
            got = read_slice(device, c, 4096)
            want_v = want_fn(ha[:4096].astype(np.float64), hb[:4096].astype(np.float64))
            if not np.allclose(got, want_v, rtol=1e-5, atol=1e-5):
                errors.append(f"own device, {name}, 2^{log2n}: wrong values")
            rows.append({"where": "own device", "what": name, "log2n": log2n,
                         "gpu_ms": gpu, "wall_ms": wall, "bytes": nbytes * n})
        # the driver's copy
        gpu = None
        if clock is not None and "timestamp-query-inside-encoders" in want:
            from wgpu.backends.wgpu_native.extras import write_timestamp

            enc = device.create_command_encoder()
            for k in range(reps):
                write_timestamp(enc, clock.qs, 2 * k)
                enc.copy_buffer_to_buffer(a, 0, c, 0, 4 * n)
                write_timestamp(enc, clock.qs, 2 * k + 1)
            gpu = statistics.median(clock.read(enc, reps)[1:])

        def copies(a: Any = a, c: Any = c, n: int = n) -> None:
            enc = device.create_command_encoder()
            for _ in range(reps):
                enc.copy_buffer_to_buffer(a, 0, c, 0, 4 * n)
            device.queue.submit([enc.finish()])

        wall = wall_per_call(copies, sync, 1, sync_ms) / reps
        if not np.array_equal(read_slice(device, c, 4096), ha[:4096]):
            errors.append(f"own device, buffer copy, 2^{log2n}: wrong values")
        rows.append({"where": "own device", "what": "copy_buffer_to_buffer", "log2n": log2n,
                     "gpu_ms": gpu, "wall_ms": wall, "bytes": 8 * n})
        for x in (a, b, c, P):
            x.destroy()


#: the elementwise maps' (work-group size, rounds per invocation, vec4 loads) tried on wgpu:0
MAP_SHAPES = [(64, 1, False), (256, 1, False), (256, 4, False), (256, 1, True),
              (128, 2, True), (256, 4, True)]


def ember_runtime(log2n: int, reps: int, rows: list[dict[str, Any]],
                  errors: list[str]) -> None:
    from ember_wgpu import strided

    default = (strided.WIDE, strided.PER, strided.VEC)
    try:
        for shape in MAP_SHAPES:
            strided.WIDE, strided.PER, strided.VEC = shape
            ember_rows(log2n, reps, rows, errors,
                       f" {shape[0]}x{shape[1]}{' vec4' if shape[2] else ''}")
    finally:
        strided.WIDE, strided.PER, strided.VEC = default


def ember_rows(log2n: int, reps: int, rows: list[dict[str, Any]], errors: list[str],
               tag: str) -> None:
    from ember_wgpu.strided import run_map

    import ember

    dev = ember.device("wgpu:0")
    rt = dev._backend.runtime
    if "timestamp-query" not in rt.device.features:
        errors.append("wgpu:0's device has no timestamp-query: ember rows by wall clock only")
    clock = Clock(rt.device, reps) if "timestamp-query" in rt.device.features else None
    n = 1 << log2n
    rng = np.random.default_rng(1)
    hs = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
    xa, xb, xc = (ember.tensor(h, device=dev) for h in hs)
    fdev = ember.device("fusion<wgpu:0>")
    xf = xa.to(fdev)
    flush = fdev.backend.stream().flush
    held: list[Any] = [None]

    def chain(v: Any) -> Any:
        v = (v * 1.5 + 0.25).relu() * 0.5 - 1
        return v * v.sigmoid()

    def kernel_copy() -> None:
        held[0] = None
        held[0] = run_map(rt, "a", [xa._data])

    def fma() -> None:
        held[0] = None
        held[0] = xa * xb + xc

    def fused() -> None:
        held[0] = None
        held[0] = chain(xf)
        flush()

    x64 = hs[0][:4096].astype(np.float64)
    v = np.maximum(x64 * 1.5 + 0.25, 0) * 0.5 - 1
    cases: list[tuple[str, Callable[[], None], int, np.ndarray]] = [
        ("kernel copy (run_map)", kernel_copy, 8, x64),
        ("a*b+c eager (2 kernels)", fma, 16, x64 * hs[1][:4096] + hs[2][:4096]),
        ("7-op chain fusion<wgpu:0>", fused, 8, v / (1 + np.exp(-v)))]
    sync_ms = sync_cost(dev.synchronize)
    for name, fn, nbytes, want in cases:
        gpu = None
        if clock is not None:
            fn()
            rt.flush()
            ms = []
            for k in range(reps):
                rt.flush()
                rt._pass = rt._encoder_now().begin_compute_pass(timestamp_writes=clock.writes(k))
                fn()
                rt.flush()
            enc = rt.device.create_command_encoder()
            ms = clock.read(enc, reps)
            gpu = statistics.median(ms[1:])
        wall = wall_per_call(fn, dev.synchronize, reps, sync_ms)
        got = held[0]
        got = rt.read(got)[:4096] if not hasattr(got, "numpy") else got[:4096].numpy()
        if not np.allclose(got, want, rtol=1e-5, atol=1e-5):
            errors.append(f"wgpu:0, {name}: wrong values")
        rows.append({"where": "wgpu:0 runtime", "what": name + tag, "log2n": log2n,
                     "gpu_ms": gpu,
                     "wall_ms": wall, "bytes": nbytes * n})


def torch_copy(log2n: int, reps: int, rows: list[dict[str, Any]]) -> None:
    if importlib.util.find_spec("torch") is None:
        return
    import torch

    if not torch.cuda.is_available():
        return
    n = 1 << log2n
    a = torch.randn(n, device="cuda")
    c = torch.empty_like(a)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    c.copy_(a)
    torch.cuda.synchronize()
    ms = []
    for _ in range(reps):
        ev[0].record()
        c.copy_(a)
        ev[1].record()
        torch.cuda.synchronize()
        ms.append(ev[0].elapsed_time(ev[1]))
    t = time.perf_counter()
    for _ in range(reps):
        c.copy_(a)
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t) * 1e3 / reps
    rows.append({"where": "torch cuda", "what": "copy_", "log2n": log2n,
                 "gpu_ms": statistics.median(ms[1:]), "wall_ms": wall, "bytes": 8 * n})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2n", default="24,26")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    try:
        import ember  # noqa: F401
    except ImportError:
        import subprocess

        from check import workspace_env

        return subprocess.call([sys.executable, *sys.argv], env=workspace_env())
    sizes = [int(s) for s in args.log2n.split(",")]
    rows: list[dict[str, Any]] = []
    errors: list[str] = []
    own_device(sizes, args.reps, rows, errors)
    ember_runtime(sizes[-1], args.reps, rows, errors)
    torch_copy(sizes[-1], args.reps, rows)
    print("| where | what | n | GPU clock ms | GB/s | wall ms | GB/s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        g = r["gpu_ms"]
        gb = f"{r['bytes'] / g / 1e6:.0f}" if g else ""
        print(f"| {r['where']} | {r['what']} | 2^{r['log2n']} | "
              f"{'' if g is None else f'{g:.4f}'} | {gb} | {r['wall_ms']:.4f} | "
              f"{r['bytes'] / r['wall_ms'] / 1e6:.0f} |")
    for e in errors:
        print("ERROR", e)
    out = {"rows": rows, "errors": errors}
    print("RESULT", json.dumps(out))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 1 if any("wrong" in e for e in errors) else 0


if __name__ == "__main__":
    sys.exit(main())
