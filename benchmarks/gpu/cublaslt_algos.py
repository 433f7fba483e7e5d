"""cuBLASLt's algorithms against torch's cuBLAS, one by one (``python
benchmarks/gpu/cublaslt_algos.py``): for 4096³ and 8192³ in bf16, fp16 and tf32, the device time
of torch's ``a @ b``, of CuPy's cuBLAS call (what kernel selection's "cublas" candidate was),
and of each algorithm cuBLASLt's heuristic offers (`ember_cuda.cublaslt`), in interleaved
rounds with CUDA events; TFLOP/s and each one's median ratio to torch over the rounds
(``EMBER_LT_ALGOS=N`` asks the heuristic for N algorithms instead of `_cublaslt.COUNT`).
A tuning benchmark: `_cublaslt.COUNT`, how many of the heuristic's algorithms kernel selection
times, comes from it; run it again after a CUDA upgrade or on a new GPU model.
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


#: the acceptance problems' dtypes: (ember dtype name, torch dtype name, cuBLAS dtype name)
DTYPES = {"bf16": ("bfloat16", "bfloat16", "bfloat16"), "fp16": ("float16", "float16", "float16"),
          "tf32": ("float32", "float32", "float32")}


def lt_problem(d, n: int, name: str):  # type: ignore[no-untyped-def]
    """An ``n``³ matmul in ``name`` (a `DTYPES` key) on device ``d``: ember's operands and
    output (device arrays), torch's own random operands, the cuBLAS layout, the precision and
    its `LtGemm` (torch's tf32 switch set to match)."""
    import torch

    import ember
    from ember_cuda.cublas import gemm_layout
    from ember_cuda.cublaslt import LtGemm, alignment

    ename, tname, lname = DTYPES[name]
    torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
    precision = "tf32" if name == "tf32" else "ieee"
    a = ember.randn((n, n), dtype=getattr(ember, ename), device=d)._data
    b = ember.randn((n, n), dtype=getattr(ember, ename), device=d)._data
    out = d.backend.empty((n, n), a.dtype)
    ta = torch.randn((n, n), dtype=getattr(torch, tname), device="cuda")
    tb = torch.randn((n, n), dtype=getattr(torch, tname), device="cuda")
    lay = gemm_layout(n, n, n, 1)
    assert lay is not None
    lt = LtGemm(d.backend.memory.index, n, n, n, 1, lay, lay, 0, 0, lname, precision, False,
                alignment(out.ptr, a.ptr, b.ptr))
    return a, b, out, ta, tb, lay, precision, lt


def child() -> None:
    import cupy
    import torch

    import ember
    import ember_cuda.cublaslt as _lt
    from ember_cuda.cublas import strided_batched_gemm
    from ember_cuda.cublaslt import WORKSPACE, version

    _lt.COUNT = int(os.environ.get("EMBER_LT_ALGOS", _lt.COUNT))

    d = ember.device("cuda:0")
    be = d.backend
    mem = be.memory
    print(f"cuBLASLt {version()}, torch {torch.__version__}")
    print(f"{'case':28} {'TFLOP/s':>8} {'vs torch':>9}  (median of 5 rounds)")
    for n in (4096, 8192):
        for name in DTYPES:
            a, b, out, ta, tb, lay, precision, lt = lt_problem(d, n, name)
            ws = mem.workspace(WORKSPACE)
            cases = {"torch": lambda ta=ta, tb=tb: ta @ tb,
                     "cupy cublas": lambda a=a, b=b, out=out, lay=lay, p=precision, n=n:
                         strided_batched_gemm(out.ptr, a.ptr, b.ptr, n, n, n, 1, 0, 0, lay, lay,
                                              a.dtype, p)}
            for i in range(len(lt.algos)):
                cases[f"lt algo {i}"] = lambda i=i, lt=lt, a=a, b=b, out=out, ws=ws: lt.run(
                    i, out.ptr, a.ptr, b.ptr, 0, mem.stream(), ws)
            ms: dict[str, list[float]] = {k: [] for k in cases}
            for fn in cases.values():
                fn()
            cupy.cuda.Device().synchronize()
            for _ in range(5):
                for k, fn in cases.items():
                    reps = 20 if n == 4096 else 5
                    ev0, ev1 = cupy.cuda.Event(), cupy.cuda.Event()
                    if k == "torch":
                        torch.cuda.synchronize()
                        s0, s1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                            enable_timing=True)
                        s0.record()
                        for _ in range(reps):
                            fn()
                        s1.record()
                        s1.synchronize()
                        ms[k].append(s0.elapsed_time(s1) / reps)
                    else:
                        ev0.record()
                        for _ in range(reps):
                            fn()
                        ev1.record()
                        ev1.synchronize()
                        ms[k].append(cupy.cuda.get_elapsed_time(ev0, ev1) / reps)
            flop = 2 * n ** 3
            for k, ts in ms.items():
                ratio = statistics.median(t / w for t, w in zip(ms["torch"], ts, strict=True))
                print(f"{n}^3 {name} {k:18} {flop / statistics.median(ts) / 1e9:8.1f} "
                      f"{ratio:8.3f}x")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from with_env import as_child

    as_child(__file__, child)
