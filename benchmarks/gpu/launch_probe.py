"""What one kernel launch costs the host, path by path, on the kernel of a small ember add
(``python benchmarks/gpu/launch_probe.py``; no ember code changes, only timings).

Rows: ember's whole ``x + x``; its recorded entry (the compiled launcher, `_claunch`, where it
was built) and a `DriverLaunch` of the same kernel; the bare ``cuLaunchKernel`` through
CuPy's binding with the entry's parameter array, and with one packed parameter buffer
(``CU_LAUNCH_PARAM_BUFFER_POINTER``); the same call through ctypes; Triton's own launcher; and,
for scale, torch's ``add`` and an empty torch kernel (``torch.cuda._sleep(0)``).
"""

from __future__ import annotations

import ctypes
import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _abi_buffer(types: list[str], raw: list[object]) -> bytes:
    """The kernel's parameters in their C layout (each aligned to its own size)."""
    sizes = {"i32": ("i", 4), "i64": ("q", 8), "fp32": ("f", 4), "u32": ("I", 4),
             "u64": ("Q", 8), "fp64": ("d", 8)}
    fmt, at = "<", 0
    vals = []
    kept = [(t, v) for t, v in zip(types, raw, strict=True) if t != "constexpr"]
    for t, v in [*kept, ("*", 0), ("*", 0)]:
        code, size = ("Q", 8) if t[0] == "*" else sizes[t]
        pad = -at % size
        fmt += "x" * pad + code
        at += pad + size
        vals.append(v)
    fmt += "x" * (-at % 8)
    return struct.pack(fmt, *vals)


def child() -> None:
    import cupy
    from cupy.cuda import driver
    from profile_host import _us, add_launch

    import ember

    d = ember.device("cuda:0")
    x = ember.ones((1024,), device=d)
    for _ in range(100):
        x + x
    d.synchronize()
    be, entry, grid, raw, stream = add_launch(x)
    plan = next(iter(be.elementwise_plans.values()))
    rows: dict[str, object] = {"ember x + x": lambda: x + x}
    rows[f"entry ({getattr(entry, '__name__', type(entry).__name__)})"] = \
        lambda: entry(grid, stream, raw)
    if not hasattr(entry, "_params_at"):  # the compiled launcher: the Python one for the rest
        from ember_triton._launcher import DriverLaunch

        entry = DriverLaunch(entry.compiled, entry.types)
        rows["DriverLaunch (struct + CuPy)"] = lambda: entry(grid, stream, raw)
    f, block, shared = entry.function, entry.block, entry.shared
    params = entry._params_at
    entry(grid, stream, raw)
    g0 = grid[0]
    launch = driver.launchKernel
    rows["cupy driver.launchKernel, params"] = lambda: launch(f, g0, 1, 1, block, 1, 1, shared,
                                                              stream, params, 0)
    # one packed buffer instead of a pointer per parameter
    compiled = getattr(entry, "compiled", None)
    types = list(entry.types) if compiled is not None else None
    if types is not None:
        buf = ctypes.create_string_buffer(_abi_buffer(types, raw))
        size = ctypes.c_size_t(len(buf.raw))
        extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(buf), 2, ctypes.addressof(size), 0)
        ex = ctypes.addressof(extra)
        rows["cupy driver.launchKernel, extra buffer"] = lambda: launch(
            f, g0, 1, 1, block, 1, 1, shared, stream, 0, ex)
        tail = (plan[5],)  # BLOCK: the constexpr after the arguments
        rows["triton CompiledKernel.run"] = lambda: compiled.run(
            g0, 1, 1, stream, compiled.function, compiled.packed_metadata, None, None, None,
            *raw, *tail)
    else:
        print("(compiled kernel not found: no extra-buffer / triton rows)")
    lib = ctypes.CDLL("libcuda.so.1")
    cl = lib.cuLaunchKernel
    cl.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    cl.restype = ctypes.c_int
    rows["ctypes cuLaunchKernel, params"] = lambda: cl(f, g0, 1, 1, block, 1, 1, shared,
                                                       stream, params, None)
    rows["ctypes, no argtypes"] = lambda: lib.cuLaunchKernel(f, g0, 1, 1, block, 1, 1, shared,
                                                             stream, params, None)
    c = cupy.ones(1024, cupy.float32)
    rows["cupy c + c"] = lambda: c + c
    try:
        import torch

        tx = torch.ones(1024, device="cuda")
        rows["torch tx + tx"] = lambda: tx + tx
        rows["torch.cuda._sleep(0)"] = lambda: torch.cuda._sleep(0)
        out = torch.empty(1024, device="cuda")
        rows["torch.add(out=)"] = lambda: torch.add(tx, tx, out=out)
    except ImportError:
        pass
    print("| path | µs per launch |\n|---|---:|")
    for name, fn in rows.items():
        try:
            print(f"| {name} | {_us(fn):.2f} |", flush=True)
            cupy.cuda.runtime.deviceSynchronize()
        except Exception as exc:  # a path this driver refuses: say so, time the others
            print(f"| {name} | failed: {type(exc).__name__}: {exc} |", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from with_env import as_child

    as_child(__file__, child)
