"""Where the host time of eager ops goes on cuda:0: cProfile of a loop of small adds and of
MLP training steps (run it the way ``check.py`` runs things: ``python profile_host.py``)."""

from __future__ import annotations

import cProfile
import pstats
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _us(fn, n: int = 20000) -> float:  # type: ignore[no-untyped-def]
    """Microseconds per call of ``fn`` on the host (best of 3 runs of ``n``, after a
    warm-up of ``n / 10``)."""
    for _ in range(n // 10):
        fn()
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n * 1e6)
    return best


def add_launch(x):  # type: ignore[no-untyped-def]
    """The recorded launch of ``x + x`` (run it once first): ``(backend, entry, grid, raw
    arguments, stream)``; ``entry`` is ``None`` where the add has no compiled entry."""
    be = x._device.dispatch.__self__
    plan = next(iter(be.elementwise_plans.values()))
    raw = [x._data.ptr] * 3 + list(plan[4])
    return be, plan[-1], plan[1], raw, be.memory.stream()


def components(d, x) -> None:  # type: ignore[no-untyped-def]
    """Host cost of each piece of an eager add, timed alone."""
    import cupy

    be = x._device.dispatch.__self__
    add = be.kernels[__import__("ember").ops.add]
    a = x._data
    c = cupy.ones(1024, cupy.float32)
    rows = {
        "ember x + x": lambda: x + x,
        "backend add kernel": lambda: add(a, a),
        "cupy.empty(4096 B)": lambda: cupy.empty(4096, cupy.uint8),
        "cupy.cuda.alloc(4096)": lambda: cupy.cuda.alloc(4096),
        "get_current_stream().ptr": lambda: cupy.cuda.get_current_stream().ptr,
        "runtime.getDevice()": cupy.cuda.runtime.getDevice,
        "memory.activate()": be.memory.activate,
        "cupy x + x": lambda: c + c,
    }
    _, entry, grid, raw, stream = add_launch(x)
    if entry is not None:
        rows[f"launch entry ({type(entry).__name__})"] = lambda: entry(grid, stream, raw)
    for name, fn in rows.items():
        print(f"{name:32s} {_us(fn):7.2f} us")
    d.synchronize()
    import gc

    gc.disable()
    print(f"{'x + x, gc disabled':32s} {_us(lambda: x + x):7.2f} us")
    gc.enable()
    try:
        import torch
    except ImportError:
        return
    tx = torch.ones(1024, device="cuda")
    torch.cuda.synchronize()
    print(f"{'x + x, torch initialised':32s} {_us(lambda: x + x):7.2f} us")
    print(f"{'torch tx + tx':32s} {_us(lambda: tx + tx):7.2f} us")
    big = [cupy.empty(1 << 28, cupy.uint8) for _ in range(8)]
    print(f"{'x + x, 2 GiB more in the pool':32s} {_us(lambda: x + x):7.2f} us")
    del big
    d.synchronize()


def kernel_times(step, d) -> None:  # type: ignore[no-untyped-def]
    """Device time by kernel over 20 steps (CUPTI through torch's profiler, when present:
    it sees every kernel of the process, ember's included)."""
    try:
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        return
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            step()
        d.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12,
                                    max_name_column_width=48))


def child() -> None:
    import ember

    d = ember.device("cuda:0")
    x = ember.ones((1024,), device=d)
    for _ in range(200):
        x + x
    d.synchronize()
    t = time.perf_counter()
    for _ in range(5000):
        x + x
    print(f"add: {(time.perf_counter() - t) / 5000 * 1e6:.1f} us per op")
    components(d, x)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(5000):
        x + x
    prof.disable()
    _report("add", prof, 5000)

    from _mlp import mlp_step

    step = mlp_step(ember)
    _measure("mlp", d, step, 50)
    kernel_times(step, d)
    guide(d)


def _measure(name: str, d, step, n: int) -> None:  # type: ignore[no-untyped-def]
    """Host enqueue time and time with the device per step, backend ops per step, and the
    profile of ``n`` steps (`_report`)."""
    import collections

    for _ in range(10):
        step()
    d.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        step()
    t1 = time.perf_counter()
    d.synchronize()
    print(f"{name} step: host enqueue {(t1 - t) / n * 1e3:.3f} ms, "
          f"with the device {(time.perf_counter() - t) / n * 1e3:.3f} ms")
    from ember._backend import Backend

    counts: collections.Counter[str] = collections.Counter()
    inner = Backend.dispatch  # the base backends' dispatch (decorators override it)

    def counting(self, op, args, params):  # type: ignore[no-untyped-def]
        counts[op.name] += 1
        return inner(self, op, args, params)

    Backend.dispatch = counting  # type: ignore[method-assign]
    step()
    Backend.dispatch = inner  # type: ignore[method-assign]
    print(f"{name} backend ops per step: {sum(counts.values())}: {counts.most_common()}")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        step()
    d.synchronize()
    prof.disable()
    _report(name, prof, n)


def _report(name: str, prof: cProfile.Profile, steps: int) -> None:
    """Own time per step by source file (printed) and the full tables (in $OUT)."""
    import collections
    import io
    import os

    st = pstats.Stats(prof)
    by_file: collections.Counter[str] = collections.Counter()
    for (fn, _, _), (_, _, tt, _, _) in st.stats.items():  # type: ignore[attr-defined]
        by_file[fn.split("/src/")[-1] if "/src/" in fn else Path(fn).name] += tt
    total = sum(by_file.values())
    print(f"{name} step, own time by file (profiled {total / steps * 1e3:.3f} ms per step):")
    for f, tt in by_file.most_common(14):
        print(f"  {tt / steps * 1e6:8.1f} us  {f}")
    out = os.environ.get("OUT")
    if out:
        buf = io.StringIO()
        st.stream = buf  # type: ignore[attr-defined]
        st.sort_stats("tottime").print_stats(60)
        st.sort_stats("cumulative").print_stats(80)
        Path(out, f"profile_{name}.txt").write_text(buf.getvalue())


def guide(d) -> None:  # type: ignore[no-untyped-def]
    """The guide CNN's training step (batch 32, AdamW): time, ops, and the profile."""
    from _mlp import guide_step

    import ember

    step = guide_step(ember)
    _measure("guide", d, step, 100)
    kernel_times(step, d)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from with_env import as_child

    as_child(__file__, child)
