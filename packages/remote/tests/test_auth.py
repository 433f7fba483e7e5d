"""Authentication comes before anything else: no token, a wrong one, or any other first
message, and the connection is refused before an op runs."""

from __future__ import annotations

import ember
import numpy as np
import pytest
from rawclient import answer_or_close, ask, open_raw

from ember_remote import RemoteConnectionError
from ember_remote._protocol import VERSION, pack

FULL = ["op", "full", (), {"shape": (2,), "value": 7.0, "dtype": ember.float32}, (1,)]


def test_missing_token_is_refused_naming_where_to_put_it(server, monkeypatch, tmp_path):
    monkeypatch.delenv("EMBER_REMOTE_TOKEN")
    monkeypatch.setenv("EMBER_REMOTE_CONFIG", str(tmp_path / "none.toml"))
    with pytest.raises(RemoteConnectionError, match="EMBER_REMOTE_TOKEN"):
        ember.device(server.device(timeout=3))


def test_wrong_token_is_refused(server, monkeypatch):
    monkeypatch.setenv("EMBER_REMOTE_TOKEN", "x" * 64)
    with pytest.raises(RemoteConnectionError, match="refused the connection: wrong token"):
        ember.device(server.device(timeout=4))


def test_token_from_the_config_file(server, monkeypatch, tmp_path, remote_token):
    monkeypatch.delenv("EMBER_REMOTE_TOKEN")
    config = tmp_path / "remote.toml"
    config.write_text(f'[servers."127.0.0.1:{server.port}"]\ntoken = "{remote_token}"\n')
    monkeypatch.setenv("EMBER_REMOTE_CONFIG", str(config))
    d = ember.device(server.device(timeout=5))
    np.testing.assert_array_equal((ember.arange(3.0, device=d) + 1).numpy(), [1.0, 2.0, 3.0])


@pytest.mark.parametrize("token", [None, "", "x" * 64, 12345])
def test_an_op_before_or_instead_of_auth_never_runs(server, token):
    ws, _ = open_raw(server.port, None)
    first = (pack(["batch", [FULL, ["get", 1]]]) if token is None
             else pack(["auth", VERSION, token, "cpu"]))
    reply = answer_or_close(ws, first)
    assert reply is not None and reply[0] == "refused"
    # whatever follows is never read: the connection is closed, no data ever comes back
    assert answer_or_close(ws, pack(["batch", [FULL, ["get", 1]]])) is None


def test_the_right_token_then_ops_run(server, remote_token):
    ws, hello = open_raw(server.port, remote_token)
    assert hello[0] == "hello" and "float32" in hello[2]["dtypes"]
    reply = ask(ws, FULL, ["get", 1])
    assert reply[0] == "data"
    np.testing.assert_array_equal(np.frombuffer(reply[3], np.float32), [7.0, 7.0])
    ws.close()


def test_the_server_refuses_a_short_token(tmp_path):
    from ember_remote import RemoteServer

    with pytest.raises(ValueError, match="at least 16"):
        RemoteServer("127.0.0.1", 0, token="short")
