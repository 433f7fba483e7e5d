"""A dead or hung server is a clear error within the timeout; a restarted one makes the old
tensors raise "session lost"; errors of pipelined ops come back at the next sync, naming the op."""

from __future__ import annotations

import os
import signal
import time

import ember
import numpy as np
import pytest
from conftest import start_server, wait_until

from ember_remote import RemoteConnectionError, SessionLostError

TIMEOUT = 3


def _state(pid: int) -> str:
    """The process's state letter from /proc (``T``: stopped)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_a_killed_server_is_a_clear_error_within_the_timeout(fresh_server):
    d = ember.device(fresh_server.device(timeout=TIMEOUT))
    x = ember.arange(4.0, device=d)
    np.testing.assert_array_equal((x * 3).numpy(), [0.0, 3.0, 6.0, 9.0])
    os.kill(fresh_server.proc.pid, signal.SIGKILL)
    fresh_server.proc.wait(10)
    start = time.monotonic()
    with pytest.raises(RemoteConnectionError, match="unreachable or went away"):
        (x + 1).numpy()
    assert time.monotonic() - start < TIMEOUT + 1
    with pytest.raises(SessionLostError, match="session lost"):
        (x * x).numpy()
    with pytest.raises(SessionLostError, match="session lost"):
        x.numpy()
    start = time.monotonic()
    with pytest.raises(RemoteConnectionError, match="cannot connect"):
        ember.ones(2, device=d)  # a new tensor needs a new session: there is no server
    assert time.monotonic() - start < TIMEOUT + 1


def test_a_hung_server_is_a_clear_error_within_the_timeout(fresh_server):
    d = ember.device(fresh_server.device(timeout=TIMEOUT))
    x = ember.arange(4.0, device=d)
    np.testing.assert_array_equal(x.numpy(), [0.0, 1.0, 2.0, 3.0])
    os.kill(fresh_server.proc.pid, signal.SIGSTOP)  # alive but answering nothing
    wait_until(lambda: _state(fresh_server.proc.pid) == "T")  # stopped before the next op
    try:
        start = time.monotonic()
        with pytest.raises(RemoteConnectionError, match="unreachable or went away"):
            (x * 2).numpy()
        assert time.monotonic() - start < TIMEOUT + 1.5
    finally:
        os.kill(fresh_server.proc.pid, signal.SIGCONT)


def test_no_server_at_all_is_a_clear_error(fresh_server):
    port = fresh_server.port
    fresh_server.stop()
    start = time.monotonic()
    with pytest.raises(RemoteConnectionError, match=f"cannot connect to the remote server "
                                                    f"127.0.0.1:{port}"):
        ember.device(f"remote<127.0.0.1:{port}/cpu,timeout={TIMEOUT}>")
    assert time.monotonic() - start < TIMEOUT + 1


def test_a_restarted_server_makes_old_tensors_raise_session_lost(fresh_server, token_file):
    d = ember.device(fresh_server.device(timeout=TIMEOUT))
    old = ember.tensor([1.0, 2.0], device=d)
    np.testing.assert_array_equal((old + 1).numpy(), [2.0, 3.0])
    port = fresh_server.port
    fresh_server.stop(signal.SIGKILL)
    again = start_server(*token_file, port)
    try:
        with pytest.raises(RemoteConnectionError):
            old.numpy()  # the first use finds the connection gone
        new = ember.tensor([5.0, 7.0], device=d)  # the device opens a new session
        np.testing.assert_array_equal((new * 2).numpy(), [10.0, 14.0])
        with pytest.raises(SessionLostError, match="session lost"):
            old + new
        with pytest.raises(SessionLostError, match="session lost"):
            old.numpy()
        # cached constants (the 1.0 of `+ 1`) are made again in the new session
        np.testing.assert_array_equal((new + 1).numpy(), [6.0, 8.0])
    finally:
        again.stop()


def test_a_server_error_comes_back_at_the_next_sync_naming_the_op(server):
    d = ember.device(server.device())
    x = ember.arange(6.0, device=d).reshape(2, 3)
    bad = ember.tensor([0, 7], device=d)
    # index 7 is out of range; core's own check is bypassed, so the server's kernel finds it
    y = ember.backend.apply(ember.ops.movement.index_select, x, bad, dim=1)
    z = (x * 2).sum()           # unrelated work queued after it
    with pytest.raises(Exception, match="index_select") as info:
        y.numpy()
    assert "remote op" in str(info.value)
    assert z.item() == 30.0   # the session goes on; unrelated tensors are fine
    with pytest.raises(Exception, match="index_select"):
        (y + 1).numpy()       # tensors downstream of the failed op name it too
