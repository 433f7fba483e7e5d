"""``ember-run --launcher spawn``: ranks get their environment; a failed rank stops the rest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EMBER_RUN = str(Path(sys.executable).with_name("ember-run"))  # the installed console script

FAIL = """
import os, signal, sys
if os.environ["EMBER_RANK"] == "1":
    sys.exit(3)
signal.pause()  # the other ranks would wait forever: the launcher must stop them
"""

REPORT = """
import os
line = " ".join(os.environ[k] for k in ("EMBER_RANK", "EMBER_WORLD_SIZE", "EMBER_LOCAL_RANK"))
os.write(1, f"{line} {os.path.isdir(os.environ['EMBER_RENDEZVOUS'])}\\n".encode())  # one write
"""


def test_a_failed_rank_stops_the_others_and_sets_the_status() -> None:
    proc = subprocess.run([EMBER_RUN, "-n", "3",
                           "--launcher", "spawn", "--grace", "5", sys.executable, "-c", FAIL],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "ember-run: rank 1 (pid" in proc.stderr
    assert "exited with status 3; stopping the other 2 rank(s)" in proc.stderr


def test_ranks_get_their_environment_and_success_gives_status_zero() -> None:
    proc = subprocess.run([EMBER_RUN, "-n", "2",
                           "--launcher", "spawn", sys.executable, "-c", REPORT],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == ["0 2 0 True", "1 2 1 True"]
