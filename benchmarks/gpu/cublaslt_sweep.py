"""cuBLASLt configurations beyond its heuristic, against torch (``python
benchmarks/gpu/cublaslt_sweep.py [--problems 8192:tf32,4096:fp16] [--seconds 15]``).

Where kernel selection's best candidate is the algorithm torch runs too (the heuristic's
first), ember can only tie.  cuBLASLt lets a caller build configurations itself.  Per problem
this gathers, without repeats, every configuration ``cublasLtMatmulAlgoCheck`` accepts within
ember's 32 MiB workspace, from three sources: the heuristic's own algorithms with CTA
swizzling, thread-block cluster shape and stage count changed ("variant"); the heuristic asked
once per algorithm id (``CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID``, "per-id"); and every algorithm
id x tile x stages x swizzle x cluster shape ("grid", cut short after ``--seconds``).  A quick
pass times each (one call, three more where it is near the best), then the fastest eight, the
heuristic's first algorithm and torch run in five rotated rounds (`ember_triton`'s device
timer); each one's TFLOP/s and median ratio to torch are printed.  A configuration reads
(algorithm id, tile id, stages id, swizzle, cluster shape id), the enums of ``cublasLt.h``.
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
_PREF_SEARCH_MODE, _SEARCH_LIMITED_BY_ALGO_ID = 0, 1


def _declare(lib: Any) -> None:
    p, i, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    for name, argtypes in {
        "cublasLtMatmulAlgoGetIds": [p, i, i, i, i, i, i, i, p, p],
        "cublasLtMatmulAlgoInit": [p, i, i, i, i, i, i, i, p],
        "cublasLtMatmulAlgoCapGetAttribute": [p, i, p, sz, p],
        "cublasLtMatmulAlgoConfigSetAttribute": [p, i, p, sz],
        "cublasLtMatmulAlgoConfigGetAttribute": [p, i, p, sz, p],
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


_CONFIG_TYPES = {_CONFIG_TILE: ctypes.c_uint32, _CONFIG_SWIZZLE: ctypes.c_uint32,
                 _CONFIG_STAGES: ctypes.c_uint32, _CONFIG_CLUSTER: ctypes.c_uint16}


def describe(lib: Any, algo: Any) -> tuple[int, ...]:
    """``(algorithm id, tile, stages, swizzle, cluster shape)`` of a configured algorithm."""
    out = []
    for attr, ctype in ((0, ctypes.c_int32), *_CONFIG_TYPES.items()):
        value, written = ctype(0), ctypes.c_size_t(0)
        lib.cublasLtMatmulAlgoConfigGetAttribute(ctypes.byref(algo), attr, ctypes.byref(value),
                                                 ctypes.sizeof(value), ctypes.byref(written))
        out.append(int(value.value))
    return (out[0], out[1], out[3], out[2], out[4])


def _variant(lib: Any, base: Any, settings: dict[int, int]) -> Any:
    algo = (ctypes.c_uint64 * 8).from_buffer_copy(base)
    for attr, value in settings.items():
        v = _CONFIG_TYPES[attr](value)
        if lib.cublasLtMatmulAlgoConfigSetAttribute(ctypes.byref(algo), attr, ctypes.byref(v),
                                                    ctypes.sizeof(v)):
            return None
    return algo


def configurations(lt: Any, compute: int, scale: int, dtype: int, workspace: int,
                   seconds: float) -> tuple[list[tuple[str, Any]], int]:
    """``([(source, algo), ...], configurations checked)``: every configuration valid for
    ``lt``'s problem (``cublasLtMatmulAlgoCheck``, workspace within ``workspace``), without
    repeats, from three sources in this order: the heuristic's own algorithms with swizzle,
    cluster shape and stages changed ("variant"); the heuristic asked per algorithm id
    ("per-id"); every algorithm id x tile x stages x swizzle x cluster shape ("grid", cut
    short after ``seconds``)."""
    from ember_triton._cublaslt import _PREF_MAX_WORKSPACE, _RESULT_BYTES

    lib, handle = lt._lib, lt._handle
    _declare(lib)
    seen = {bytes(a) for a in lt.algos}
    found: list[tuple[str, Any]] = []
    checked = 0
    result = (ctypes.c_ubyte * _RESULT_BYTES)()

    def offer(source: str, algo: Any) -> None:
        nonlocal checked
        if algo is None or bytes(algo) in seen:
            return
        seen.add(bytes(algo))
        checked += 1
        if lib.cublasLtMatmulAlgoCheck(handle, lt._desc, lt._a, lt._b, lt._c, lt._c,
                                       ctypes.byref(algo), result):
            return
        if int.from_bytes(bytes(result[64:72]), "little") <= workspace:
            found.append((source, algo))

    for base in list(lt.algos):
        _, _, stages_now, _, _ = describe(lib, base)
        stage_ids = _cap_u32s(lib, base, _CAP_STAGES_IDS) or [stages_now]
        for swizzle in (0, 1):
            for cluster in _CLUSTERS:
                for stages in {stages_now, *stage_ids}:
                    offer("variant", _variant(lib, base, {_CONFIG_SWIZZLE: swizzle,
                                                          _CONFIG_CLUSTER: cluster,
                                                          _CONFIG_STAGES: stages}))
    ids = (ctypes.c_int * 256)()
    count = ctypes.c_int(0)
    if lib.cublasLtMatmulAlgoGetIds(handle, compute, scale, dtype, dtype, dtype, dtype, 256,
                                    ids, ctypes.byref(count)):
        return found, checked
    pref = ctypes.c_void_p()
    lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref))
    for attr, value in ((_PREF_SEARCH_MODE, ctypes.c_uint32(_SEARCH_LIMITED_BY_ALGO_ID)),
                        (_PREF_MAX_WORKSPACE, ctypes.c_uint64(workspace))):
        lib.cublasLtMatmulPreferenceSetAttribute(pref, attr, ctypes.byref(value),
                                                 ctypes.sizeof(value))
    per_id = 32
    for algo_id in ids[:count.value]:
        results = (ctypes.c_ubyte * (_RESULT_BYTES * per_id))()
        for j in range(per_id):
            slot = (ctypes.c_uint64 * 8).from_buffer(results, j * _RESULT_BYTES)
            lib.cublasLtMatmulAlgoInit(handle, compute, scale, dtype, dtype, dtype, dtype,
                                       algo_id, slot)
        n = ctypes.c_int(0)
        if lib.cublasLtMatmulAlgoGetHeuristic(handle, lt._desc, lt._a, lt._b, lt._c, lt._c,
                                              pref, per_id, results, ctypes.byref(n)):
            continue
        raw = bytes(results)
        for j in range(n.value):
            entry = raw[j * _RESULT_BYTES:(j + 1) * _RESULT_BYTES]
            if int.from_bytes(entry[72:76], "little", signed=True) == 0:
                offer("per-id", (ctypes.c_uint64 * 8).from_buffer_copy(entry[:64]))
    lib.cublasLtMatmulPreferenceDestroy(pref)
    deadline = time.perf_counter() + seconds
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
                        offer("grid", _variant(lib, base, {
                            _CONFIG_TILE: tile, _CONFIG_STAGES: stages,
                            _CONFIG_SWIZZLE: swizzle, _CONFIG_CLUSTER: cluster}))
    return found, checked


def sweep(d: Any, n: int, name: str, seconds: float) -> list[str]:
    """One problem's sweep (`child`): the lines of its table."""
    import cupy
    from cublaslt_algos import DTYPES, lt_problem

    from ember_triton._cublas import _COMPUTE_32F, _COMPUTE_32F_FAST_TF32, _CUDA_R
    from ember_triton._cublaslt import WORKSPACE

    mem = d.backend.memory
    timer = mem.timer
    lines: list[str] = []
    a, b, out, ta, tb, _, _, lt = lt_problem(d, n, name)
    heuristic = len(lt.algos)
    compute = _COMPUTE_32F_FAST_TF32 if name == "tf32" else _COMPUTE_32F
    t0 = time.perf_counter()
    found, checked = configurations(lt, compute, _CUDA_R["float32"],
                                    _CUDA_R[DTYPES[name][2]], WORKSPACE, seconds)
    t_enum = time.perf_counter() - t0
    ws = mem.workspace(WORKSPACE)
    stream = mem.stream()
    lt.algos.extend(algo for _, algo in found)

    def run(i: int, lt=lt, a=a, b=b, out=out, ws=ws, stream=stream) -> None:
        lt.run(i, out.ptr, a.ptr, b.ptr, 0, stream, ws)

    # quick pass over every candidate, the heuristic's too: one call between CUDA events,
    # two more where it is within 1.5x of the best so far; at most ``seconds``
    ev0, ev1 = cupy.cuda.Event(), cupy.cuda.Event()

    def once(i: int, reps: int) -> float:
        ev0.record()
        for _ in range(reps):
            run(i)
        ev1.record()
        ev1.synchronize()
        return cupy.cuda.get_elapsed_time(ev0, ev1) / reps

    for _ in range(20):  # warm the GPU up with the heuristic's first
        run(0)
    quick: list[tuple[float, int]] = []
    best = float("inf")
    t0 = time.perf_counter()
    refused = 0
    for i in range(len(lt.algos)):
        if time.perf_counter() - t0 > seconds:
            break
        try:
            ms = once(i, 1)
            if ms < 1.5 * best:
                ms = min(ms, once(i, 3))
        except Exception:  # a configuration the check passed and the launch refuses
            refused += 1
            continue
        best = min(best, ms)
        quick.append((ms, i))
    quick.sort()
    sources: dict[str, int] = {}
    for source, _ in found:
        sources[source] = sources.get(source, 0) + 1
    print(f"{n}^3 {name}: heuristic {heuristic}, {checked} more checked, {len(found)} valid "
          f"{sources} ({t_enum:.1f} s), {len(quick)} timed, {refused} refused; quick best "
          f"{[(round(ms, 4), i) for ms, i in quick[:10]]}", flush=True)

    def label(i: int) -> str:
        source = "heuristic" if i < heuristic else found[i - heuristic][0]
        return f"{source} #{i} {describe(lt._lib, lt.algos[i])}"

    cases: dict[str, Any] = {"torch": lambda ta=ta, tb=tb: ta @ tb,
                             label(0): lambda: run(0)}
    for _, i in quick[:8]:
        cases.setdefault(label(i), lambda i=i: run(i))
    order = list(cases.items())
    ms_of: dict[str, list[float]] = {k: [] for k in cases}
    for r in range(5):
        for k, fn in order[r % len(order):] + order[:r % len(order)]:
            ms_of[k].append(timer(fn))
    flop = 2 * n ** 3
    for k, ts in ms_of.items():
        ratio = statistics.median(t / x for t, x in zip(ms_of["torch"], ts, strict=True))
        line = f"{n}^3 {name} {k:58} {flop / min(ts) / 1e9:8.1f} {ratio:8.3f}x"
        print(line, flush=True)
        lines.append(line)
    return lines


def child(problems: list[tuple[int, str]], seconds: float) -> None:
    import torch

    import ember
    from ember_triton._cublaslt import version

    d = ember.device("cuda:0")
    print(f"cuBLASLt {version()}, torch {torch.__version__}", flush=True)
    table: list[str] = []
    for n, name in problems:
        table += sweep(d, n, name, seconds)
    print(f"{'case':70} {'TFLOP/s':>8} {'vs torch':>9}  (best; median ratio of 5 rounds)")
    print("\n".join(table))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--problems", default="8192:tf32,4096:fp16,4096:tf32,8192:fp16,4096:bf16,"
                   "8192:bf16", help="size:dtype pairs, in the order they run")
    p.add_argument("--seconds", type=float, default=15.0,
                   help="time limit of one problem's grid enumeration, and of its quick pass")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    problems = [(int(n), dtype) for n, dtype in
                (item.split(":") for item in args.problems.split(","))]
    if args.child:
        child(problems, args.seconds)
        return
    sys.path.insert(0, str(HERE))
    from with_env import main as with_env

    sys.exit(with_env([sys.executable, __file__, "--child", "--problems", args.problems,
                       "--seconds", str(args.seconds)]))


if __name__ == "__main__":
    main()
