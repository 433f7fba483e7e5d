"""Hostile and malformed messages get an error; the server keeps serving a well-behaved client
(checked against numpy after every one of them)."""

from __future__ import annotations

import random
import struct

import ember
import msgpack
import numpy as np
import pytest
from rawclient import answer_or_close, ask, open_raw

from ember_remote._protocol import VERSION, pack


@pytest.fixture
def good(server):
    """The well-behaved client: a check that it still computes right."""
    d = ember.device(server.device(timeout=20))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 3)).astype(np.float32)
    b = rng.standard_normal((3, 4)).astype(np.float32)
    ta, tb = ember.tensor(a, device=d), ember.tensor(b, device=d)

    def check() -> None:
        got = (ta @ tb).relu().sum(dim=0).numpy()
        want = np.maximum(a.astype(np.float64) @ b.astype(np.float64), 0).sum(axis=0)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

    check()
    return check


def _fresh(server, token):
    ws, hello = open_raw(server.port, token)
    assert hello[0] == "hello"
    return ws


def test_random_bytes_get_an_error(server, remote_token, good):
    rng = random.Random(1)
    for n in (1, 7, 100, 5000):
        ws = _fresh(server, remote_token)
        data = bytes(rng.getrandbits(8) for _ in range(n))
        reply = answer_or_close(ws, data)
        # an error naming what is wrong, then the connection is closed (or closed at once)
        assert reply is None or (reply[0] == "error" and reply[1] == "ProtocolError")
        good()


def test_random_bytes_before_auth_are_refused(server, good):
    rng = random.Random(2)
    for n in (3, 300, 3000):
        ws, _ = open_raw(server.port, None)
        reply = answer_or_close(ws, bytes(rng.getrandbits(8) for _ in range(n)))
        assert reply is None or reply[0] == "refused"
        good()


