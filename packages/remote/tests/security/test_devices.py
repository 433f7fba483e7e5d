"""The device a client names is text the server looks up, never builds (issue 41): it cannot
make the server connect to another server (with the server's own token), start thread pools
through device options, or fill core's device cache with new device strings."""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ember
import pytest
from conftest import Server, start_server
from rawclient import ask, open_raw
from websockets.sync.server import ServerConnection, serve

from ember_remote import RemoteServer
from ember_remote._devices import AllowList, parse_device


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


@pytest.fixture
def servers(token_file: tuple[Path, str]) -> Iterator[list[Server]]:
    """Servers a test starts (``servers.append(start_server(...))``), each stopped after it;
    none may outlive the test."""
    started: list[Server] = []
    yield started
    for s in started:
        s.stop()
        assert s.proc.poll() is not None


class Recorder:
    """A WebSocket server that records every connection and message: what the ember server
    must never talk to."""

    def __init__(self) -> None:
        self.messages: list[Any] = []
        self.connections = 0
        self.server = serve(self._handle, "127.0.0.1", 0)
        self.port = self.server.socket.getsockname()[1]
        self.thread = threading.Thread(target=self.server.serve_forever)
        self.thread.start()

    def _handle(self, conn: ServerConnection) -> None:
        self.connections += 1
        for message in conn:
            self.messages.append(message)

    def close(self) -> None:
        self.server.shutdown()
        self.thread.join(10)
        assert not self.thread.is_alive()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    r = Recorder()
    yield r
    r.close()


@pytest.mark.parametrize("devices", ["cpu", None], ids=["--devices cpu", "default"])
@pytest.mark.parametrize("stack", ["remote<{a}/cpu,timeout=2>", "fusion<remote<{a}/cpu>>",
                                   "autodiff<remote<{a}/cpu,timeout=2>>"])
def test_a_device_naming_another_server_is_refused_and_nothing_connects_there(
        token_file, servers, recorder, stack, devices, monkeypatch):
    # the attack: the server's own token is in its environment, and the client names a host
    # of its choosing
    monkeypatch.setenv("EMBER_REMOTE_TOKEN", token_file[1])
    s = start_server(*token_file, devices=devices)
    servers.append(s)
    device = stack.format(a=f"127.0.0.1:{recorder.port}")
    ws, reply = open_raw(s.port, token_file[1], device)
    ws.close()
    assert reply[0] == "refused" and "never connects" in reply[1]
    # the refusal came after whatever the server did for it: nothing reached the recorder
    assert recorder.connections == 0 and recorder.messages == []


def test_a_tcp_listener_named_in_a_device_sees_no_connection(token_file, servers):
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        s = start_server(*token_file)
        servers.append(s)
        port = listener.getsockname()[1]
        ws, reply = open_raw(s.port, token_file[1], f"remote<127.0.0.1:{port}/cpu,timeout=1>")
        ws.close()
        assert reply[0] == "refused"
        ready, _, _ = select.select([listener], [], [], 0)
        assert ready == []  # not even a TCP connection was opened
    finally:
        listener.close()


