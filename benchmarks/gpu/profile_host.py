"""Where the host time of eager ops goes on cuda:0: cProfile of a loop of small adds and of
MLP training steps (run it the way ``check.py`` runs things: ``python profile_host.py``)."""

from __future__ import annotations

import cProfile
import pstats
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _us(fn, n: int = 20000) -> float:
    for _ in range(n // 10):
        fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


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
    plan = next(iter(be.elementwise_plans.values()))
    entry, grid = plan[-1], plan[1]
    if entry is not None:
        raw = [a.ptr] * 3 + list(plan[4])
        stream = be.memory.stream()
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
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25,
                                    max_name_column_width=60))


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
    pstats.Stats(prof).sort_stats("tottime").print_stats(22)

    from _mlp import mlp_step

    step = mlp_step(ember)
    for _ in range(10):
        step()
    d.synchronize()
    t = time.perf_counter()
    for _ in range(50):
        step()
    d.synchronize()
    print(f"MLP step: {(time.perf_counter() - t) / 50 * 1e3:.3f} ms")
    t = time.perf_counter()
    for _ in range(50):
        step()
    t1 = time.perf_counter()
    d.synchronize()
    print(f"MLP step: host enqueue {(t1 - t) / 50 * 1e3:.3f} ms, "
          f"with the device {(time.perf_counter() - t) / 50 * 1e3:.3f} ms")
    kernel_times(step, d)
    import collections

    counts: collections.Counter[str] = collections.Counter()
    inner = d.dispatch

    def counting(op, args, params):  # type: ignore[no-untyped-def]
        counts[op.name] += 1
        return inner(op, args, params)

    d.dispatch = counting
    step()
    d.dispatch = inner
    print(f"backend ops per step: {sum(counts.values())}: {counts.most_common()}")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(50):
        step()
    d.synchronize()
    prof.disable()
    st = pstats.Stats(prof)
    print("MLP step: ops by primitive calls")
    st.sort_stats("tottime").print_stats(30)
    st.sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from with_env import as_child

    as_child(__file__, child)
