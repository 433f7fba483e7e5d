"""The guide end to end: train, then run inference from the saved artifacts in a new process.

    python examples/guide/main.py                                  # digits on autodiff<cpu>
    python examples/guide/main.py --device "autodiff<fusion<cpu>>"
    python examples/guide/main.py --data ~/mnist --epochs 5         # MNIST IDX files

Arguments other than ``--min-accuracy`` go to ``train.py``; ``--artifacts`` and ``--data``
also to ``infer.py``.  Exits non-zero when training fails or the test accuracy is below
``--min-accuracy`` (default 0.97).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--artifacts", default="artifacts/guide")
    p.add_argument("--data", default=None)
    p.add_argument("--min-accuracy", type=float, default=0.97)
    known, _ = p.parse_known_args(argv)
    train_args = [a for a in argv if not a.startswith("--min-accuracy")]
    if "--min-accuracy" in argv:  # drop its value too
        i = argv.index("--min-accuracy")
        train_args = argv[:i] + argv[i + 2:]

    # Ctrl-C reaches the whole process group: the training child handles it (checkpoint, exit
    # 0); this parent only waits.  A Python handler, not SIG_IGN: handlers reset on exec, an
    # ignored signal would stay ignored in the children.
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    resume = shlex.join(["python", os.path.relpath(os.path.abspath(__file__)),
                         *[a for a in argv if a != "--resume"], "--resume"])
    t0 = time.perf_counter()
    print("== train ==", flush=True)
    rc = subprocess.call([sys.executable, os.path.join(HERE, "train.py"), *train_args,
                          "--resume-command", resume])
    if rc != 0:
        return rc
    if not os.path.exists(os.path.join(known.artifacts, "test_metrics.json")):
        return 0  # interrupted: train.py said how to resume
    t1 = time.perf_counter()
    print(f"\n== inference, in a new process (training took {t1 - t0:.1f} s) ==", flush=True)
    infer = [sys.executable, os.path.join(HERE, "infer.py"), "--artifacts", known.artifacts,
             "--min-accuracy", str(known.min_accuracy)]
    if known.data is not None:
        infer += ["--data", known.data]
    rc = subprocess.call(infer)
    print(f"\n== saved in {known.artifacts} ==", *saved(known.artifacts), sep="\n", flush=True)
    print(f"\ntotal {time.perf_counter() - t0:.1f} s", flush=True)
    return rc


def saved(artifacts: str) -> list[str]:
    """A line per file the run left in ``artifacts``: model, config, metrics, checkpoints, plots
    (what ``infer.py`` and a person looking at the run need), then anything else there."""
    root = Path(artifacts)
    groups = {
        "model": sorted(root.glob("*.safetensors")),
        "config": [root / "config.json"],
        "metrics": [*sorted(root.glob("metrics/*.jsonl")), root / "test_metrics.json"],
        "checkpoints": sorted(root.glob("checkpoints/*")),
        "plots": sorted(root.glob("plots/*.png")),
    }
    listed = {p for paths in groups.values() for p in paths}
    groups["other"] = sorted(p for p in root.rglob("*") if p.is_file() and p not in listed
                             and not any(q in p.parents for q in listed))
    lines = []
    for what, paths in groups.items():
        paths = [p for p in paths if p.exists()]
        label = f"{what} ({len(paths)})" if len(paths) > 1 else what
        lines += [f"{label if i == 0 else '':<16}{p}" for i, p in enumerate(paths)]
    return lines


if __name__ == "__main__":
    sys.exit(main())
