"""Thousands of hostile frames from one seeded generator: random bytes, msgpack-valid garbage,
truncated and bit-flipped messages, and good records mutated (wrong types, huge ints, deep
nesting, long lists, bad ids, op codes and params).  After every frame the server must answer
a probe or close that connection with an error; at the end it still serves, and a
well-behaved client's results are exact against numpy.

``EMBER_FUZZ_SEED`` replays a run (the seed is printed); ``EMBER_FUZZ_FRAMES`` sets its
length (default 5,200).
"""

from __future__ import annotations

import os
import random
import signal
import struct
import time
from collections.abc import Iterator
from typing import Any

import ember
import msgpack
import numpy as np
import pytest
from conftest import Server, start_server
from rawclient import open_raw
from websockets.exceptions import ConnectionClosed

from ember_remote._protocol import pack, unpack

FRAMES = int(os.environ.get("EMBER_FUZZ_FRAMES", "5200"))
IDS = 400  # the fuzzer's ids are 1..IDS (reused: in-use and unknown ids come up often)
PROBE = 1 << 40  # probe tensors' ids start here
KINDS = ("ok", "error", "data", "shape")


@pytest.fixture(scope="module")
def fuzz_server(token_file) -> Iterator[Server]:
    s = start_server(*token_file, 0, "--max-message-mb", "4", "--max-tensor-mb", "4",
                     "--max-client-mb", "32", "--max-tensors", "20000")
    yield s
    s.stop()


