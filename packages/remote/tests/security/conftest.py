"""Every security test leaves no process and no thread of its own behind."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def _children() -> set[int]:
    """The live (not zombie) child processes of this test process."""
    out: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            text = (task / "children").read_text()
        except OSError:  # a thread that ended meanwhile
            continue
        for pid in text.split():
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:  # reaped meanwhile
                continue
            if state != "Z":
                out.add(int(pid))
    return out


def _held() -> set[threading.Thread]:
    """The threads of the connections that remote devices in ember's device cache keep open
    on purpose (a device string names one session for the process's life)."""
    from ember._device import _CACHE

    out: set[threading.Thread] = set()
    for dev in list(_CACHE.values()):
        conn = getattr(dev.backend, "_conn", None)
        ws = getattr(conn, "ws", None)
        for name in ("recv_events_thread", "keepalive_thread"):
            thread = getattr(ws, name, None)
            if isinstance(thread, threading.Thread):
                out.add(thread)
    return out


def _threads() -> set[threading.Thread]:
    return set(threading.enumerate()) - _held()


@pytest.fixture(autouse=True)
def leaves_nothing_behind() -> Iterator[None]:
    """A test's servers, clients and helper threads are gone when it ends (waited for up to
    10 s: a closing WebSocket's thread ends once the peer's close frame arrives)."""
    procs, threads = _children(), _threads()
    yield
    deadline = time.monotonic() + 10
    while True:
        extra_procs = _children() - procs
        extra_threads = {t for t in _threads() - threads if t.is_alive()}
        if (not extra_procs and not extra_threads) or time.monotonic() > deadline:
            break
        time.sleep(0.05)  # polling for an end we cannot be told of
    assert not extra_procs, f"the test left processes running: {sorted(extra_procs)}"
    assert not extra_threads, ("the test left threads running: "
                               f"{sorted(t.name for t in extra_threads)}")