def test_the_server_refuses_to_start_with_a_remote_device(token_file):
    proc = subprocess.run(
        [sys.executable, "-m", "ember_remote", "serve", "--bind", "127.0.0.1:0",
         "--token-file", str(token_file[0]), "--devices", "cpu,remote<127.0.0.1:9/cpu>"],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "never serves a remote<...>" in proc.stderr


@pytest.mark.parametrize("devices", ["cpu,fusion<cpu>", None], ids=["listed", "default"])
def test_device_options_are_refused_and_the_thread_count_stays_bounded(token_file, servers,
                                                                        devices):
    s = start_server(*token_file, devices=devices)
    servers.append(s)
    ws, hello = open_raw(s.port, token_file[1], "fusion<cpu>")  # warm the served stack up
    assert hello[0] == "hello"
    ws.close()
    base = _threads(s.proc.pid)
    refused = []
    for n in (8, 16, 24, 32):
        ws, reply = open_raw(s.port, token_file[1], f"fusion<cpu,threads={n}>")
        if reply[0] == "hello":  # make the pool start its threads, as an attacker would
            big = {"shape": (1 << 21,), "value": 1.0, "dtype": ember.float32}
            ask(ws, ["op", "full", (), big, (1,)], ["op", "mul", (1, 1), {}, (2,)],
                ["op", "add", (2, 1), {}, (3,)], ["op", "exp", (3,), {}, (4,)], ["get", 4])
        else:
            refused.append("options are fixed" in reply[1])
        ws.close()
    assert refused == [True] * 4
    # every connection is gone: so are its threads (a pool per `threads=` never would be)
    assert _poll(lambda: _threads(s.proc.pid) <= base + 1), (_threads(s.proc.pid), base)


def test_many_device_strings_leave_the_device_cache_bounded(token_file):
    from ember._device import _CACHE

    server = RemoteServer("127.0.0.1", 0, token=token_file[1], devices=["cpu", "fusion<cpu>"])
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    try:
        before = len(_CACHE)
        names = ([f"fusion<cpu,eager={n}>" for n in range(20)]
                 + [f"fusion<cpu,chunk={n + 1}>" for n in range(20)]
                 + [f"cpu:{n}" for n in range(1, 10)] + ["autodiff<cpu>", "fusion< cpu >"])
        replies = []
        for name in names:
            ws, reply = open_raw(server.port, token_file[1], name)
            ws.close()
            replies.append(reply[0])
        assert replies == ["refused"] * (len(names) - 1) + ["hello"]
        # only the served strings were ever built: at most two cache keys each
        assert len(_CACHE) <= before + 2 * 2
    finally:
        server.close()
        thread.join(10)
    assert not thread.is_alive()


# -- the parser and the allow-list, alone ---------------------------------------------------


@pytest.mark.parametrize("text,canonical", [
    ("cpu", "cpu"), (" fusion< cpu > ", "fusion<cpu>"),
    ("fusion<cpu,threads=2,chunk=8>", "fusion<cpu,chunk=8,threads=2>"),
    ("autodiff<fusion<cuda:1>>", "autodiff<fusion<cuda:1>>"),
])
def test_parse_device_renders_a_canonical_string(text, canonical):
    assert str(parse_device(text)) == canonical


@pytest.mark.parametrize("text", ["", "cpu>", "fusion<cpu", "fusion<cpu>>", "<cpu>",
                                  "fusion<cpu,threads>", "fusion<cpu,a=<b>>", "x" * 300, 7,
                                  "cpu:1:2", "fusion<cpu>x"])
def test_parse_device_refuses_malformed_strings(text):
    with pytest.raises(ValueError):
        parse_device(text)


def test_parse_device_finds_a_remote_layer_anywhere():
    assert parse_device("autodiff<fusion<remote<h:1/cpu>>>").forwards
    assert not parse_device("autodiff<fusion<cpu>>").forwards


def test_the_default_allow_list_is_finite_and_without_options():
    allowed = AllowList()
    assert "cpu" in allowed.served and "fusion<cpu>" in allowed.served
    assert all("=" not in name and "remote" not in name for name in allowed.served)
    assert allowed.resolve(" fusion<cpu> ") == "fusion<cpu>"
    with pytest.raises(PermissionError, match="options are fixed"):
        allowed.resolve("fusion<cpu,threads=64>")


def test_an_indexed_family_without_index_means_index_0():
    rows = {r.name for r in ember.devices()}
    indexed = sorted(n for n in rows if n.endswith(":0"))
    if not indexed:
        pytest.skip("no indexed device family is registered")
    name = indexed[0]
    served = AllowList([name.split(":")[0]])
    assert served.resolve(name) == name.split(":")[0]
