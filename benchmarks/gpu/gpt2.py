"""GPT-2 small training, ember against PyTorch, side by side in one process.

    python benchmarks/gpu/with_env.py python benchmarks/gpu/gpt2.py [--quick]
        [--batch 8] [--steps 20] [--layers 12] [--no-torch-compile] [--no-autocast]
        [--budget 270] [--json out.json]
    python benchmarks/gpu/gpt2.py --device cpu --tiny          # both frameworks on the CPU

The model (``_gpt2.py``): GPT-2 small as nanoGPT writes it (vocabulary 50,304, context 1024,
12 layers, 12 heads, width 768, tied embeddings, ~124M parameters), the same initial weights
on both sides (PyTorch's GPT-2 initialisation from a fixed seed, copied into ember through
numpy), AdamW (lr 6e-4, betas (0.9, 0.95), weight decay 0.1 on the matrices only; PyTorch's
``fused=True``), random token batches from a fixed numpy seed.  On the GPU the forward and
the loss run under bf16 autocast on both sides (``--no-autocast``: float32), with TF32
matmuls on both sides.

Four modes, each built and trained in turn for ``--steps`` steps: PyTorch eager,
``torch.compile(model)``, ember eager, ``ember.compile`` of the whole step (forward,
backward, AdamW; a CUDA graph on ``cuda:N``).  Then:

1. the loss check: each mode's losses against PyTorch eager's, step by step, and the loss's
   drop over the run (mean of the first four steps less that of the last four: random
   tokens cycled over four batches, which the model memorises, so a wrong gradient shows as
   a different drop);
2. peak memory of each mode, measured while it trains alone: the most bytes its framework's
   allocator held in use from the fifth step on (``torch.cuda.max_memory_allocated``; CuPy's
   pool for ember through ``CupyMemory.peak_bytes``, plus the private pool of a compiled
   step's CUDA graph), less what the modes built before it hold;
3. tokens/s of each: the best of interleaved rounds (``_rounds.interleaved``), cut to end
   within ``--budget`` seconds (270; ``--quick``: 110).  torch.compile trains last and is
   left out when less than 40% of the budget is left.

Exit status 1 when a loss check fails or an ember mode fails to run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _gpt2 import (
    GPT2_SMALL,
    TINY,
    EmberMemory,
    GPTConfig,
    Setup,
    Side,
    TorchMemory,
    batches,
    count_params,
    ember_side,
    init_state,
    torch_side,
)

#: mode -> (framework, compiled)
MODES: dict[str, tuple[str, bool | str]] = {
    "torch eager": ("torch", False), "torch.compile": ("torch", True),
    "torch.compile max-autotune": ("torch", "max-autotune"),
         "ember eager": ("ember", False), "ember compiled": ("ember", True),
         "ember fused": ("ember", False), "ember fused compiled": ("ember", True)}
#: the modes on ``autodiff<fusion<device>>`` (``--fusion``); the others run ``autodiff<device>``
FUSED = ("ember fused", "ember fused compiled")
#: loss agreement with PyTorch eager: (first step, any step, the drop over the run), relative
TOLERANCES = {"bf16": (2e-2, 5e-2, 0.1), "tf32": (5e-3, 2e-2, 0.05), "fp32": (1e-4, 1e-4, 1e-3)}
GIB = float(1 << 30)
#: steps before the peak-memory window opens
WARM_STEPS = 4


class Log:
    """Lines prefixed with the seconds since the start: the output says where time went."""

    def __init__(self, quiet: bool = False) -> None:
        self.t0 = time.perf_counter()
        self.quiet = quiet

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def __call__(self, *parts: Any) -> None:
        if not self.quiet:
            print(f"[{self.elapsed():6.1f} s]", *parts, flush=True)


@dataclass
class Run:
    """A mode's training run: losses, peak memory, timings, or why it could not run."""

    mode: str
    losses: list[float] = field(default_factory=list)
    peak_bytes: int | None = None
    build_s: float = 0.0
    first_step_s: float = 0.0
    #: wall seconds of each training step, the loss read back included
    step_s: list[float] = field(default_factory=list)
    error: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    side: Side | None = None


# -- the phases --------------------------------------------------------------------------------

