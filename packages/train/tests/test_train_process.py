"""Training subprocesses: Ctrl-C, SIGTERM, kill -9 mid-checkpoint, resume, output modes.

Every wait is a handshake on the child's stdout/stdin (see ``tiny_run.py``), never a sleep.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from ember_train import Checkpointer, load_state

HERE = Path(__file__).parent
SCRIPT = str(HERE / "tiny_run.py")
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
       "COLUMNS": "120", "TERM": "xterm-256color"}
ESC = "\x1b"


def start(tmp: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, SCRIPT, "--artifacts", str(tmp), *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=ENV)


def run(tmp: Path, *args: str) -> str:
    proc = subprocess.run([sys.executable, SCRIPT, "--artifacts", str(tmp), *args],
                          capture_output=True, text=True, env=ENV, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def read_until(proc: subprocess.Popen[str], marker: str) -> list[str]:
    seen = []
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if line.startswith(marker):
            return seen
    raise AssertionError(f"the child ended before {marker!r}:\n{''.join(seen)}")


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=300)
    return proc.returncode, out


def weights(path: Path) -> dict[str, bytes]:
    return {k: t.numpy().tobytes() for k, t in load_state(path).items()}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, bytes], str]:
    """An uninterrupted 4-epoch run: its final weights and its (piped) output."""
    tmp = tmp_path_factory.mktemp("reference")
    out = run(tmp / "run", "--weights-out", str(tmp / "w.safetensors"), "--plots")
    assert (tmp / "run" / "plots" / "loss.png").stat().st_size > 1000
    return weights(tmp / "w.safetensors"), out


def test_piped_output_is_plain_lines_per_epoch(reference):
    _, out = reference
    assert ESC not in out
    epoch_lines = [ln for ln in out.splitlines() if ln.startswith("epoch ")]
    assert [ln.split(" | ")[0] for ln in epoch_lines] == [f"epoch {i}/4" for i in range(1, 5)]
    # an epoch's later splits continue on indented lines: "        | valid loss ..."
    last = out[out.rindex("epoch 4/4"):].splitlines()
    block = [last[0], *(ln for ln in last[1:] if ln.startswith("  ") and "|" in ln)]
    assert any("| valid loss" in ln for ln in block) and "accuracy" in block[0]
    # 80 columns, but for the lines naming a file (the temporary folder's path is long)
    assert max(len(ln) for ln in out.splitlines() if " /" not in ln) <= 80
    assert "RESULT completed epochs=4" in out


def test_stopped_after_epoch_two_and_resumed_is_bit_exact(tmp_path, reference):
    want, _ = reference
    run(tmp_path / "run", "--epochs", "2")
    out = run(tmp_path / "run", "--epochs", "4", "--resume",
              "--weights-out", str(tmp_path / "w.safetensors"))
    assert "resumed from" in out and "epoch-0002" in out
    assert weights(tmp_path / "w.safetensors") == want
    # the metric logs hold each epoch once, in order
    lines = (tmp_path / "run" / "metrics" / "train.jsonl").read_text().splitlines()
    assert [int(re.search(r'"epoch": (\d+)', ln)[1]) for ln in lines] == [1, 2, 3, 4]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_epoch_checkpoints_exits_0_and_resume_is_bit_exact(tmp_path, reference, sig):
    want, _ = reference
    art = tmp_path / "run"
    proc = start(art, "--block-at-step", "12")  # 5 steps an epoch: inside epoch 3
    read_until(proc, "BLOCKED")
    proc.send_signal(sig)
    assert proc.stdin is not None
    proc.stdin.write("\n")
    proc.stdin.flush()
    rc, out = finish(proc)
    assert rc == 0, out
    assert f"{sig.name}: finished the current step, writing a checkpoint" in out
    assert "resume with" in out and "--resume" in out
    latest = Checkpointer(art / "checkpoints").latest()
    assert latest is not None and latest.name == "epoch-0002-step-000002"
    assert {p.name for p in latest.path.iterdir()} >= {"model.safetensors",
                                                       "optimizer.safetensors", "learner.json"}
    out = run(art, "--resume", "--weights-out", str(tmp_path / "w.safetensors"))
    assert "RESULT completed epochs=4" in out
    assert weights(tmp_path / "w.safetensors") == want


def test_signal_during_validation_resumes_at_the_validation(tmp_path, reference):
    want, _ = reference
    art = tmp_path / "run"
    proc = start(art, "--block-at-valid-step", "5")  # 2 valid steps an epoch: inside epoch 3
    read_until(proc, "BLOCKED")
    proc.send_signal(signal.SIGINT)
    assert proc.stdin is not None
    proc.stdin.write("\n")
    proc.stdin.flush()
    rc, out = finish(proc)
    assert rc == 0, out
    latest = Checkpointer(art / "checkpoints").latest()
    assert latest is not None and latest.name == "epoch-0002-step-000005"  # all 5 train steps
    out = run(art, "--resume", "--weights-out", str(tmp_path / "w.safetensors"))
    assert [ln.split(" | ")[0] for ln in out.splitlines() if ln.startswith("epoch ")] == [
        "epoch 3/4", "epoch 4/4"]
    assert weights(tmp_path / "w.safetensors") == want


def test_resume_with_pending_gradient_accumulation_is_bit_exact(tmp_path):
    ref = tmp_path / "ref"
    run(ref, "--accumulate", "2", "--weights-out", str(tmp_path / "a.safetensors"))
    art = tmp_path / "run"
    proc = start(art, "--accumulate", "2", "--block-at-step", "8")  # one batch of a pair done
    read_until(proc, "BLOCKED")
    proc.send_signal(signal.SIGINT)
    assert proc.stdin is not None
    proc.stdin.write("\n")
    proc.stdin.flush()
    rc, out = finish(proc)
    assert rc == 0, out
    latest = Checkpointer(art / "checkpoints").latest()
    assert latest is not None and (latest.path / "pending.safetensors").exists()
    run(art, "--accumulate", "2", "--resume", "--weights-out", str(tmp_path / "b.safetensors"))
    assert weights(tmp_path / "b.safetensors") == weights(tmp_path / "a.safetensors")


def test_kill_9_during_a_checkpoint_write_keeps_the_previous_one(tmp_path, reference):
    want, _ = reference
    art = tmp_path / "run"
    proc = start(art, "--block-in-checkpoint", "3")  # the end-of-epoch-3 checkpoint
    lines = read_until(proc, "WRITING")
    half_written = Path(lines[-1].split(" ", 1)[1].strip())
    proc.kill()
    rc, _ = finish(proc)
    assert rc == -signal.SIGKILL
    assert half_written.name.startswith(".tmp-epoch-0003")
    ckpt = Checkpointer(art / "checkpoints")
    latest = ckpt.latest()
    assert latest is not None and latest.name == "epoch-0002"
    found = ckpt.read_latest(("model", "optimizer", "scheduler"))
    assert found is not None
    _info, states, learner_state = found
    assert learner_state["epochs_done"] == 2 and set(states) == {"model", "optimizer",
                                                                  "scheduler"}
    out = run(art, "--resume", "--weights-out", str(tmp_path / "w.safetensors"))
    assert "resumed from" in out
    assert not half_written.exists()  # cleaned up by the next run
    assert weights(tmp_path / "w.safetensors") == want


def test_second_ctrl_c_aborts_during_the_checkpoint_and_keeps_the_last_complete(tmp_path):
    art = tmp_path / "run"
    # first Ctrl-C at step 12 (inside epoch 3); its checkpoint is the 3rd write: block in it
    proc = start(art, "--block-at-step", "12", "--block-in-checkpoint", "3")
    read_until(proc, "BLOCKED")
    proc.send_signal(signal.SIGINT)
    assert proc.stdin is not None
    proc.stdin.write("\n")
    proc.stdin.flush()
    read_until(proc, "WRITING")
    proc.send_signal(signal.SIGINT)
    rc, out = finish(proc)
    assert rc != 0  # aborted, not a clean exit
    assert "RESULT" not in out
    assert "aborted; the last complete checkpoint is" in out and "epoch-0002" in out
    ckpt = Checkpointer(art / "checkpoints")
    assert [c.name for c in ckpt.list()] == ["epoch-0001", "epoch-0002"]
    found = ckpt.read_latest(("model", "optimizer", "scheduler"))
    assert found is not None and found[2]["epochs_done"] == 2


def _run_in_pty(args: list[str], cols: int = 120, rows: int = 40) -> tuple[int, str]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = {k: v for k, v in ENV.items() if k not in ("COLUMNS", "NO_COLOR")}
    proc = subprocess.Popen([sys.executable, SCRIPT, *args], stdin=slave, stdout=slave,
                            stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its side
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return proc.wait(timeout=60), b"".join(chunks).decode("utf-8", "replace")


def test_dashboard_renders_the_metrics_under_a_pty(tmp_path):
    rc, out = _run_in_pty(["--artifacts", str(tmp_path / "run"), "--renderer", "dashboard"])
    assert rc == 0, out
    assert ESC in out  # a live display: cursor movement and colours
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out)
    for title in ("─ loss ", "─ accuracy ", "─ f1 ", "─ lr "):
        assert title in text, title
    assert "device autodiff<cpu>" in text and "epoch 4/4" in text
    assert re.search(r"[\u2801-\u28ff]", text)  # braille curves
    assert re.search(r"train [0-9.]+ valid [0-9.]+", text)  # last values per split
    assert "final metrics" in text  # the summary after the live view


def test_progress_bars_on_a_terminal(tmp_path):
    rc, out = _run_in_pty(["--artifacts", str(tmp_path / "run")])  # renderer auto
    assert rc == 0, out
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out)
    assert "━" in text and "epochs" in text and "train 4" in text
    assert "final metrics" in text


def test_resume_from_a_finished_run_trains_nothing_more(tmp_path):
    run(tmp_path / "run", "--epochs", "2")
    out = run(tmp_path / "run", "--epochs", "2", "--resume")
    assert "RESULT completed epochs=2" in out
    assert not [ln for ln in out.splitlines() if ln.startswith("epoch ")]


def test_fresh_run_replaces_an_earlier_runs_checkpoints(tmp_path):
    run(tmp_path / "run", "--epochs", "3")
    out = run(tmp_path / "run", "--epochs", "1")
    assert "removed 2 checkpoint(s)" in out  # keep_last=2 kept two of the three
    assert [c.name for c in Checkpointer(tmp_path / "run" / "checkpoints").list()] == [
        "epoch-0001"]

