"""A server per test session (and fresh ones for the failure tests), started as the
``ember-remote serve`` command and stopped by its PID."""

from __future__ import annotations

import os
import secrets
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class Server:
    proc: subprocess.Popen[str]
    port: int
    token: str
    token_file: Path

    def device(self, inner: str = "cpu", **options: object) -> str:
        opts = "".join(f",{k}={v}" for k, v in options.items())
        return f"remote<127.0.0.1:{self.port}/{inner}{opts}>"

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def start_server(token_file: Path, token: str, port: int = 0, *extra: str,
                 devices: str | None = "cpu,fusion<cpu>", backoff: float = 0.0,
                 preexec_fn: Callable[[], object] | None = None) -> Server:
    """``ember-remote serve`` on 127.0.0.1; ``devices=None`` leaves ``--devices`` out.
    Wrong-token back-off is off unless ``backoff`` says otherwise: every test's client is
    127.0.0.1, so one test's wrong tokens would hold the next test's connections back."""
    args = ["--devices", devices] if devices is not None else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "ember_remote", "serve", "--bind", f"127.0.0.1:{port}",
         "--token-file", str(token_file), "--auth-backoff", str(backoff), *args, *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=preexec_fn)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else ""
    if "serving" not in line:
        proc.kill()
        err = proc.stderr.read() if proc.stderr else ""
        raise RuntimeError(f"ember-remote serve did not start: {line!r} {err}")
    port = int(line.split(" on ", 1)[1].split()[0].rsplit(":", 1)[1])
    return Server(proc, port, token, token_file)


@pytest.fixture(scope="session")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    token = secrets.token_hex(32)
    path = tmp_path_factory.mktemp("remote") / "token"
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path, token


@pytest.fixture(scope="session")
def server(token_file: tuple[Path, str]) -> Iterator[Server]:
    s = start_server(*token_file)
    yield s
    s.stop()


@pytest.fixture
def fresh_server(token_file: tuple[Path, str]) -> Iterator[Server]:
    s = start_server(*token_file)
    yield s
    s.stop(signal.SIGKILL)


@pytest.fixture(autouse=True)
def remote_token(monkeypatch: pytest.MonkeyPatch, token_file: tuple[Path, str]) -> str:
    monkeypatch.setenv("EMBER_REMOTE_TOKEN", token_file[1])
    monkeypatch.delenv("EMBER_REMOTE_CONFIG", raising=False)
    return token_file[1]


def wait_until(predicate: object, timeout: float = 10.0) -> None:
    """Poll ``predicate`` (a callable) until true: for state another process changes."""
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)