def train_mode(setup: Setup, mode: str, steps: int, memory: Any, log: Log) -> Run:
    """Build ``mode``, train it ``steps`` steps reading each loss back, and measure its peak
    memory from the fifth step on (by then the optimizer's state exists, the compilers have
    run, and ``ember.compile``'s first replay has recorded its CUDA graph: that recording runs
    the program once outside the graph, which would count its intermediates twice)."""
    run = Run(mode)
    framework, compiled = MODES[mode]
    warm = min(WARM_STEPS, steps - 1)
    try:
        _sync_all(setup)
        base = memory.in_use()  # what the modes built before hold, left out of the peak
        t = time.perf_counter()
        side = (torch_side(setup, compiled) if framework == "torch" else
                ember_side(setup, bool(compiled), fused=mode in FUSED))
        run.build_s = time.perf_counter() - t
        for i in range(steps):
            if i == warm:
                side.sync()
                memory.reset_peak()
            t = time.perf_counter()
            run.losses.append(float(side.step(i).item()))
            run.step_s.append(time.perf_counter() - t)
            if i == 0:
                run.first_step_s = time.perf_counter() - t
                log(f"{mode}: built in {run.build_s:.1f} s, first step {run.first_step_s:.1f} s"
                    f" (loss {run.losses[0]:.4f})")
        side.sync()
        if memory.available():
            run.peak_bytes = memory.peak() + side.extra_bytes() - base
        memory.stop()
        run.side = side
        fn = side.info.get("compiled")
        if fn is not None:
            # ProgramGraph: replayed as a CUDA graph (recorded ``records`` times); a function
            # or method: replayed as Python (no graph on this device, or the capture failed)
            run.info["ember_compile"] = {
                "stats": str(fn.stats),
                "runners": [(type(p.runner).__name__, getattr(p.runner, "records", None))
                            for p in fn.programs()],
                "graph_pool_bytes": side.extra_bytes()}
    except Exception as exc:  # a mode that cannot run is reported; the others go on
        memory.stop()
        run.error = f"{type(exc).__name__}: {str(exc)[:400]}"
        log(f"{mode}: FAILED: {run.error}")
    return run


def _sync_all(setup: Setup) -> None:
    if setup.device_type == "cuda":
        import torch

        import ember

        torch.cuda.synchronize()
        ember.device(setup.device).synchronize()


def loss_check(runs: dict[str, Run], precision: str, window: int = 1
               ) -> dict[str, dict[str, Any]]:
    """Each mode's losses against PyTorch eager's: the worst relative difference at the first
    step and at any step, and how the drop over the run compares (the mean loss of the first
    ``window`` steps less that of the last ``window``: with the batches cycled, each window
    sees every batch once)."""
    ref = runs["torch eager"].losses
    tol0, tol_any, tol_drop = TOLERANCES[precision]
    out: dict[str, dict[str, Any]] = {}
    for mode, run in runs.items():
        if mode == "torch eager" or run.error or not run.losses:
            continue
        n = min(len(ref), len(run.losses))
        rel = [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(run.losses, ref, strict=False)]
        w = window if n >= 2 * window else 1
        drop_ref, drop = _drop(ref[:n], w), _drop(run.losses[:n], w)
        drop_rel = abs(drop - drop_ref) / max(abs(drop_ref), 1e-12)
        ok = rel[0] <= tol0 and max(rel) <= tol_any and drop_rel <= tol_drop
        out[mode] = {"step0_rel": rel[0], "max_rel": max(rel), "drop": drop,
                     "drop_ref": drop_ref, "drop_rel": drop_rel, "ok": ok}
    return out


def _drop(losses: list[float], w: int) -> float:
    return (sum(losses[:w]) - sum(losses[-w:])) / w


def timing(runs: dict[str, Run], setup: Setup, rounds: int, reps: int) -> dict[str, float]:
    """Best milliseconds per step of every mode that ran, in interleaved rounds."""
    from _rounds import interleaved

    fns: dict[str, Callable[[], Any]] = {}
    syncs: dict[str, Callable[[], Any]] = {}
    for mode, run in runs.items():
        if run.side is None:
            continue
        side, counter = run.side, iter(range(len(run.losses), 1 << 62))
        fns[mode] = lambda side=side, counter=counter: side.step(next(counter))
        syncs[mode] = side.sync
    times = interleaved(fns, syncs, rounds, reps)
    return {mode: min(ts) for mode, ts in times.items()}


def fit_timing(runs: dict[str, Run], rounds: int, reps: int, seconds: float
               ) -> tuple[int, int]:
    """``(rounds, reps)`` cut down (reps first, to 2; then rounds, to 1) so that timing, at the
    step times the training runs saw, takes about ``seconds``."""
    per_step = [statistics.median(r.step_s[WARM_STEPS:] or r.step_s[-1:])
                for r in runs.values() if r.side is not None and r.step_s]
    one = sum(per_step)  # one step of every mode
    while reps > 2 and one * (rounds * reps + 1) > seconds:
        reps -= 1
    while rounds > 1 and one * (rounds * reps + 1) > seconds:
        rounds -= 1
    return rounds, reps


