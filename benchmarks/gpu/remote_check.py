"""One command for a GPU machine: Remote with server and client on it.  Starts
``ember-remote serve --devices cuda:0`` on a free port of 127.0.0.1, runs the conformance suite
on ``autodiff<remote<127.0.0.1:PORT/cuda:0>>``, stops the server by its PID, then runs
``benchmarks/remote.py --inner cuda:0`` (host cost per op and a guide epoch, remote against
local ``cuda:0``).

    python benchmarks/gpu/remote_check.py [--sample K] [--jobs N] [--rounds 3]

``--jobs N`` runs the suite on N pytest-xdist workers, each its own client of the one server.

Needs no install (as ``check.py``: the packages are put on ``sys.path`` from this checkout),
but ember-remote's two dependencies, ``msgpack`` and ``websockets``, must be importable.
"""

from __future__ import annotations

import argparse
import os
import secrets
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check import ROOT, workspace_env


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--inner", default="cuda:0")
    parser.add_argument("--sample", type=int, default=1, help="run one conformance case in K")
    parser.add_argument("--jobs", type=int, default=1, help="pytest-xdist workers (1: none)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = workspace_env(Path(tmp))
        token = secrets.token_hex(32)
        (Path(tmp) / "token").write_text(token)
        (Path(tmp) / "token").chmod(0o600)
        server = subprocess.Popen(
            [sys.executable, "-m", "ember_remote", "serve", "--bind", "127.0.0.1:0",
             "--token-file", str(Path(tmp) / "token"), "--devices", args.inner],
            stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        try:
            assert server.stdout is not None
            ready, _, _ = select.select([server.stdout], [], [], 300)
            line = server.stdout.readline() if ready else ""
            if " on " not in line:
                print(f"ember-remote serve did not start: {line!r}")
                return 1
            address = line.split(" on ", 1)[1].split()[0]
            device = f"autodiff<remote<{address}/{args.inner}>>"
            print(f"conformance on {device} (server pid {server.pid})", flush=True)
            conformance = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 "-p", "no:benchmark", "tests/conformance/test_conformance.py",
                 f"--ember-device={device}",
                 f"--ember-sample={args.sample}",
                 *(["-n", str(args.jobs)] if args.jobs > 1 else [])],
                env={**env, "EMBER_REMOTE_TOKEN": token}, cwd=ROOT, check=False).returncode
        finally:
            os.kill(server.pid, signal.SIGTERM)
            server.wait(60)
        bench = subprocess.run([sys.executable, "benchmarks/remote.py", "--inner", args.inner,
                                "--rounds", str(args.rounds)], env=env, cwd=ROOT,
                               check=False).returncode
    print(f"conformance exit {conformance}, benchmark exit {bench}")
    return conformance or bench


if __name__ == "__main__":
    sys.exit(main())
