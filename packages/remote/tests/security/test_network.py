"""What a peer without the token can do to ``ember-remote serve`` is bounded (issue 41): idle
connections have their own few slots and a deadline, wrong tokens back off, running out of
file descriptors never stops the server; a token file others can read is refused, a
non-loopback bind warns, and TLS works end to end."""

from __future__ import annotations

import errno
import os
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ember
import numpy as np
import pytest
from conftest import Server, start_server
from rawclient import ask, open_raw
from websockets.exceptions import ConnectionClosed

from ember_remote import RemoteConnectionError
from ember_remote.server import Backoff

FULL = ["op", "full", (), {"shape": (3,), "value": 2.5, "dtype": ember.float32}, (1,)]


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError("no Threads: line")


def _poll(predicate: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _computes(port: int, token: str) -> bool:
    """A good client's exact answer from the server at ``port``."""
    ws, hello = open_raw(port, token)
    try:
        if hello[0] != "hello":
            return False
        reply = ask(ws, FULL, ["get", 1])
        return reply[0] == "data" and np.frombuffer(reply[3], np.float32).tolist() == [2.5] * 3
    finally:
        ws.close()


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    """Servers a test starts, each stopped after it; none may outlive the test."""
    started: list[Server] = []
    yield started
    for s in started:
        s.stop()
        assert s.proc.poll() is not None


# -- connections that never authenticate ----------------------------------------------------


def test_idle_unauthenticated_connections_cannot_starve_clients(token_file, servers):
    s = start_server(*token_file, 0, "--max-pending", "8", "--max-clients", "40")
    servers.append(s)
    base = _threads(s.proc.pid)
    idle = [open_raw(s.port, None)[0] for _ in range(64)]  # handshake done, never auth
    try:
        # their threads are those of at most 8 pending connections (3 threads each), not 64
        assert _poll(lambda: _threads(s.proc.pid) <= base + 3 * 8 + 2), _threads(s.proc.pid)
        good = [open_raw(s.port, token_file[1]) for _ in range(30)]
        assert [hello[0] for _, hello in good] == ["hello"] * 30
        for ws, _ in good:
            assert ask(ws, FULL, ["get", 1])[0] == "data"
            ws.close()
        with pytest.raises(ConnectionClosed):  # the oldest idle ones were pushed out
            idle[0].recv(timeout=5)
    finally:
        for ws in idle:
            ws.close()


def test_a_connection_that_never_authenticates_is_closed_at_the_deadline(token_file, servers):
    s = start_server(*token_file, 0, "--auth-timeout", "0.5")
    servers.append(s)
    ws, _ = open_raw(s.port, None)
    raw = socket.create_connection(("127.0.0.1", s.port))  # not even an HTTP request
    try:
        start = time.monotonic()
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=5)
        raw.settimeout(5)
        assert raw.recv(1) == b""
        assert time.monotonic() - start < 4
    finally:
        ws.close()
        raw.close()


def test_authenticated_clients_are_counted_only_after_the_token(token_file, servers):
    s = start_server(*token_file, 0, "--max-clients", "2", "--max-pending", "4")
    servers.append(s)
    idle = [open_raw(s.port, None)[0] for _ in range(3)]
    a, b = open_raw(s.port, token_file[1]), open_raw(s.port, token_file[1])
    c = open_raw(s.port, token_file[1])
    try:
        assert (a[1][0], b[1][0]) == ("hello", "hello")
        assert c[1][0] == "refused" and "--max-clients" in c[1][1]
    finally:
        for ws in [*idle, a[0], b[0], c[0]]:
            ws.close()


# -- wrong tokens ---------------------------------------------------------------------------