class Fuzzer:
    """Frames from ``rng``; ``table`` is the server's op table."""

    def __init__(self, rng: random.Random, table: list[str]) -> None:
        self.rng, self.table = rng, table
        self.code = {name: i for i, name in enumerate(table)}

    # -- values --------------------------------------------------------------------------

    def id(self) -> int:
        return self.rng.randint(1, IDS)

    def hostile(self, depth: int = 0) -> Any:
        r = self.rng
        choice = r.randrange(16)
        if choice == 0:
            return r.choice([2**63 - 1, 2**64 - 1, -(2**63), -1, 0, 1 << 62, (1 << 62) - 1])
        if choice == 1:
            return r.choice([float("nan"), float("inf"), -float("inf"), 1e308, -0.0, 0.5])
        if choice == 2:
            return "x" * r.choice([0, 1, 64, 5000, 60000])
        if choice == 3:
            return bytes(r.getrandbits(8) for _ in range(r.randrange(40)))
        if choice == 4:
            return r.choice([None, True, False])
        if choice == 5:  # deep nesting: within msgpack's depth limit, or past it
            v: Any = r.randrange(5)
            for _ in range(r.choice([10, 200, 900, 1100])):
                v = (v,)
            return v
        if choice == 6:  # a long list of big numbers
            return tuple([r.choice([2**64 - 1, 2, 0, 7])] * r.choice([65, 1000, 60000]))
        if choice == 7:
            return {"shape": (1, 2), "dim": 0} if depth else {r.choice(["a", "dim", "shape"]):
                                                              self.hostile(depth + 1)}
        if choice == 8:
            return msgpack.ExtType(r.choice([1, 1, 2, 9]), r.choice([b"float32", b"nope",
                                                                    b"\xff", b""]))
        if choice == 9:
            return r.choice([ember.float32, ember.int64, ember.bool, ember.bfloat16])
        if choice == 10:
            return tuple(r.randint(0, 5) for _ in range(r.randrange(0, 8)))
        if choice == 11:
            return r.choice(["float32", "int64", "float128", "put", "op", "get", "free"])
        if choice == 12:
            return r.randint(-5, len(self.table) + 5)
        if choice == 13:
            return self.id()
        if choice == 14:
            return (self.id(), self.id())
        return r.randint(-(2**31), 2**31)

    # -- good records, then mutated ones ---------------------------------------------------

    def good_record(self) -> list[Any]:
        r, c = self.rng, self.code
        shape = tuple(r.randint(0, 4) for _ in range(r.randrange(0, 4)))
        n = int(np.prod(shape)) if shape else 1
        dtype = r.choice(["float32", "float32", "int64", "bool", "float64"])
        size = {"float32": 4, "int64": 8, "bool": 1, "float64": 8}[dtype]
        a, b, o = self.id(), self.id(), self.id()
        options: list[list[Any]] = [
            ["put", o, dtype, shape, bytes(r.getrandbits(8) for _ in range(n * size))],
            [c["add"], o, a, b], [c["exp"], o, a], [c["neg"], o, a], [c["mul"], o, a, a],
            [c["matmul"], o, a, b], [c["relu"] if "relu" in c else c["abs"], o, a],
            [c["reshape"], (o,), (a,), {"shape": (r.randint(-1, 6), r.randint(0, 6))}],
            [c["sum"], (o,), (a,), {"dims": (0,), "keepdim": r.choice([True, False])}],
            [c["full"], (o,), (), {"shape": shape, "value": 1.5, "dtype": ember.float32}],
            [c["slice"], (o,), (a,), {"starts": (0,), "stops": (2,), "steps": (1,)}],
            [c["pad"], (o,), (a,), {"pad": ((1, 1),), "value": 0.0}],
            [c["cat"], (o,), (a, b), {"dim": 0}],
            [c["softmax"], (o,), (a,), {"dim": -1}],
            [c["sort"], (o, self.id()), (a,), {"dim": -1, "descending": False,
                                               "stable": True}],
            [c["conv2d"], (o,), (a, b), {"stride": (1, 1), "padding": (0, 0),
                                         "dilation": (1, 1), "groups": 1}],
            [c["nonzero"], (o,), (a,), {}],
            ["op", "exp", (a,), {}, (o,)], ["op", "expand", (a,), {"shape": shape}, (o,)],
            ["free", (a, b)], a,
        ]
        return r.choice(options)

    def mutate(self, value: Any, depth: int = 0) -> Any:
        r = self.rng
        if isinstance(value, tuple | list) and value and depth < 3 and r.random() < 0.7:
            items = list(value)
            i = r.randrange(len(items))
            action = r.randrange(5)
            if action == 0:
                items[i] = self.hostile()
            elif action == 1:
                items[i] = self.mutate(items[i], depth + 1)
            elif action == 2:
                del items[i]
            elif action == 3:
                items.insert(i, self.hostile())
            else:
                items = items * r.choice([2, 50])
            return tuple(items) if isinstance(value, tuple) else items
        if isinstance(value, dict) and r.random() < 0.8:
            out = dict(value)
            key = r.choice([*out, "alpha", "dtype", "x" * 100]) if out else "dim"
            if r.random() < 0.2:
                out.pop(key, None)
            else:
                out[key] = self.hostile()
            return out
        return self.hostile()

    def batch(self) -> list[Any]:
        r = self.rng
        records = [self.good_record() for _ in range(r.randint(1, 12))]
        for i in range(len(records)):
            if r.random() < 0.5:
                records[i] = self.mutate(records[i])
        return records

    # -- frames ----------------------------------------------------------------------------

    def frame(self) -> bytes | str:
        r = self.rng
        kind = r.random()
        try:
            if kind < 0.55:  # a batch of good and mutated records
                return pack(["batch", self.batch()])
            if kind < 0.65:  # a whole message mutated
                return pack(self.mutate(["batch", self.batch()]))
            good = pack(["batch", self.batch()])
            if kind < 0.73:  # truncated
                return good[:r.randrange(1, len(good))]
            if kind < 0.83:  # bytes flipped
                data = bytearray(good)
                for _ in range(r.randint(1, 4)):
                    data[r.randrange(len(data))] = r.getrandbits(8)
                return bytes(data)
            if kind < 0.88:  # random bytes
                return bytes(r.getrandbits(8) for _ in range(r.choice([1, 9, 300])))
            if kind < 0.93:  # msgpack headers claiming far more than follows
                head = r.choice([b"\xdd", b"\xdf", b"\xc6", b"\xdb"])
                return b"\x92\xa5batch" + head + struct.pack(">I", r.choice([2**31, 2**20 + 1,
                                                                              300_000]))
            if kind < 0.97:  # msgpack-valid, not a batch
                return msgpack.packb(r.choice([["auth", 2, "t", "cpu"], {"batch": []}, 7,
                                               ["batch"], ["batch", [], []], []]))
            return "a text frame"
        except (TypeError, ValueError, OverflowError):  # a value msgpack cannot hold
            return pack(["batch", [self.good_record()]])