# -- the whole run -----------------------------------------------------------------------------

def prepare(cfg: GPTConfig, device: str, batch: int, precision: str, n_batches: int = 4,
            seed: int = 0) -> Setup:
    """Weights, batches and the float32 matmul setting of both frameworks."""
    if precision != "fp32" and device.startswith("cuda"):
        import torch

        import ember

        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        backend = ember.device(device).backend
        if hasattr(backend, "matmul_precision"):
            backend.matmul_precision = "tf32"  # what EMBER_MATMUL_PRECISION=tf32 sets
    return Setup(cfg, device, batch, precision, init_state(cfg, seed),
                 batches(cfg, batch, n_batches, seed))


def run_all(setup: Setup, steps: int, modes: tuple[str, ...], log: Log,
            budget: float = float("inf")) -> dict[str, Run]:
    """Train each mode in turn (each alone in its allocator's peak window), torch.compile
    last; it is left out, with the reason, when less than 40% of ``budget`` seconds is left
    (compiling GPT-2 takes it about a minute)."""
    runs: dict[str, Run] = {}
    tmem, emem = TorchMemory(setup.torch_device), EmberMemory(setup.device)
    for mode in sorted(modes, key=lambda m: m.startswith("torch.compile")):
        left = budget - log.elapsed()
        if mode.startswith("torch.compile") and left < 0.4 * budget:
            runs[mode] = Run(mode, error=f"skipped: {left:.0f} s of the {budget:.0f} s budget "
                             "left (--budget)")
            log(f"{mode}: {runs[mode].error}")
            continue
        memory = tmem if mode.startswith("torch") else emem
        runs[mode] = train_mode(setup, mode, steps, memory, log)
    return {m: runs[m] for m in modes}


