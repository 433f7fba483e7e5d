"""Every resource a client can make the server hold is bounded, counted against that client and
freed when it goes (issue 41): tensors (empty ones too), failed ids, remembered signatures, an
op's work buffers, a message's decoded objects; and no check takes time out of proportion to a
message, so one client cannot stall another.  The server's peak memory (VmHWM, read from
``/proc``) stays within its configured limits plus 100 MB of its size after start-up."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import ember
import msgpack
import numpy as np
import pytest
from conftest import Server, start_server
from rawclient import answer_or_close, ask, open_raw

from ember_remote._protocol import pack

MiB = 1 << 20
MESSAGE_MB, TENSOR_MB, CLIENT_MB, TENSORS, CHECKED = 16, 16, 64, 20_000, 256
#: what one client may make the server hold: its budget, a message being received and one
#: being decoded
BUDGET = (CLIENT_MB + 2 * MESSAGE_MB) * MiB
SLACK = 100 * MiB


def _status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of process ``pid``, in bytes."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
    return out


@pytest.fixture(scope="module")
def small(token_file) -> Iterator[Server]:
    s = start_server(*token_file, 0, "--max-message-mb", str(MESSAGE_MB), "--max-tensor-mb",
                     str(TENSOR_MB), "--max-client-mb", str(CLIENT_MB), "--max-tensors",
                     str(TENSORS), "--max-checked", str(CHECKED))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def baseline(small: Server, token_file) -> int:
    """The server's resident size once a client has run a few ops (imports and kernels
    loaded), before any test attacks it."""
    ws, hello = open_raw(small.port, token_file[1])
    table = hello[2]["ops"]
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    reply = ask(ws, ["put", 1, "float32", (8, 8), x.tobytes()],
                [table.index("matmul"), 2, 1, 1], [table.index("exp"), 3, 2],
                [table.index("sum"), (4,), (3,), {"dims": None, "keepdim": False}], ["get", 4])
    assert reply[0] == "data"
    ws.close()
    return _status(small.proc.pid)["VmRSS"]


def _assert_memory_bounded(small: Server, baseline: int) -> None:
    peak = _status(small.proc.pid)["VmHWM"]
    assert peak - baseline <= BUDGET + SLACK, (
        f"server peak {peak / MiB:.0f} MiB, {(peak - baseline) / MiB:.0f} over its start-up "
        f"size; limits allow {BUDGET / MiB:.0f} + {SLACK / MiB:.0f}")


@pytest.fixture
def good(small: Server) -> Any:
    """A well-behaved client of the same server: it must stay connected and exact."""
    d = ember.device(small.device(timeout=20))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 3)).astype(np.float32)
    b = rng.standard_normal((3, 4)).astype(np.float32)
    ta, tb = ember.tensor(a, device=d), ember.tensor(b, device=d)

    def check() -> float:
        start = time.perf_counter()
        got = (ta @ tb).relu().sum(dim=0).numpy()
        want = np.maximum(a.astype(np.float64) @ b.astype(np.float64), 0).sum(axis=0)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        return time.perf_counter() - start

    check()
    return check


def _client(small: Server, token: str) -> tuple[Any, list[str]]:
    ws, hello = open_raw(small.port, token)
    assert hello[0] == "hello", hello
    return ws, hello[2]["ops"]


def _stats(ws: Any) -> dict[str, int]:
    reply = ask(ws, ["sync"])
    while reply[0] == "error":  # a pending error is answered first
        reply = ask(ws, ["sync"])
    assert reply[0] == "ok", reply
    return reply[1]  # type: ignore[no-any-return]  # a msgpack map


def _free_all(ws: Any, ids: range) -> None:
    for start in range(ids.start, ids.stop, 50_000):
        ws.send(pack(["batch", list(range(start, min(start + 50_000, ids.stop)))]))
    stats = _stats(ws)
    assert stats["tensors"] == 0 and stats["failed"] == 0 and stats["bytes"] == 0, stats


def test_empty_tensors_are_counted_and_bounded(small, baseline, good, remote_token):
    ws, _ = _client(small, remote_token)
    sent, errors = 0, []
    while sent < 5 * TENSORS and not errors:  # today's limit lets 20,000 in, then refuses
        batch = [["put", sent + i + 1, "float32", (0, 7), b""] for i in range(10_000)]
        reply = ask(ws, *batch, ["sync"])
        sent += len(batch)
        if reply[0] == "error":
            errors.append(reply)
    assert errors and errors[0][1] == "MemoryError" and "max_tensors" in errors[0][2], errors
    stats = _stats(ws)
    # each empty tensor costs the server ~600 bytes: counted, so the byte limit bounds them too
    assert stats["tensors"] == TENSORS and stats["bytes"] >= 256 * TENSORS, stats
    _free_all(ws, range(1, sent + 1))
    ws.close()
    good()
    _assert_memory_bounded(small, baseline)


def test_empty_tensors_count_against_the_byte_budget(token_file, remote_token):
    # with room for a million tensors, the bytes each costs are what stop the client
    s = start_server(*token_file, 0, "--max-client-mb", "8", "--max-tensors", str(1 << 20))
    try:
        ws, _ = _client(s, remote_token)
        sent, reply = 0, ["ok"]
        while sent < 200_000 and reply[0] != "error":
            batch = [["put", sent + i + 1, "bool", (0,), b""] for i in range(20_000)]
            reply = ask(ws, *batch, ["sync"])
            sent += len(batch)
        assert reply[0] == "error" and "per-client limit of 8388608" in reply[2], reply
        stats = _stats(ws)
        assert stats["bytes"] <= 8 * MiB and stats["tensors"] * 256 <= stats["bytes"], stats
        ws.close()
    finally:
        s.stop()


def test_failed_ids_are_bounded_and_the_error_names_the_limit(small, baseline, good,
                                                                remote_token):
    ws, table = _client(small, remote_token)
    exp = table.index("exp")
    sent = 0
    messages = []
    while sent < 5 * TENSORS:  # today every failed id is kept: 100,000 here, millions if sent
        batch = [[exp, sent + i + 1, 999_999_999] for i in range(20_000)]  # no such input
        reply = ask(ws, *batch, ["sync"])
        messages.append(reply[2])
        sent += len(batch)
    assert "unknown tensor id 999999999" in messages[0]
    stats = _stats(ws)
    assert stats["failed"] == TENSORS, stats
    # an id whose failure could not be kept says why it is unknown
    reply = ask(ws, ["get", sent])
    assert reply[0] == "error" and "max_tensors" in reply[2], reply
    assert any("max_tensors" in m for m in messages[1:]), messages
    reply = ask(ws, ["get", 1])  # a kept one still names the op that failed
    assert reply[0] == "error" and "op 'exp' failed" in reply[2], reply
    _free_all(ws, range(1, sent + 1))
    ws.close()
    good()
    _assert_memory_bounded(small, baseline)


def test_remembered_signatures_are_bounded(small, baseline, good, remote_token):
    ws, table = _client(small, remote_token)
    reshape = table.index("reshape")
    x = np.arange(720, dtype=np.float32)
    records: list[Any] = [["put", 1, "float32", (720,), x.tobytes()]]
    shapes = [(a, 720 // a) for a in range(1, 721) if 720 % a == 0]
    shapes += [(a, b, 720 // (a * b)) for a in range(1, 721) for b in range(1, 721)
               if 720 % (a * b) == 0]
    assert len(shapes) > CHECKED + 40
    for i, shape in enumerate(shapes):
        records.append([reshape, (i + 2,), (1,), {"shape": shape}])
    reply = ask(ws, *records, ["get", len(shapes) + 1])
    assert reply[0] == "data" and tuple(reply[2]) == shapes[-1], reply[:3]
    stats = _stats(ws)
    assert stats["checked"] == CHECKED, stats
    _free_all(ws, range(1, len(shapes) + 2))
    ws.close()
    good()


def _put(tid: int, arr: np.ndarray) -> list[Any]:
    return ["put", tid, arr.dtype.name, arr.shape, arr.tobytes()]


@pytest.mark.parametrize("name, inputs, params, why", [
    # im2col of a 24x24 kernel over a 256x256 image: 125 MB from a 256 KiB input
    ("conv2d", [(1, 1, 256, 256), (1, 1, 24, 24)],
     {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1}, "work buffer"),
    # an outer product of batches: each operand broadcast to a million matrices
    ("matmul", [(1024, 1, 1, 256), (1, 1024, 256, 1)], {}, "work buffer"),
    # a softmax's temporaries over 3M elements (12 MiB in, float64 work)
    ("softmax", [(3 << 20,)], {"dim": 0}, "work buffer"),
    # a sort's keys and indices: each within the tensor limit, together over the client's
    ("sort", [(2 << 20,)], {"dim": 0, "descending": False, "stable": True},
     f"per-client limit of {CLIENT_MB * MiB}"),
    ("interpolate", [(1, 1, 4, 4)], {"size": (2048, 2048), "mode": "nearest",
                                     "align_corners": None}, "work buffer"),
    # no shape rule: the result of nonzero is its data's; bounded from the input before it runs
    ("nonzero", [(64, 64, 16, 16)], {}, "work buffer"),
])
def test_work_buffers_over_the_tensor_limit_are_refused_before_running(
        small, baseline, good, remote_token, name, inputs, params, why):
    ws, table = _client(small, remote_token)
    puts = [_put(i + 1, np.ones(s, dtype=np.float32)) for i, s in enumerate(inputs)]
    outs = tuple(range(100, 100 + (2 if name == "sort" else 1)))
    start = time.perf_counter()
    reply = ask(ws, *puts, [table.index(name), outs, tuple(range(1, len(inputs) + 1)), params],
                ["sync"])
    took = time.perf_counter() - start
    assert reply[0] == "error" and reply[1] == "MemoryError" and why in reply[2], reply
    if why == "work buffer":
        assert f"tensor limit of {TENSOR_MB * MiB}" in reply[2]
    assert took < 1.0, took  # refused from the shapes, not after running
    _free_all(ws, range(1, 200))
    ws.close()
    good()
    _assert_memory_bounded(small, baseline)


def test_a_long_shape_param_is_refused_at_once_and_others_are_served(small, good, remote_token):
    ws, table = _client(small, remote_token)
    # 576 KB: 64K sizes of 2**64 - 1, whose product would take seconds to compute
    shape = (2**64 - 1,) * 64_000
    records = [["put", 1, "float32", (1,), b"\0" * 4],
               [table.index("reshape"), (2,), (1,), {"shape": shape}],
               ["op", "full", (), {"shape": shape, "value": 1.0, "dtype": ember.float32}, (3,)]]
    data = pack(["batch", [*records, ["sync"]]])
    assert len(data) > 570_000
    start = time.perf_counter()
    reply = answer_or_close(ws, data)
    took = time.perf_counter() - start
    assert reply is not None and reply[0] == "error" and "64000 items" in reply[2], reply
    assert took < 0.5, took
    assert good() < 0.5
    reply = ask(ws, ["put", 4, "float32", (2,), b"\0" * 8], ["get", 4])  # the session goes on
    assert reply[0] == "data"
    ws.close()


def test_a_message_of_many_small_objects_is_refused(small, baseline, good, remote_token):
    # 8 MB of empty maps would be 512 MB of dicts: decoding stops at the item limit
    ws, _ = _client(small, remote_token)
    inner = b"\xdd" + (200_000).to_bytes(4, "big") + b"\x80" * 200_000
    data = b"\x92\xa5batch\xdd" + (40).to_bytes(4, "big") + inner * 40
    reply = answer_or_close(ws, data)
    assert reply is not None and reply[0] == "error" and "items" in reply[2], reply
    good()
    _assert_memory_bounded(small, baseline)


def test_deep_nesting_in_a_record_is_an_error(small, good, remote_token):
    ws, table = _client(small, remote_token)
    deep: Any = 1
    for _ in range(900):
        deep = (deep,)
    records = [["put", 1, "float32", (1,), b"\0" * 4], ["op", deep, (1,), {}, (2,)],
               [table.index("exp"), deep, 1], ["free", (deep,)], deep]
    reply = ask(ws, *records, ["sync"])
    assert reply[0] == "error" and len(reply[2]) < 1000, reply
    reply = ask(ws, ["get", 1])
    assert reply[0] == "data"
    ws.close()
    # and past msgpack's own depth the message is undecodable: an error, then closed
    ws, _ = _client(small, remote_token)
    reply = answer_or_close(ws, b"\x92\xa5batch" + b"\x91" * 5000 + b"\x01")
    assert reply is not None and reply[0] == "error" and reply[1] == "ProtocolError", reply
    good()


def test_everything_a_client_held_is_freed_when_it_leaves(small, baseline, good, remote_token):
    # six clients in turn fill 48 MiB each and leave without freeing: kept, that would be
    # 288 MiB, over the limits and the slack
    x = np.ones((1024, 1024), dtype=np.float32)  # 4 MiB each, 12 of them (3 a message)
    for _ in range(6):
        ws, _ = _client(small, remote_token)
        for b in range(4):
            ws.send(pack(["batch", [_put(3 * b + i + 1, x) for i in range(3)]]))
        reply = ask(ws, ["sync"])
        assert reply[0] == "ok" and reply[1]["bytes"] >= 48 * MiB, reply
        ws.close()
    good()
    _assert_memory_bounded(small, baseline)


def test_msgpack_valid_garbage_params_do_not_reach_kernels(small, good, remote_token):
    ws, table = _client(small, remote_token)
    bad = [{"shape": {"a": 1}}, {"shape": ((1,) * 100,)}, {"shape": (((1,),),)},
           {"shape": [1] * 65}]
    records = [["put", 1, "float32", (1,), b"\0" * 4]]
    records += [[table.index("reshape"), (i + 2,), (1,), p] for i, p in enumerate(bad)]
    reply = ask(ws, *records, ["sync"])
    assert reply[0] == "error" and reply[1] == "ProtocolError", reply
    for i in range(len(bad)):
        reply = ask(ws, ["get", i + 2])
        assert reply[0] == "error" and "was not computed" in reply[2], reply
    msgpack.packb(bad)  # the params themselves are valid msgpack
    ws.close()
    good()
