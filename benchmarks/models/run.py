"""One training step of five models, ember against PyTorch eager on the CPU, in one process.

Run: ``.venv/bin/python -m benchmarks.models [gpt lstm gru guide mlp] [--threads 1|default]
[--rounds N] [--quick] [--markdown]`` (or ``.venv/bin/python benchmarks/models/run.py ...``).

For each model and thread setting: PyTorch eager's median step, and each ember stack's median
step and its ratio to PyTorch's (ember / torch: below 1 is faster than PyTorch).  Stacks:
``eager`` (``autodiff<cpu>``), ``fused`` (``autodiff<fusion<cpu>>``, one fusion thread at one
thread), ``compiled`` (``ember.compile(step)`` on ``autodiff<cpu>``; "n/a: <error>" when it
is missing or fails) and ``compiled fused`` (``ember.compile(step)`` on the fused stack).
"1" limits numpy's BLAS (threadpoolctl) and PyTorch (``set_num_threads``)
to one thread; "default" is what each starts with; without ``--threads`` both are measured.
Rounds interleave the sides, each round starting one side later; medians over rounds.

Then the loss check: fresh models from the same initial weights (PyTorch's, copied into ember
through ``load_state_dict``), the same batches, 5 steps in eval mode; every ember stack's losses
must agree with PyTorch's within 1e-4 relative, else the run ends with status 1.  ``--quick``
(the CI smoke test) runs one round of one step at one thread, then the check.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make ``benchmarks.models`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.models._harness import (  # after the path set-up
    LOSS_RTOL,
    LossCheck,
    ModelBench,
    Timing,
    check_losses,
    model_table,
    summary_table,
    time_model,
)
from benchmarks.models.gpt import GPTBench
from benchmarks.models.guide import GuideBench
from benchmarks.models.mlp import MLPBench
from benchmarks.models.rnn import GRUBench, LSTMBench

MODELS: dict[str, type[ModelBench]] = {
    b.name: b for b in (GPTBench, LSTMBench, GRUBench, GuideBench, MLPBench)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.models",
                                description=(__doc__ or "").split("\n")[0])
    p.add_argument("models", nargs="*", choices=[[], *MODELS], default=[],
                   metavar="MODEL", help=f"any of {', '.join(MODELS)} (default: all)")
    p.add_argument("--threads", choices=["1", "default"], default=None,
                   help="one thread on each side, or each library's default (default: both)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--reps", type=int, default=None,
                   help="steps per side per round (default: per model, ~0.05-0.3 s)")
    p.add_argument("--check-steps", type=int, default=5)
    p.add_argument("--quick", action="store_true",
                   help="one round of one step at one thread, then the loss check")
    p.add_argument("--markdown", action="store_true", help="the summary as a markdown table")
    p.add_argument("--json", metavar="PATH", help="also write the medians and the loss check")
    args = p.parse_args(argv)

    import torch

    import ember

    names = args.models or list(MODELS)
    threads = ["1", "default"] if args.threads is None else [args.threads]
    rounds, reps, warmup = args.rounds, args.reps, 2
    if args.quick:
        threads, rounds, reps, warmup = threads[:1], 1, 1, 1
    compile_state = "present" if hasattr(ember, "compile") else "missing"
    print(f"ember vs PyTorch {torch.__version__} (CPU), one training step; "
          f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores, "
          f"{time.strftime('%Y-%m-%d %H:%M')}; ember.compile {compile_state}; "
          f"median of {rounds} interleaved round(s)")
    timings: list[Timing] = []
    checks: list[LossCheck] = []
    for name in names:
        bench = MODELS[name]()
        model_timings = [time_model(bench, t, rounds, reps, warmup) for t in threads]
        check = check_losses(bench, args.check_steps)
        timings += model_timings
        checks.append(check)
        print(f"\n{name}: {bench.title}  ({reps or bench.reps} steps a round)")
        print(model_table(model_timings, check))
    print("\nember / torch eager, median step time (below 1.00x: ember is faster)")
    print(summary_table(timings, args.markdown))
    failures = [f for c in checks for f in c.failures()]
    if args.json:
        Path(args.json).write_text(json.dumps({
            "timings": [{"model": t.model, "threads": t.threads,
                         "median_ms": {k: t.median(k) for k in t.ms}, "errors": t.errors}
                        for t in timings],
            "checks": [dataclasses.asdict(c) for c in checks],
            "rtol": LOSS_RTOL}, indent=1))
    print(f"\nloss check (first {args.check_steps} steps, relative, limit {LOSS_RTOL:g}):")
    for c in checks:
        cells = [f"{k} {v:.1e}" for k, v in c.diffs.items()]
        cells += [f"{k} n/a" for k in c.errors]
        print(f"  {c.model:<6} torch losses {', '.join(f'{x:.5f}' for x in c.torch_losses)}; "
              f"max diff {', '.join(cells)}")
    if failures:
        print("\nLOSS MISMATCH:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    print("  all agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