def test_wrong_tokens_back_off_per_peer(token_file, servers):
    s = start_server(*token_file, backoff=0.3)
    servers.append(s)
    replies = []
    for _ in range(20):  # as fast as a guesser can go
        ws, reply = open_raw(s.port, "y" * 64)
        ws.close()
        replies.append(reply)
    assert all(r[0] == "refused" for r in replies)
    looked_at = [r for r in replies if r[1].startswith("wrong token")]
    assert 1 <= len(looked_at) <= 3, [r[1] for r in replies]
    assert "too many wrong tokens from 127.0.0.1" in replies[-1][1]
    # even the right token waits its turn, then gets in
    ws, reply = open_raw(s.port, token_file[1])
    ws.close()
    assert reply[0] == "refused" and "try again in" in reply[1]
    assert _poll(lambda: _computes(s.port, token_file[1]), timeout=10)


def test_backoff_doubles_up_to_its_cap_and_forgets_quiet_peers():
    b = Backoff(base=0.5, cap=4.0)
    assert [b.failed("10.1.1.1", now=t) for t in (0, 0, 0, 0, 0, 0)] == [
        0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert b.wait("10.1.1.1", now=1.0) == 3.0 and b.wait("10.1.1.2", now=1.0) == 0.0
    assert b.failed("10.1.1.1", now=100.0) == 0.5  # quiet for longer than the cap
    # an IPv6 peer is its /64: changing the low bits does not start afresh
    b.failed("2001:db8::1", now=0.0)
    assert b.wait("2001:db8::ffff", now=0.1) > 0
    b.succeeded("2001:db8::2")
    assert b.wait("2001:db8::1", now=0.1) == 0.0


# -- file descriptors -----------------------------------------------------------------------


def _stderr_says(proc: subprocess.Popen[str], text: str, timeout: float = 20.0) -> bool:
    """Whether ``proc`` writes ``text`` on stderr within ``timeout`` seconds (read without
    blocking on the pipe)."""
    assert proc.stderr is not None
    fd, seen = proc.stderr.fileno(), b""
    deadline = time.monotonic() + timeout
    while text.encode() not in seen:
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            return False
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            seen += os.read(fd, 65536)
    return True


def _limit_fds() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


@pytest.mark.parametrize("pending", ["1000", "16"], ids=["pending-unbounded", "default"])
def test_running_out_of_descriptors_refuses_connections_and_keeps_serving(token_file, servers,
                                                                          pending):
    s = start_server(*token_file, 0, "--max-pending", pending, "--auth-timeout", "60",
                     preexec_fn=_limit_fds)
    servers.append(s)
    socks = []
    try:
        for _ in range(400):  # more than the server's 256 descriptors
            sock = socket.socket()
            sock.setblocking(False)
            assert sock.connect_ex(("127.0.0.1", s.port)) in (0, errno.EINPROGRESS)
            socks.append(sock)
        if pending == "1000":  # nothing but the descriptor limit holds them back
            assert _stderr_says(s.proc, "out of file descriptors")
        assert s.proc.poll() is None
    finally:
        for sock in socks:
            sock.close()
    assert s.proc.poll() is None
    assert _poll(lambda: _computes(s.port, token_file[1]), timeout=20)
    assert s.proc.poll() is None


# -- configuration ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o620])
def test_a_token_file_others_can_access_is_refused(tmp_path, mode):
    path = tmp_path / "token"
    path.write_text("z" * 64)
    path.chmod(mode)
    proc = subprocess.run(
        [sys.executable, "-m", "ember_remote", "serve", "--bind", "127.0.0.1:0",
         "--token-file", str(path), "--devices", "cpu"],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "serving" not in proc.stdout
    assert str(path) in proc.stderr and "chmod 600" in proc.stderr


def _serve(args: list[str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-m", "ember_remote", "serve", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else ""
    if "serving" not in line:
        proc.kill()
        proc.communicate()
        raise AssertionError(f"no start: {line!r}")
    return proc


def _stop(proc: subprocess.Popen[str]) -> str:
    """Stop ``proc`` and return what it wrote on stderr."""
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    return err


@pytest.mark.parametrize("bind,warns", [("0.0.0.0:0", True), ("127.0.0.1:0", False)])
def test_a_non_loopback_bind_warns_naming_the_token_and_tls_options(token_file, bind, warns):
    err = _stop(_serve(["--bind", bind, "--token-file", str(token_file[0]), "--devices",
                        "cpu"]))
    if warns:
        assert "not a loopback address" in err and "--token-file" in err
        assert "--tls-cert" in err and "--tls-key" in err
    else:
        assert "warning" not in err


# -- TLS ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    try:
        from cryptography import x509  # noqa: F401  # preferred when installed
    except ImportError:
        if shutil.which("openssl") is None:
            pytest.skip("neither the cryptography package nor the openssl command is here")
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not here")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    key.chmod(0o600)
    return cert, key


def test_tls_round_trip_with_a_self_signed_certificate(token_file, servers, certificate,
                                                       monkeypatch):
    cert, key = certificate
    s = start_server(*token_file, 0, "--tls-cert", str(cert), "--tls-key", str(key))
    servers.append(s)
    monkeypatch.setenv("EMBER_REMOTE_CA", str(cert))
    d = ember.device(f"remote<wss://127.0.0.1:{s.port}/cpu,timeout=10>")
    assert str(d) == f"remote<wss://127.0.0.1:{s.port}/cpu,timeout=10>"
    x = ember.tensor([1.0, 2.0, 3.0], device=d)
    # [3, 5, 7] . [1, 2, 3]
    np.testing.assert_array_equal(((x * 2 + 1) @ x).numpy(), np.float32(34.0))


def test_a_tls_client_refuses_a_certificate_it_cannot_check(token_file, servers, certificate,
                                                            monkeypatch, tmp_path):
    cert, key = certificate
    s = start_server(*token_file, 0, "--tls-cert", str(cert), "--tls-key", str(key))
    servers.append(s)
    monkeypatch.delenv("EMBER_REMOTE_CA", raising=False)
    config = tmp_path / "remote.toml"
    config.write_text("")
    monkeypatch.setenv("EMBER_REMOTE_CONFIG", str(config))
    with pytest.raises(RemoteConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        ember.device(f"remote<wss://127.0.0.1:{s.port}/cpu,timeout=5>")
    # and a plain ws:// client gets nothing from a TLS server
    with pytest.raises(RemoteConnectionError):
        ember.device(f"remote<127.0.0.1:{s.port}/cpu,timeout=3>")


def test_a_tls_ca_from_the_config_file(token_file, servers, certificate, monkeypatch,
                                       tmp_path):
    cert, key = certificate
    s = start_server(*token_file, 0, "--tls-cert", str(cert), "--tls-key", str(key))
    servers.append(s)
    monkeypatch.delenv("EMBER_REMOTE_CA", raising=False)
    (tmp_path / "server.pem").write_bytes(cert.read_bytes())
    config = tmp_path / "remote.toml"
    config.write_text(f'[servers."127.0.0.1:{s.port}"]\nca = "server.pem"\n')
    monkeypatch.setenv("EMBER_REMOTE_CONFIG", str(config))
    d = ember.device(f"remote<wss://127.0.0.1:{s.port}/cpu,timeout=9>")
    assert (ember.arange(4.0, device=d) * 3).tolist() == [0.0, 3.0, 6.0, 9.0]


def test_the_raw_protocol_refuses_ops_before_auth_over_tls_too(token_file, servers, certificate):
    """The pending-connection rules hold on a TLS listener (the TLS handshake is inside the
    deadline): a connection that never starts TLS is closed at the deadline."""
    cert, key = certificate
    s = start_server(*token_file, 0, "--tls-cert", str(cert), "--tls-key", str(key),
                     "--auth-timeout", "0.5")
    servers.append(s)
    raw = socket.create_connection(("127.0.0.1", s.port))
    try:
        raw.settimeout(5)
        assert raw.recv(1) == b""
    finally:
        raw.close()