def choose_precision(device: str, autocast: bool | None) -> tuple[str, str]:
    """``(precision, why)``: bf16 autocast on the GPU unless turned off or missing in ember."""
    import ember

    want = device.startswith("cuda") if autocast is None else autocast
    fallback = "tf32" if device.startswith("cuda") else "fp32"
    if not want:
        return fallback, "autocast off"
    if not hasattr(ember, "autocast"):
        return fallback, "ember.autocast is not available in this checkout: float32 on both sides"
    return "bf16", "torch.autocast / ember.autocast, bfloat16"


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer steps and timing rounds")
    p.add_argument("--steps", type=int, default=None, help="training steps per mode (20)")
    p.add_argument("--batch", type=int, default=None, help="sequences per batch (8; tiny: 4)")
    p.add_argument("--layers", type=int, default=None, help="transformer blocks (12)")
    p.add_argument("--device", default="cuda:0", help="cuda:N or cpu")
    p.add_argument("--tiny", action="store_true",
                   help="2 layers, width 64, vocabulary 256, sequence 32 (the CPU test's model)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--torch-compile", dest="torch_compile", action="store_true", default=None,
                   help="time torch.compile too (the default on the GPU)")
    g.add_argument("--no-torch-compile", dest="torch_compile", action="store_false",
                   help="leave torch.compile out (the default on the CPU)")
    p.add_argument("--max-autotune", action="store_true",
                   help="also torch.compile(mode='max-autotune') (CUDA graphs, autotuned "
                   "kernels; compiling takes minutes)")
    p.add_argument("--no-ember-compile", dest="ember_compile", action="store_false")
    p.add_argument("--fusion", action="store_true",
                   help="also the ember modes on autodiff<fusion<device>> (eager and compiled)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--autocast", dest="autocast", action="store_true", default=None,
                   help="bf16 autocast (the default on the GPU)")
    g.add_argument("--no-autocast", dest="autocast", action="store_false",
                   help="float32 on both sides (TF32 matmuls on the GPU)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved timing rounds")
    p.add_argument("--reps", type=int, default=None, help="steps per mode per round")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds the whole run should take; timing rounds are cut to fit "
                   "(270; --quick: 110)")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.add_argument("--profile", type=int, default=0, metavar="TOP",
                   help="after timing, each mode's TOP kernels by GPU time (torch.profiler)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    log = Log()
    cfg = TINY if args.tiny else GPT2_SMALL
    if args.layers is not None:
        cfg = GPTConfig(cfg.vocab, cfg.block, args.layers, cfg.n_head, cfg.n_embd)
    batch = args.batch or (4 if args.tiny else 8)
    steps = args.steps or (8 if args.quick else 20)
    rounds = args.rounds or (2 if args.quick else 4)
    reps = args.reps or (3 if args.quick else 5)
    if args.budget is None:
        args.budget = 110.0 if args.quick else 270.0
    on_gpu = args.device.startswith("cuda")
    torch_compile = on_gpu if args.torch_compile is None else args.torch_compile
    modes = tuple(m for m in MODES if (m != "torch.compile" or torch_compile)
                  and (m != "torch.compile max-autotune" or args.max_autotune)
                  and (m != "ember compiled" or args.ember_compile)
                  and (m not in FUSED or args.fusion)
                  and (m != "ember fused compiled" or args.ember_compile))
    precision, why = choose_precision(args.device, args.autocast)
    import torch

    log(f"GPT-2: {cfg.n_layer} layers, {cfg.n_head} heads, width {cfg.n_embd}, vocabulary "
        f"{cfg.vocab}, context {cfg.block}; batch {batch} ({batch * cfg.block} tokens/step); "
        f"device {args.device}; torch {torch.__version__}")
    log(f"precision: {precision} ({why}); TF32 matmuls: "
        f"{'on in both' if on_gpu and precision != 'fp32' else 'n/a'}")
    setup = prepare(cfg, args.device, batch, precision)
    log(f"modes: {', '.join(modes)}; {steps} steps each, then timing {rounds} rounds x {reps}")
    runs = run_all(setup, steps, modes, log, args.budget)

    # -- parameters and tied weights ------------------------------------------------------------
    counts = {m: count_params(r.side.model) for m, r in runs.items() if r.side is not None}
    distinct = sorted(set(counts.values()))
    if len(distinct) == 1:
        log(f"parameters: {distinct[0]:,} ({distinct[0] / 1e6:.1f}M; the tied embedding "
            "counted once) in every mode")
    else:
        log(f"parameters DIFFER between modes: {counts}")
    # the optimizer updates one tensor; both modules must still read it after training
    tied = {m: r.side.model.lm_head.weight is r.side.model.transformer.wte.weight
            for m, r in runs.items() if r.side is not None and MODES[m][0] == "ember"}

    # -- 1. losses ------------------------------------------------------------------------------
    if runs["torch eager"].error:
        print(f"torch eager, the reference, did not run: {runs['torch eager'].error}")
        return 1
    check = loss_check(runs, precision, len(setup.data))
    ran = [m for m in modes if not runs[m].error]
    print(f"\nlosses ({precision}; {len(setup.data)} batches of random tokens, cycled), each "
          "mode against torch eager: relative difference at step 0 and at the worst step, "
          f"and the drop (mean of the first {len(setup.data)} steps less mean of the last "
          f"{len(setup.data)})")
    print("step " + "".join(f"{m:>21}" for m in ran))
    for i in range(steps):
        print(f"{i:>4} " + "".join(f"{runs[m].losses[i]:>21.5f}" if i < len(runs[m].losses)
                                    else f"{'-':>21}" for m in ran))
    tol0, tol_any, tol_drop = TOLERANCES[precision]
    for mode, c in check.items():
        print(f"{mode:<21} step 0: {c['step0_rel']:.2e} (<= {tol0:g})   worst step: "
              f"{c['max_rel']:.2e} (<= {tol_any:g})   drop {c['drop']:.4f} vs "
              f"{c['drop_ref']:.4f}: {c['drop_rel']:.2e} (<= {tol_drop:g})   "
              f"{'PASS' if c['ok'] else 'FAIL'}")
    for mode in modes:
        if runs[mode].error:
            print(f"{mode:<21} did not run: {runs[mode].error}")
    for mode, r in runs.items():
        if "ember_compile" in r.info:
            print(f"{mode:<21} {r.info['ember_compile']}")
    if tied:
        print(f"ember's lm_head.weight is transformer.wte.weight after training: {tied}")

    # -- 2. and 3.: timing and the table ----------------------------------------------------------
    fitted = fit_timing(runs, rounds, reps, args.budget - log.elapsed() - 5)
    if fitted != (rounds, reps):
        log(f"timing cut from {rounds} rounds x {reps} to {fitted[0]} x {fitted[1]} to end "
            f"within --budget {args.budget:.0f} s")
        rounds, reps = fitted
    log(f"timing: {rounds} interleaved rounds x {reps} steps of each mode ...")
    best = timing(runs, setup, rounds, reps)
    log("done")
    te = best.get("torch eager")
    compiled_ms = [best[m] for m in best if m.startswith("torch.compile")]
    tc = min(compiled_ms) if compiled_ms else None  # the best torch.compile mode
    print(f"\nGPT-2 {cfg.n_layer}L/{cfg.n_embd}, batch {batch} x {cfg.block}, {precision}, "
          f"{args.device}: best of {rounds} rounds x {reps} steps; time ratios (>1: slower); "
          "peak: the mode's own allocations at their most, while it trained alone")
    print(f"{'mode':<27}{'ms/step':>10}{'tokens/s':>12}{'x torch eager':>15}"
          f"{'x best compile':>17}{'peak GiB':>10}")
    for mode in modes:
        r = runs[mode]
        if mode not in best:
            print(f"{mode:<27}{'did not run':>10}")
            continue
        ms = best[mode]
        peak = f"{r.peak_bytes / GIB:.2f}" if r.peak_bytes is not None else "n/a"
        print(f"{mode:<27}{ms:>10.2f}{setup.tokens / ms * 1e3:>12,.0f}"
              f"{ms / te if te else float('nan'):>15.2f}"
              f"{ms / tc if tc else float('nan'):>17.2f}{peak:>10}")

    if args.profile and on_gpu:
        profile_kernels(runs, args.profile)

    failed = [m for m, c in check.items() if not c["ok"]]
    failed += [m for m in modes if m.startswith("ember") and runs[m].error]
    if not all(tied.values()):
        failed.append("tied embeddings")
    if len(distinct) > 1:
        failed.append("parameter counts")
    print(f"\nloss check: {'PASS' if not failed else 'FAIL: ' + ', '.join(failed)}; "
          f"total {log.elapsed():.0f} s")
    if args.json is not None:
        args.json.write_text(json.dumps({
            "config": dataclasses.asdict(cfg),
            "batch": batch, "device": args.device, "precision": precision,
            "parameters": counts, "check": check, "tied": tied,
            "runs": {m: {"losses": r.losses, "peak_bytes": r.peak_bytes, "error": r.error,
                         "build_s": r.build_s, "first_step_s": r.first_step_s, **r.info}
                     for m, r in runs.items()},
            "ms_per_step": best, "tokens_per_step": setup.tokens,
            "failed": failed}, indent=1, default=str))
    return 1 if failed else 0


#: (kind, substrings of a kernel's name) in the order they are tried; the rest is "elementwise"
KERNEL_KINDS = (
    ("copy", ("memcpy", "memset")),
    ("attention", ("attn", "flash", "fmha", "sdpa", "attention")),
    ("matmul", ("gemm", "cutlass", "nvjet", "matmul", "cublas", "sm90_xmma", "dot")),
    ("norm/softmax/loss", ("norm", "softmax", "entropy", "nll", "logsumexp")),
    ("reduction", ("reduce", "sum", "mean", "_red_")),
    ("optimizer", ("adam", "foreach", "optim")),
)


def kernel_kind(name: str) -> str:
    """The kind of GPU kernel ``name`` is, read off its name (``KERNEL_KINDS``): the count of
    "elementwise" launches per step is the figure issue 42 bounds."""
    low = name.lower()
    for kind, parts in KERNEL_KINDS:
        if any(p in low for p in parts):
            return kind
    return "elementwise"


def profile_kernels(runs: dict[str, Run], top: int, steps: int = 3) -> None:
    """Each mode's GPU kernels over ``steps`` steps (CUPTI sees ember's Triton, cuBLASLt
    and graph-replayed kernels as well as PyTorch's): time and launches per step."""
    from block_profile import _kernels
    from torch.profiler import ProfilerActivity, profile

    for mode, r in runs.items():
        if r.side is None:
            continue
        r.side.step(0)
        r.side.sync()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i in range(steps):
                r.side.step(i)
            r.side.sync()
        rows = _kernels(prof, steps)
        print(f"\n== {mode}: kernels {sum(t for _, t, _ in rows) / 1e3:.2f} ms in "
              f"{sum(c for _, _, c in rows)} launches per step")
        kinds: dict[str, list[float]] = {}
        for n, t, c in rows:
            k = kinds.setdefault(kernel_kind(n), [0.0, 0])
            k[0] += t
            k[1] += c
        print("   by kind, per step: " + "; ".join(
            f"{k} {c:.0f} launches {t / 1e3:.2f} ms" for k, (t, c) in sorted(kinds.items())))
        for n, t, c in rows[:top]:
            print(f"{n:<72}{t:>9.1f}{c:>5}")


if __name__ == "__main__":
    sys.exit(main())
