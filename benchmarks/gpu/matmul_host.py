"""Host cost of a matmul call, ember on ``cuda:0`` against torch, for square bf16 problems whose
GPU time is near the host's (``python benchmarks/gpu/matmul_host.py``).

For each size, with Triton alone and with kernel selection (cuBLASLt among the candidates):
ember's host microseconds per call (calls without a synchronisation in between, so the GPU
queue absorbs them), the same with ember's per-problem plans dropped before every call (what
a problem that leaves no plan pays: the choice looked up again, the launch prepared again),
torch's; then the time per call of each by CUDA events (the GPU's time where it is busier than
the host, the host's where not), the kernels one call of ember and of torch runs
(`torch.profiler`), and the choices kernel selection made.  First, correctness of a planned
launch on new operands: every call below multiplies operands at new addresses and is compared
with torch."""

from __future__ import annotations

import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIZES = (512, 1024, 2048, 4096)


def child() -> None:
    import cupy as cp
    import torch
    import torch.profiler

    import ember

    d = ember.device("cuda:0")
    be = d.backend
    rows = []
    for n in SIZES:
        for cublas in (False, True):
            be.use_vendor_gemm = cublas
            pairs = [(ember.randn((n, n), dtype=ember.bfloat16, device=d),
                      ember.randn((n, n), dtype=ember.bfloat16, device=d)) for _ in range(3)]
            for a, b in pairs * 2:  # selection, then plans, on operands at new addresses
                got = torch.from_dlpack(cp.asarray((a @ b).numpy().astype("float32")))
                want = torch.from_dlpack(cp.asarray(a.numpy().astype("float32"))) @ \
                    torch.from_dlpack(cp.asarray(b.numpy().astype("float32")))
                err = float(((got - want).abs().max() / want.abs().max()).item())
                assert err < 1e-2, (n, cublas, err)
            a, b = pairs[0]
            ta = torch.randn((n, n), dtype=torch.bfloat16, device="cuda")
            tb = torch.randn((n, n), dtype=torch.bfloat16, device="cuda")

            def unplanned(a=a, b=b):  # type: ignore[no-untyped-def]
                be.matmul_plans.clear()
                return a @ b
            cases = {"ember": lambda a=a, b=b: a @ b, "ember, no plans": unplanned,
                     "torch": lambda ta=ta, tb=tb: ta @ tb}
            host = {}
            for name, fn in cases.items():
                best = float("inf")
                for _ in range(5):
                    fn()
                    torch.cuda.synchronize()
                    t = time.perf_counter()
                    for _ in range(20):
                        fn()
                    best = min(best, (time.perf_counter() - t) / 20 * 1e6)
                    torch.cuda.synchronize()
                host[name] = best
            gpu = {name: be.memory.timer(fn) * 1e3 for name, fn in cases.items()}
            # what ran: the kernels of one call each (a split-K cuBLASLt algorithm is two)
            kernels = {}
            for name in ("ember", "torch"):
                with torch.profiler.profile(
                        activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                    cases[name]()
                    torch.cuda.synchronize()
                kernels[name] = [e.name[:48] for e in prof.events()
                                 if e.device_type.name == "CUDA"]
            rows.append((n, "selected" if cublas else "Triton alone", host, gpu))
            print(n, rows[-1][1], "checked; kernels per call:", kernels, flush=True)
    be.use_vendor_gemm = True
    print("\n| bf16 n³ | mode | host µs/call: ember / no plans / torch | "
          "µs/call by events: ember / no plans / torch |\n|---|---|---|---|")
    for n, mode, host, gpu in rows:
        h = " / ".join(f"{host[k]:.1f}" for k in ("ember", "ember, no plans", "torch"))
        g = " / ".join(f"{gpu[k]:.1f}" for k in ("ember", "ember, no plans", "torch"))
        print(f"| {n} | {mode} | {h} | {g} |")
    print("\nchoices:", {k: v for k, v in be.selector._choices.items() if "bfloat16" in k})


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from with_env import as_child

    as_child(__file__, child)
