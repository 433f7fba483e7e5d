"""ember vs PyTorch eager on one NVIDIA GPU, side by side in one process; prints ratios.

    python benchmarks/gpu/perf.py [--quick] [--out DIR] [--lt-algos N]

What it times (issue 8's acceptance list):
- matmul 4096^3 and 8192^3 in bf16, fp16 and fp32 (TF32): ember with Triton alone, ember with
  kernel selection (Triton configs and cuBLAS), and torch (cuBLAS); TFLOP/s and ratios.
- host cost per eager elementwise op (1,024 elements, a chain of dependent adds).
- softmax and layer_norm over the rows of 8192 x 8192 fp32, as a share of copy bandwidth.
- the MLP training step (784-1024-1024-10, batch 512, Adam, fp32) on autodiff<cuda:0>.

Device times come from CUDA events (CuPy); torch is a peer here, never a dependency of ember.
Runs from a checkout with no install (the same path set-up as ``check.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _host_us(fn, reps: int, sync) -> float:  # type: ignore[no-untyped-def]
    """Microseconds per call of ``fn``, wall clock until the device has finished (best of 3):
    the host cost when the host is the bottleneck, the device time when the device is."""
    fn()
    sync()
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t) / reps * 1e6)
    return best


def child(quick: bool) -> dict[str, object]:
    import cupy as cp
    import numpy as np
    import torch

    import ember

    sys.path.insert(0, str(HERE))
    from _rounds import interleaved, summary

    d = ember.device("cuda:0")
    be = d.backend
    timer = be.memory.timer  # ms per call, CUDA events on the null stream torch also uses
    sync = d.synchronize
    tsync = torch.cuda.synchronize
    res: dict[str, object] = {"gpu": be.memory.device_id(), "torch": torch.__version__}

    # -- matmul ---------------------------------------------------------------------------
    rows = []
    sizes = (4096,) if quick else (4096, 8192)
    for n in sizes:
        for name, dt, tdt in (("bf16", ember.bfloat16, torch.bfloat16),
                              ("fp16", ember.float16, torch.float16),
                              ("tf32", ember.float32, torch.float32)):
            a = ember.randn((n, n), dtype=dt, device=d)
            b = ember.randn((n, n), dtype=dt, device=d)
            be.matmul_precision = "tf32" if name == "tf32" else "ieee"
            torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
            flop = 2 * n ** 3
            ta = torch.randn((n, n), dtype=tdt, device="cuda")
            tb = torch.randn((n, n), dtype=tdt, device="cuda")

            def ember_mm(cublas: bool, a=a, b=b):  # type: ignore[no-untyped-def]
                be.use_vendor_gemm = cublas
                return a @ b
            ember_mm(False)  # kernel selection among the Triton configs, then with cuBLAS
            ember_mm(True)
            # six interleaved rounds (the GPU's clock drifts under long matmuls, down to its
            # power limit): each round times a ~10 ms batch of each with CUDA events, and
            # starts one case later, so each case follows each other equally often (what runs
            # just before a case, and how much power it drew, moves that case's clock)
            cases = [("triton", lambda: ember_mm(False)), ("selected", lambda: ember_mm(True)),
                     ("torch", lambda ta=ta, tb=tb: ta @ tb)]
            per: dict[str, list[float]] = {k: [] for k, _ in cases}
            for r in range(6):
                for k, fn in cases[r % 3:] + cases[:r % 3]:
                    per[k].append(timer(fn))
            tri, sel, tt = (min(per[k]) for k in ("triton", "selected", "torch"))

            def median_ratio(k: str, per=per) -> float:
                return round(statistics.median(
                    t / x for t, x in zip(per["torch"], per[k], strict=True)), 3)
            be.use_vendor_gemm = True
            # correctness on the same operands: ember vs torch on ember's data
            ref = torch.from_dlpack(cp.asarray(a.numpy().astype(np.float32))) @ \
                torch.from_dlpack(cp.asarray(b.numpy().astype(np.float32)))
            got = torch.from_dlpack(cp.asarray((a @ b).numpy().astype(np.float32)))
            err = float(((got - ref).abs().max() / ref.abs().max()).item())
            rows.append({"n": n, "dtype": name,
                         "triton_tflops": round(flop / tri / 1e9, 1),
                         "selected_tflops": round(flop / sel / 1e9, 1),
                         "torch_tflops": round(flop / tt / 1e9, 1),
                         "triton_vs_cublas": round(tt / tri, 3),
                         "selected_vs_cublas": round(tt / sel, 3),
                         "triton_vs_cublas_median": median_ratio("triton"),
                         "selected_vs_cublas_median": median_ratio("selected"),
                         "max_rel_err": err})
            del a, b, ta, tb
    be.matmul_precision = "ieee"
    torch.backends.cuda.matmul.allow_tf32 = False
    res["matmul"] = rows
    res["selector_cache"] = str(be.selector.path)
    res["selector_timings"] = dict(be.selector._timings)  # ms per candidate, by key

    # -- host cost per eager op -----------------------------------------------------------
    x = ember.ones((1024,), device=d)
    tx = torch.ones(1024, device="cuda")
    times = interleaved({"ember": lambda: x + x, "torch": lambda: tx + tx},
                        {"ember": sync, "torch": tsync}, 7, 2000)
    res["host_us_per_add"] = {k: round(v * 1e3, 2) if k != "median_ratio" else v
                              for k, v in summary(times, "ember", "torch").items()}

    # -- row softmax / layer_norm vs copy -------------------------------------------------
    r = 8192
    v = ember.randn((r, r), device=d)
    cv = cp.random.standard_normal((r, r), dtype=cp.float32)
    out = cp.empty_like(cv)
    copy = timer(lambda: out.__setitem__(Ellipsis, cv))
    nbytes = 2 * 4 * r * r
    soft = timer(lambda: v.softmax(dim=-1))
    w = ember.ones((r,), device=d)
    bias = ember.zeros((r,), device=d)
    ln = timer(lambda: ember.nn.functional.layer_norm(v, (r,), w, bias))
    tv = torch.randn((r, r), device="cuda")
    tsoft = timer(lambda: tv.softmax(dim=-1))
    tln = timer(lambda: torch.nn.functional.layer_norm(tv, (r,)))
    res["rows"] = {"copy_tb_s": round(nbytes / copy / 1e9, 2),
                   "softmax_share_of_copy": round(copy / soft, 3),
                   "layer_norm_share_of_copy": round(copy / ln, 3),
                   "torch_softmax_share": round(copy / tsoft, 3),
                   "torch_layer_norm_share": round(copy / tln, 3)}

    # -- MLP training step ----------------------------------------------------------------
    from _mlp import mlp_step, torch_mlp_step

    step = mlp_step(ember)

    tstep = torch_mlp_step(torch)

    fns: dict[str, Any] = {"ember": step, "torch": tstep}
    syncs: dict[str, Any] = {"ember": sync, "torch": tsync}
    try:  # the same step recorded once as a CUDA graph and replayed
        import ember_cuda

        gstep = mlp_step(ember, capturable=True)
        recorded = ember_cuda.graph(gstep, device="autodiff<cuda:0>", warmup=3)
        fns["ember_graph"] = recorded.replay
        fns["ember_capturable_eager"] = mlp_step(ember, capturable=True)
        syncs["ember_graph"] = syncs["ember_capturable_eager"] = sync
    except Exception as exc:  # reported, not fatal
        res["mlp_step_ms"] = {"graph_error": f"{type(exc).__name__}: {exc}"[:2000]}
    for _ in range(5):
        for fn in fns.values():
            fn()
    steps = 20 if quick else 50
    times = interleaved(fns, syncs, 3 if quick else 7, steps)  # rounds: ember, torch, ...
    mlp = summary(times, "ember", "torch")
    res["mlp_step_ms"] = {**res.get("mlp_step_ms", {}), **mlp,
                          "ratio": round(mlp["ember"] / mlp["torch"], 2)}
    if "ember_graph" in mlp:
        res["mlp_step_ms"]["graph_ratio"] = round(mlp["ember_graph"] / mlp["torch"], 3)
    try:  # the same step through Fusion: analysis share from its stats
        import ember_fusion

        fstep = mlp_step(ember, "autodiff<fusion<cuda:0>>")
        fdev = ember.device("fusion<cuda:0>")
        for _ in range(5):
            fstep()
        fdev.synchronize()
        ember_fusion.reset_stats(fdev)
        f_ms = _host_us(fstep, steps, fdev.synchronize) / 1e3
        st = ember_fusion.stats(fdev)
        res["mlp_step_ms"]["ember_fusion"] = round(f_ms, 3)
        res["mlp_step_ms"]["fusion_analysis_share"] = round(
            st.analysis_s / max(st.analysis_s + st.execute_s, 1e-9), 4)
    except Exception as exc:  # reported, not fatal: the other figures stand
        res["mlp_step_ms"]["fusion_error"] = f"{type(exc).__name__}: {exc}"
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default=os.environ.get("OUT") or "artifacts/gpu-perf")
    p.add_argument("--lt-algos", type=int, default=None,
                   help="cuBLASLt algorithms per problem for kernel selection (default: "
                        "ember_cuda.cublaslt.COUNT)")
    args = p.parse_args(argv)
    if args.child:
        import ember_cuda.cublaslt as lt

        if args.lt_algos is not None:
            lt.COUNT = args.lt_algos
        res = child(args.quick)
        res["lt_algos"] = lt.COUNT
        print("PERF " + json.dumps(res))
        return 0
    sys.path.insert(0, str(HERE))
    from check import child_result

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    flags = ["--child"] + (["--quick"] if args.quick else [])
    if args.lt_algos is not None:
        flags += ["--lt-algos", str(args.lt_algos)]
    res = child_result(__file__, flags, "PERF")
    if res is None:
        return 1
    res["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    (out / "perf.json").write_text(json.dumps(res, indent=1))
    print(f"GPU: {res['gpu']}, torch {res['torch']}, {res['date']}")
    print("\n| matmul (TFLOP/s best of 6 rounds) | Triton alone | selected | cuBLAS (torch) | "
          "Triton/cuBLAS best, median of rounds | selected/cuBLAS best, median | max rel err |"
          "\n|---|---|---|---|---|---|---|")
    for r in res["matmul"]:
        print(f"| {r['n']}^3 {r['dtype']} | {r['triton_tflops']} | {r['selected_tflops']} | "
              f"{r['torch_tflops']} | {r['triton_vs_cublas']}x, {r['triton_vs_cublas_median']}x"
              f" | {r['selected_vs_cublas']}x, {r['selected_vs_cublas_median']}x | "
              f"{r['max_rel_err']:.1e} |")
    h = res["host_us_per_add"]
    print(f"\nhost cost per add (1,024 elements): ember {h['ember']} us, torch {h['torch']} us "
          f"(median ratio of 7 interleaved rounds {h['median_ratio']}x)")
    r = res["rows"]
    print(f"8192x8192 fp32 rows, share of copy ({r['copy_tb_s']} TB/s): softmax "
          f"{r['softmax_share_of_copy']} (torch {r['torch_softmax_share']}), layer_norm "
          f"{r['layer_norm_share_of_copy']} (torch {r['torch_layer_norm_share']})")
    m = res["mlp_step_ms"]
    print(f"MLP step with CUDA graph replay: {m.get('ember_graph')} ms, ratio "
          f"{m.get('graph_ratio')}x of torch eager (capturable Adam eagerly: "
          f"{m.get('ember_capturable_eager')} ms) {m.get('graph_error', '')}")
    print(f"MLP step: ember {m['ember']} ms, torch {m['torch']} ms, ratio {m['ratio']}x "
          f"(median of rounds {m['median_ratio']}x); "
          f"autodiff<fusion<cuda:0>> {m.get('ember_fusion')} ms (analysis share "
          f"{m.get('fusion_analysis_share')}) {m.get('fusion_error', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
