"""cuBLASLt configurations beyond its heuristic, against torch (``python
benchmarks/gpu/cublaslt_sweep.py [--sizes 4096,8192] [--dtypes bf16,fp16,tf32] [--seconds 20]``).

Where kernel selection's best candidate is the algorithm torch runs too (the heuristic's
first), ember can only tie.  cuBLASLt lets a caller build configurations itself: every
algorithm id (``cublasLtMatmulAlgoGetIds``) with each tile and stage count it supports
(``cublasLtMatmulAlgoCapGetAttribute``), CTA swizzling on or off and a few thread-block
cluster shapes, each checked by ``cublasLtMatmulAlgoCheck`` (valid, and a workspace within
ember's 32 MiB).  Per problem this times every valid configuration once, quickly (three
calls between CUDA events), then the fastest eight, the heuristic's first algorithm and torch
in five rotated rounds (`ember_triton`'s device timer), and prints each one's TFLOP/s and
median ratio to torch.  What a configuration is: (algorithm id, tile id, stages id,
swizzle, cluster shape id), the enums of ``cublasLt.h``.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# cublasLt.h enums (stable ABI)
_CAP_CTA_SWIZZLING, _CAP_TILE_IDS, _CAP_STAGES_IDS = 2, 6, 13
_CONFIG_TILE, _CONFIG_SWIZZLE, _CONFIG_STAGES, _CONFIG_CLUSTER = 1, 4, 6, 8
_CLUSTERS = (0, 2, 3, 5)  # auto, 1x1x1, 2x1x1, 1x2x1
_RESULT_BYTES = 96  # cublasLtMatmulHeuristicResult_t


def _declare(lib: Any) -> None:
    p, i, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    for name, argtypes in {
        "cublasLtMatmulAlgoGetIds": [p, i, i, i, i, i, i, i, p, p],
        "cublasLtMatmulAlgoInit": [p, i, i, i, i, i, i, i, p],
        "cublasLtMatmulAlgoCapGetAttribute": [p, i, p, sz, p],
        "cublasLtMatmulAlgoConfigSetAttribute": [p, i, p, sz],
        "cublasLtMatmulAlgoCheck": [p, p, p, p, p, p, p, p],
    }.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int


def _cap_u32s(lib: Any, algo: Any, attr: int) -> list[int]:
    size = ctypes.c_size_t(0)
    if lib.cublasLtMatmulAlgoCapGetAttribute(ctypes.byref(algo), attr, None, 0,
                                             ctypes.byref(size)) or not size.value:
        return []
    buf = (ctypes.c_uint32 * (size.value // 4))()
    if lib.cublasLtMatmulAlgoCapGetAttribute(ctypes.byref(algo), attr, buf, size.value,
                                             ctypes.byref(size)):
        return []
    return list(buf)


def configurations(lt: Any, compute: int, scale: int, dtype: int, workspace: int,
                   seconds: float) -> tuple[list[tuple[tuple[int, ...], Any]], int]:
    """``([(name, algo), ...] valid for ``lt``'s problem, configurations checked)``, the
    enumeration cut short after ``seconds``."""
    deadline = time.perf_counter() + seconds
    lib, handle = lt._lib, lt._handle
    _declare(lib)
    ids = (ctypes.c_int * 256)()
    count = ctypes.c_int(0)
    if lib.cublasLtMatmulAlgoGetIds(handle, compute, scale, dtype, dtype, dtype, dtype, 256,
                                    ids, ctypes.byref(count)):
        return [], 0
    found: list[tuple[tuple[int, ...], Any]] = []
    checked = 0
    result = (ctypes.c_ubyte * _RESULT_BYTES)()
    for algo_id in ids[:count.value]:
        if time.perf_counter() > deadline:
            break
        base = (ctypes.c_uint64 * 8)()
        if lib.cublasLtMatmulAlgoInit(handle, compute, scale, dtype, dtype, dtype, dtype,
                                      algo_id, base):
            continue
        swizzles = [0, 1] if _cap_u32s(lib, base, _CAP_CTA_SWIZZLING)[:1] == [1] else [0]
        for tile in _cap_u32s(lib, base, _CAP_TILE_IDS) or [0]:
            for stages in _cap_u32s(lib, base, _CAP_STAGES_IDS) or [0]:
                for swizzle in swizzles:
                    for cluster in _CLUSTERS:
                        algo = (ctypes.c_uint64 * 8).from_buffer_copy(base)
                        ok = True
                        for attr, value in ((_CONFIG_TILE, ctypes.c_uint32(tile)),
                                            (_CONFIG_STAGES, ctypes.c_uint32(stages)),
                                            (_CONFIG_SWIZZLE, ctypes.c_uint32(swizzle)),
                                            (_CONFIG_CLUSTER, ctypes.c_uint16(cluster))):
                            if lib.cublasLtMatmulAlgoConfigSetAttribute(
                                    ctypes.byref(algo), attr, ctypes.byref(value),
                                    ctypes.sizeof(value)):
                                ok = False
                                break
                        if not ok:
                            continue
                        checked += 1
                        if lib.cublasLtMatmulAlgoCheck(handle, lt._desc, lt._a, lt._b, lt._c,
                                                       lt._c, ctypes.byref(algo), result):
                            continue
                        need = int.from_bytes(bytes(result[64:72]), "little")
                        if need <= workspace:
                            found.append(((algo_id, tile, stages, swizzle, cluster), algo))
    return found, checked


def child(sizes: list[int], dtypes: list[str], seconds: float) -> None:
    import cupy
    import torch
    from cublaslt_algos import DTYPES, lt_problem

    import ember
    from ember_triton._cublas import _COMPUTE_32F, _COMPUTE_32F_FAST_TF32, _CUDA_R
    from ember_triton._cublaslt import WORKSPACE, version

    d = ember.device("cuda:0")
    be = d.backend
    mem = be.memory
    timer = mem.timer
    print(f"cuBLASLt {version()}, torch {torch.__version__}")
    table: list[str] = []
    for n in sizes:
        for name in dtypes:
            a, b, out, ta, tb, _, _, lt = lt_problem(d, n, name)
            dname = DTYPES[name][2]
            heuristic = len(lt.algos)
            compute = _COMPUTE_32F_FAST_TF32 if name == "tf32" else _COMPUTE_32F
            t0 = time.perf_counter()
            found, checked = configurations(lt, compute, _CUDA_R["float32"], _CUDA_R[dname],
                                            WORKSPACE, seconds)
            t_enum = time.perf_counter() - t0
            ws = mem.workspace(WORKSPACE)
            stream = mem.stream()
            lt.algos.extend(algo for _, algo in found)

            def run(i: int, lt=lt, a=a, b=b, out=out, ws=ws, stream=stream) -> None:
                lt.run(i, out.ptr, a.ptr, b.ptr, 0, stream, ws)

            # quick pass: every valid configuration, three calls between CUDA events
            quick: list[tuple[float, int]] = []
            ev0, ev1 = cupy.cuda.Event(), cupy.cuda.Event()
            for j in range(len(found)):
                i = heuristic + j
                try:
                    run(i)
                    ev0.record()
                    for _ in range(3):
                        run(i)
                    ev1.record()
                    ev1.synchronize()
                except Exception:  # a configuration the check passed and the launch refuses
                    continue
                quick.append((cupy.cuda.get_elapsed_time(ev0, ev1) / 3, i))
            quick.sort()
            print(f"{n}^3 {name}: {checked} configurations checked, {len(found)} valid, "
                  f"{len(quick)} ran ({t_enum:.1f} s to enumerate)")
            cases: dict[str, Any] = {"torch": lambda ta=ta, tb=tb: ta @ tb,
                                     "heuristic algo 0": lambda: run(0)}
            for _, i in quick[:8]:
                cases[f"config {found[i - heuristic][0]}"] = lambda i=i: run(i)
            order = list(cases.items())
            ms: dict[str, list[float]] = {k: [] for k in cases}
            for r in range(5):
                for k, fn in order[r % len(order):] + order[:r % len(order)]:
                    ms[k].append(timer(fn))
            flop = 2 * n ** 3
            for k, ts in ms.items():
                ratio = statistics.median(t / x for t, x in zip(ms["torch"], ts, strict=True))
                table.append(f"{n}^3 {name} {k:44} {flop / min(ts) / 1e9:8.1f} {ratio:8.3f}x")
            del lt, a, b, out, ta, tb
    print(f"{'case':56} {'TFLOP/s':>8} {'vs torch':>9}  (best; median ratio of 5 rounds)")
    print("\n".join(table))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="4096,8192")
    p.add_argument("--dtypes", default="bf16,fp16,tf32")
    p.add_argument("--seconds", type=float, default=20.0,
                   help="time limit of one problem's enumeration")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    dtypes = args.dtypes.split(",")
    if args.child:
        child(sizes, dtypes, args.seconds)
        return
    sys.path.insert(0, str(HERE))
    from with_env import main as with_env

    sys.exit(with_env([sys.executable, __file__, "--child", "--sizes", args.sizes,
                       "--dtypes", args.dtypes, "--seconds", str(args.seconds)]))


if __name__ == "__main__":
    main()
