"""``ember-run``: start N ranks of a program, with ``mpirun`` or as child processes.

    ember-run -n 2 python train.py                       # mpirun (MPI engine), when installed
    ember-run -n 8 --launcher spawn python train.py      # 8 children, NCCL on 8 GPUs

``mpirun``: the command is run under Open MPI's ``mpirun`` with the settings a container needs
(running as root allowed, oversubscription, no single-copy mechanism).  ``spawn``: N children
get ``EMBER_RANK``, ``EMBER_WORLD_SIZE``, ``EMBER_LOCAL_RANK`` and ``EMBER_RENDEZVOUS`` (a
fresh folder where rank 0 publishes the NCCL unique id); when one child fails, the launcher
names it, stops the others (SIGTERM, then SIGKILL after ``--grace`` seconds) and exits with the
failed child's status.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

__all__ = ["main", "mpirun_command", "mpirun_env"]


def mpirun_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment ``mpirun`` needs here: root allowed (CI runs as root) and shared-memory
    transport without the single-copy mechanism (containers forbid its ptrace)."""
    env = dict(os.environ if base is None else base)
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    return env


def mpirun_command(n: int, command: list[str], extra: list[str] | None = None) -> list[str]:
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise SystemExit("ember-run: mpirun not found (Debian: apt-get install openmpi-bin "
                         "libopenmpi-dev), or use --launcher spawn")
    return [mpirun, "-n", str(n), *(extra or []), *command]


def _spawn(n: int, command: list[str], grace: float) -> int:
    with tempfile.TemporaryDirectory(prefix="ember-rendezvous-") as folder:
        children: dict[int, tuple[int, subprocess.Popen[bytes]]] = {}
        for rank in range(n):
            env = {**os.environ, "EMBER_RANK": str(rank), "EMBER_WORLD_SIZE": str(n),
                   "EMBER_LOCAL_RANK": str(rank), "EMBER_RENDEZVOUS": folder}
            proc = subprocess.Popen(command, env=env)
            children[proc.pid] = (rank, proc)
        status = 0
        while children:
            try:
                pid, raw = os.wait()  # blocks until any child ends: no polling
            except ChildProcessError:
                break
            if pid not in children:
                continue
            rank, proc = children.pop(pid)
            proc.returncode = code = os.waitstatus_to_exitcode(raw)
            if code != 0 and status == 0:
                how = (f"was killed by {signal.Signals(-code).name}" if code < 0
                       else f"exited with status {code}")
                print(f"ember-run: rank {rank} (pid {pid}) {how}; stopping the other "
                      f"{len(children)} rank(s)", file=sys.stderr, flush=True)
                status = 128 - code if code < 0 else code
                _stop([p for _, p in children.values()], grace)
        return status


def _stop(procs: list[subprocess.Popen[bytes]], grace: float) -> None:
    """SIGTERM now, SIGKILL after ``grace`` seconds to those still running; the main loop
    keeps reaping them (only it waits for children, so no exit status is lost)."""
    pids = [p.pid for p in procs if p.returncode is None]
    for pid in pids:
        _signal(pid, signal.SIGTERM)

    def kill() -> None:
        for pid in pids:
            _signal(pid, signal.SIGKILL)

    timer = threading.Timer(grace, kill)
    timer.daemon = True
    timer.start()


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:  # already gone
        pass


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ember-run", description=__doc__.split("\n")[0])
    p.add_argument("-n", "--nproc", type=int, required=True, help="number of ranks")
    p.add_argument("--launcher", choices=("auto", "mpirun", "spawn"), default="auto",
                   help="auto: mpirun when it is installed, else spawn")
    p.add_argument("--mpirun-arg", action="append", default=[],
                   help="an extra argument for mpirun (repeatable)")
    p.add_argument("--grace", type=float, default=5.0,
                   help="spawn: seconds between SIGTERM and SIGKILL when stopping ranks")
    p.add_argument("--timeout", type=float, default=None,
                   help="EMBER_DIST_TIMEOUT for the ranks (seconds a collective may wait)")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if not args.command:
        p.error("no command to run")
    if args.nproc < 1:
        p.error("-n must be at least 1")
    if args.timeout is not None:
        os.environ["EMBER_DIST_TIMEOUT"] = str(args.timeout)
    launcher = args.launcher
    if launcher == "auto":
        launcher = "mpirun" if shutil.which("mpirun") else "spawn"
    if launcher == "spawn":
        return _spawn(args.nproc, args.command, args.grace)
    cmd = mpirun_command(args.nproc, args.command, args.mpirun_arg)
    return subprocess.call(cmd, env=mpirun_env())


if __name__ == "__main__":
    sys.exit(main())