def test_truncated_frames_get_an_error(server, remote_token, good):
    whole = pack(["batch", [["put", 1, "float32", (4,), b"\0" * 16], ["get", 1]]])
    for cut in (1, 5, len(whole) // 2, len(whole) - 1):
        ws = _fresh(server, remote_token)
        reply = answer_or_close(ws, whole[:cut])
        assert reply is not None and reply[0] == "error" and "malformed" in reply[2]
        good()


def test_oversized_lengths_get_an_error(server, remote_token, good):
    # msgpack headers that claim far more than the message holds
    claims = [b"\xdb" + struct.pack(">I", 2**31) + b"abc",          # str of 2 GiB
              b"\xc6" + struct.pack(">I", 2**32 - 1) + b"x",          # bin of 4 GiB
              b"\xdd" + struct.pack(">I", 2**32 - 1),                 # array of 4G items
              b"\x92\xa5batch\xdd" + struct.pack(">I", 2**31)]        # a batch of 2G records
    for data in claims:
        ws = _fresh(server, remote_token)
        reply = answer_or_close(ws, data)
        assert reply is not None and reply[0] == "error", data
        good()
    # a message over the WebSocket size limit is refused without being read
    ws = _fresh(server, remote_token)
    assert answer_or_close(ws, b"\0" * (300 << 20)) is None
    good()


@pytest.mark.parametrize("record, message", [
    (["op", "no_such_op", (), {}, (5,)], "unknown op 'no_such_op'"),
    (["op", 42, (), {}, (5,)], "unknown op 42"),
    (["op", "add", (1,), {}, (5,)], "takes 2 tensor(s)"),
    (["op", "add", (1, 2), {}, (5,)], "different dtypes"),
    (["op", "add", (1, 1), {"alpha": 2}, (5,)], "unknown params"),
    (["op", "reshape", (1,), {"shape": "abc"}, (5,)], "shape must be a tuple"),
    (["op", "reshape", (1,), {"shape": (7,)}, (5,)], "cannot reshape"),
    (["op", "conv2d", (1, 1), {"stride": (0, 0), "padding": (0, 0), "dilation": (1, 1),
                               "groups": 1}, (5,)], "stride must be >= 1"),
    (["op", "full", (), {"shape": (1 << 40,), "value": 1.0, "dtype": ember.float32}, (5,)],
     "over the server's tensor limit"),
    (["op", "exp", (1,), {}, (1,)], "is in use"),
    (["op", "exp", (999,), {}, (5,)], "unknown tensor id 999"),
    (["op", "exp", (-1,), {}, (5,)], "a tensor id must be an int"),
    (["put", 5, "float128", (2,), b"\0" * 32], "unknown dtype 'float128'"),
    (["put", 5, "float32", (2,), b"\0" * 7], "7 bytes for shape (2,)"),
    (["put", 5, "float32", (-2,), b""], "a shape must be"),
    (["put", 5, "float32", (1 << 40,), b""], "over the server's tensor limit"),
    (["free", 5], "expected ['free', ids]"),
    (["mystery"], "unknown record kind 'mystery'"),
    ([], "a record is an id or an array"),
    ([1.5], "a record is an id or an array"),
    (["free", ({},)], "unhashable"),
])
def test_bad_records_are_errors_at_the_next_sync(server, remote_token, good, record, message):
    ws = _fresh(server, remote_token)
    setup = [["put", 1, "float32", (2, 2), np.arange(4, dtype=np.float32).tobytes()],
             ["put", 2, "int64", (2, 2), np.arange(4, dtype=np.int64).tobytes()]]
    reply = ask(ws, *setup, record, ["sync"])
    assert reply[0] == "error" and message in reply[2], reply
    # the session goes on: the error was reported once, the tensors are intact
    reply = ask(ws, ["get", 1])
    assert reply[0] == "data"
    np.testing.assert_array_equal(np.frombuffer(reply[3], np.float32), [0, 1, 2, 3])
    ws.close()
    good()


@pytest.mark.parametrize("records, message", [
    ([[9999, 5, 1]], "unknown op code 9999"),
    ([[-1, 5, 1]], "unknown op code -1"),
    ([["#add", 5, 1]], "takes 2 tensor(s)"),
    ([["#add", 5, 1, 2]], "different dtypes"),
    ([["#add", 1, 1, 1]], "is in use"),
    ([["#add", 5, 1, 999]], "unknown tensor id 999"),
    ([["#exp", 0, 1]], "a tensor id must be an int"),
    ([["#exp", 5, {}]], "a tensor id must be an int"),
    ([["#reshape", (5,), (1,)]], "expected [code, out_ids, arg_ids, params]"),
    ([["#reshape", (5,), (1,), {"shape": (7,)}]], "cannot reshape"),
    ([["#add", (5,), (1, 1), {"alpha": 2}]], "unknown params"),
    # the second time a signature comes its checks are remembered, and still refuse
    ([["#add", 5, 1, 1], ["#add", 5, 1, 1]], "is in use"),
    ([["#add", 5, 1, 1], ["#add", 6, 1, 1], 6, ["#add", 6, 5, 5], ["#add", 7, 1, 0]],
     "a tensor id must be an int"),
    # a param that the shape rule reads is part of what was checked; a params array is not a map
    ([["#reshape", (5,), (1,), {"shape": (4,)}], ["#reshape", (6,), (1,), {"shape": (7,)}]],
     "cannot reshape"),
    ([["#clamp", (5,), (1,), {"min": 0, "max": None}], ["#clamp", (6,), (1,), ("min", "max")]],
     "a params map"),
    ([["#exp", (5,), (1,), {}], ["#exp", (6,), {"1": 0}, {}]], "a params map"),
])
def test_bad_coded_records_are_errors_at_the_next_sync(server, remote_token, good, records,
                                                       message):
    ws, hello = open_raw(server.port, remote_token)
    table = hello[2]["ops"]

    def coded(item: object) -> object:
        if isinstance(item, str) and item.startswith("#"):
            return table.index(item[1:])
        return item

    setup = [["put", 1, "float32", (2, 2), np.arange(4, dtype=np.float32).tobytes()],
             ["put", 2, "int64", (2, 2), np.arange(4, dtype=np.int64).tobytes()]]
    sent = [[coded(x) for x in r] if isinstance(r, list) else r for r in records]
    reply = ask(ws, *setup, *sent, ["sync"])
    assert reply[0] == "error" and message in reply[2], reply
    reply = ask(ws, ["get", 1])  # the session goes on, its tensors intact
    np.testing.assert_array_equal(np.frombuffer(reply[3], np.float32), [0, 1, 2, 3])
    ws.close()
    good()


def test_an_unknown_extension_type_and_a_text_frame_are_errors(server, remote_token, good):
    ws = _fresh(server, remote_token)
    reply = answer_or_close(ws, msgpack.packb(["batch", [msgpack.ExtType(9, b"x")]]))
    assert reply is not None and "extension type 9" in reply[2]
    ws = _fresh(server, remote_token)
    reply = answer_or_close(ws, "hello")  # type: ignore[arg-type]  # a text frame on purpose
    assert reply is not None and reply[0] == "error" and "got text" in reply[2]
    good()


def test_a_wrong_protocol_version_is_refused(server, remote_token, good):
    ws, _ = open_raw(server.port, None)
    reply = answer_or_close(ws, pack(["auth", VERSION + 1, remote_token, "cpu"]))
    assert reply is not None and reply[0] == "refused" and "version" in reply[1]
    good()