class Probe:
    """One raw connection to the server; after each frame, `settle` sends a probe (an upload
    and its read-back, under a new id) and reads replies until the probe's own, checking each
    is a well-formed answer; a connection the server closed is opened again."""

    def __init__(self, server: Server, token: str) -> None:
        self.server, self.token = server, token
        self.next = PROBE
        self.reconnects = 0
        self.errors = 0
        self.table: list[str] = []
        self._open()

    def _open(self) -> None:
        self.ws, hello = open_raw(self.server.port, self.token)
        assert hello[0] == "hello", hello
        self.table = hello[2]["ops"]

    def send(self, frame: bytes | str) -> None:
        try:
            self.ws.send(frame)
        except ConnectionClosed:
            self._reopen()

    def _reopen(self) -> None:
        self.ws.close()
        self.reconnects += 1
        self._open()

    def settle(self) -> None:
        for _ in range(50):
            self.next += 1
            pid = self.next
            try:
                self.ws.send(pack(["batch", [pid - 1, ["put", pid, "int64", (1,),
                                                       struct.pack("<q", pid)], ["get", pid]]]))
                while True:
                    reply = unpack(self.ws.recv(timeout=10), max_bytes=1 << 30)  # type: ignore[arg-type]
                    assert reply[0] in KINDS, reply
                    if reply[0] == "error":
                        assert isinstance(reply[1], str) and isinstance(reply[2], str), reply
                        assert len(reply[2]) < 20_000, len(reply[2])  # bounded messages
                        self.errors += 1
                        break  # a pending error answered this probe: probe again
                    if reply[0] == "data" and reply[3] == struct.pack("<q", pid):
                        return
            except ConnectionClosed:
                self._reopen()
        raise AssertionError("the server never answered a probe")


def test_the_server_survives_thousands_of_hostile_frames(fuzz_server, remote_token, capsys):
    seed = int(os.environ.get("EMBER_FUZZ_SEED", random.SystemRandom().randrange(1 << 32)))
    with capsys.disabled():
        print(f"\nfuzz seed {seed} (EMBER_FUZZ_SEED={seed} replays it), {FRAMES} frames")
    rng = random.Random(seed)
    d = ember.device(fuzz_server.device(timeout=20))
    a = np.random.default_rng(seed).standard_normal((6, 5)).astype(np.float32)
    b = np.random.default_rng(seed + 1).standard_normal((5, 3)).astype(np.float32)
    ta, tb = ember.tensor(a, device=d), ember.tensor(b, device=d)

    def good() -> None:
        got = (ta @ tb).softmax(dim=-1).sum(dim=0).numpy()
        x = a.astype(np.float64) @ b.astype(np.float64)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        np.testing.assert_allclose(got, (e / e.sum(axis=-1, keepdims=True)).sum(axis=0),
                                   rtol=1e-5, atol=1e-6)

    probe = Probe(fuzz_server, remote_token)
    fuzzer = Fuzzer(rng, probe.table)
    start = time.perf_counter()
    for i in range(FRAMES):
        probe.send(fuzzer.frame())
        probe.settle()
        if i % 100 == 99:  # the fuzzer's ids freed, so that limits are not all it meets
            probe.send(pack(["batch", list(range(1, IDS + 1))]))
        if i % 1000 == 999:
            good()
        assert fuzz_server.proc.poll() is None, f"the server died at frame {i} (seed {seed})"
    took = time.perf_counter() - start
    probe.ws.close()
    good()
    with capsys.disabled():
        print(f"fuzz: {FRAMES} frames in {took:.1f} s, {probe.reconnects} connections closed "
              f"by the server, {probe.errors} error replies")
    assert probe.reconnects > FRAMES // 10 and probe.errors > FRAMES // 10  # the fuzz bites
    # every hostile frame was answered as designed: none reached the server's last-resort
    # handler, which logs a traceback and drops the connection
    proc = fuzz_server.proc
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(10) == 0
    assert proc.stderr is not None
    log = proc.stderr.read()
    assert "Traceback" not in log, log[-3000:]
