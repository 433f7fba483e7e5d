"""Remote against local on one machine: host cost per op, and a guide training epoch.

Starts ``ember-remote serve`` on a free port of 127.0.0.1 (stopped by its PID at the end), then
interleaves rounds of the local device and the same device through Remote, in one process:

- *host cost per op*: a chain of small eager ops (8x8 float32: mul, add, tanh, sub) on
  ``INNER`` and on ``remote<127.0.0.1:PORT/INNER>``, ending in one ``.numpy()``; the time per
  op to issue the chain (what the client's thread pays; on shared cores the server's work on
  the batches sent meanwhile can slow it), the issuing thread's CPU time per op, and the time
  per op to finish it (the sync included);
- *guide epoch*: one epoch of the guide CNN (digits, batch 32, AdamW; ``loss.item()`` each
  step, a sync point per step) on ``autodiff<INNER>`` and ``autodiff<remote<.../INNER>>``.

Run: ``.venv/bin/python benchmarks/remote.py [--inner cpu] [--rounds 5] [--ops 2000]``
(``--inner cuda:0`` on a GPU machine).  Prints the best round of each (other work on shared
cores only ever adds time) and the remote / local ratios.  Goals: host cost <= 2x, epoch
<= 1.5x.
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # both sides, before numpy is imported

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "guide"))
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402  # after the thread setting

import ember  # noqa: E402


def start_server(inner: str) -> tuple[subprocess.Popen[str], str, str]:
    token = secrets.token_hex(32)
    folder = Path(tempfile.mkdtemp(prefix="ember-remote-bench-"))
    (folder / "token").write_text(token)
    (folder / "token").chmod(0o600)
    proc = subprocess.Popen([sys.executable, "-m", "ember_remote", "serve", "--bind",
                             "127.0.0.1:0", "--token-file", str(folder / "token"),
                             "--devices", inner], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 120)
    line = proc.stdout.readline() if ready else ""
    if " on " not in line:
        proc.kill()
        raise SystemExit(f"ember-remote serve did not start: {line!r}")
    return proc, line.split(" on ", 1)[1].split()[0], token


def op_chain(device: str, n: int) -> tuple[float, float, float]:
    """Seconds per op to issue ``n`` small ops, and to finish them (one sync at the end); and
    the CPU time the issuing thread used per op."""
    d = ember.device(device)
    x = ember.tensor(np.full((8, 8), 0.5, np.float32), device=d)
    c = ember.tensor(np.full((8, 8), 0.25, np.float32), device=d)
    x.numpy()
    c0 = time.thread_time()
    t0 = time.perf_counter()
    for _ in range(n // 4):
        x = ((x * c + c).tanh() - c)
    t1 = time.perf_counter()
    c1 = time.thread_time()
    x.numpy()
    t2 = time.perf_counter()
    return (t1 - t0) / n, (t2 - t0) / n, (c1 - c0) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--inner", default="cpu")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--no-epoch", action="store_true", help="only the host cost per op")
    args = parser.parse_args()
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    proc, address, token = start_server(args.inner)
    os.environ["EMBER_REMOTE_TOKEN"] = token
    remote = f"remote<{address}/{args.inner}>"
    try:
        issue: dict[str, list[float]] = {args.inner: [], remote: []}
        done: dict[str, list[float]] = {args.inner: [], remote: []}
        cpu: dict[str, list[float]] = {args.inner: [], remote: []}
        for _ in range(args.rounds):
            for dev in (args.inner, remote):
                a, b, c = op_chain(dev, args.ops)
                issue[dev].append(a)
                done[dev].append(b)
                cpu[dev].append(c)
        epochs: dict[str, list[float]] = {}
        if not args.no_epoch:
            from guide_epoch import ember_epoch, ember_setup

            for dev in (f"autodiff<{args.inner}>", f"autodiff<{remote}>"):
                epochs[dev] = []
            for _ in range(max(2, args.rounds // 2)):
                for dev in epochs:
                    model, opt, train, _ = ember_setup(dev)
                    epochs[dev].append(ember_epoch(model, opt, train, dev))
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(30)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"machine: {platform.node()} ({os.cpu_count()} cores), Python "
          f"{platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"best of {args.rounds}, load average {load} (before: {load_before})")
    li, ri = min(issue[args.inner]) * 1e6, min(issue[remote]) * 1e6
    ld, rd = min(done[args.inner]) * 1e6, min(done[remote]) * 1e6
    print(f"host cost per op, issuing {args.ops} ops: {args.inner} {li:.2f} us, {remote} "
          f"{ri:.2f} us, ratio {ri / li:.2f}x (goal <= 1.5x)")
    lc, rc = min(cpu[args.inner]) * 1e6, min(cpu[remote]) * 1e6
    print(f"issuing thread's CPU time per op:     {args.inner} {lc:.2f} us, {remote} "
          f"{rc:.2f} us, ratio {rc / lc:.2f}x")
    print(f"per op until the result is back:      {args.inner} {ld:.2f} us, {remote} "
          f"{rd:.2f} us, ratio {rd / ld:.2f}x")
    if epochs:
        (local, le), (rem, re) = ((k, min(v)) for k, v in epochs.items())
        print(f"guide epoch: {local} {le:.3f} s, {rem} {re:.3f} s, ratio {re / le:.2f}x "
              "(goal <= 1.5x)")


if __name__ == "__main__":
    main()
