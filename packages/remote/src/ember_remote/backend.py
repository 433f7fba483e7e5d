"""``remote<HOST:PORT/INNER>``: a device whose ops run on another machine's ``INNER`` device.

Seen from the client the device is a leaf (its payloads are `RemoteHandle` objects, ids in a
session with the server), so it stacks under any decorator: ``autodiff<remote<.../cpu>>``
keeps the graph on the client and runs every op, forward and backward, on the server.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from math import prod
from typing import TYPE_CHECKING, Any

import numpy as np
from ember import ops
from ember.backend import ALL_DTYPES, Backend, DType, ShapeError, numpy_dtype
from ember.ops import broadcast_rule as _broadcast

from ._connection import FLUSH_BYTES, FLUSH_ELEMENTS, Connection, RemoteConnectionError
from ._shapes import RULES, Shape

if TYPE_CHECKING:
    from ember import Tensor
    from ember.ops import Op

__all__ = ["DEFAULT_TIMEOUT", "RemoteBackend", "RemoteHandle", "parse_target"]

DEFAULT_TIMEOUT = 10.0
_FULL = ops.creation.full
_NO_PARAMS: dict[str, Any] = {}
#: uploads up to this many bytes keep a copy on the client: reading one back is no round trip
HOST_COPY = 64 << 10


class RemoteHandle:
    """A tensor's payload on a remote device: its id in a session, and its shape."""

    __slots__ = ("__weakref__", "conn", "host", "id", "recipe", "shape")

    def __init__(self, conn: Connection, tid: int, shape: Shape,
                 recipe: tuple[str, dict[str, Any]] | None = None,
                 host: bytes | None = None) -> None:
        self.conn, self.id, self.shape = conn, tid, shape
        #: ``(op name, params)`` of a constant (``full``), which a new session can make again
        self.recipe = recipe
        #: the bytes of a small tensor this client uploaded: reading it needs no round trip
        self.host = host

    def __del__(self) -> None:
        conn = self.conn
        if conn.alive:
            conn.records.append(self.id)

    def __repr__(self) -> str:
        return f"RemoteHandle({self.id} on {self.conn.address})"


class PendingShapeHandle(RemoteHandle):
    """The payload of a result whose shape no rule gave: asked of the server (a round trip)
    when it is first read."""

    __slots__ = ("_shape",)
    _shape: Shape | None

    def __init__(self, conn: Connection, tid: int) -> None:
        super().__init__(conn, tid, None)  # type: ignore[arg-type]  # the setter keeps None

    @property
    def shape(self) -> Shape:
        s = self._shape
        if s is None:
            reply = self.conn.flush(("shape", self.id))
            s = self._shape = tuple(reply[1])  # type: ignore[index]  # a shape reply
        return s

    @shape.setter
    def shape(self, value: Shape | None) -> None:
        self._shape = value


def _handle(conn: Connection, tid: int, shape: Shape | None) -> RemoteHandle:
    return RemoteHandle(conn, tid, shape) if shape is not None else PendingShapeHandle(conn, tid)


_new = object.__new__


def parse_target(text: str) -> tuple[str, int, str]:
    """``[ws://|wss://]HOST:PORT/INNER`` (``[v6]:PORT/INNER``) -> ``(host, port, inner)``.

    Examples
    --------
    >>> parse_target("127.0.0.1:7878/cuda:0"), parse_target("wss://gpu-box:7878/cpu")
    (('127.0.0.1', 7878, 'cuda:0'), ('gpu-box', 7878, 'cpu'))
    """
    address, slash, inner = text.removeprefix("wss://").removeprefix("ws://").partition("/")
    host, colon, port = address.rpartition(":")
    if not slash or not colon or not host or not inner or not port.isdigit() \
            or not 0 < int(port) < 65536:
        raise ValueError(f"malformed remote device {text!r}: expected remote<HOST:PORT/INNER>, "
                         "e.g. remote<127.0.0.1:7878/cpu> (remote<wss://HOST:PORT/INNER> for "
                         "TLS)")
    return host.strip("[]"), int(port), inner


class RemoteBackend(Backend):
    """The client side of ``remote<HOST:PORT/INNER>``.

    Options: ``timeout`` (seconds, default ``$EMBER_REMOTE_TIMEOUT`` or 10): how long the
    client waits to connect, and for a dead server to be noticed.  A target starting with
    ``wss://`` connects over TLS (see `tls_context` for the certificate check).

    Examples
    --------
    >>> d = ember.device(f"remote<127.0.0.1:{port}/cpu>")  # doctest: +SKIP
    >>> (ember.arange(3.0, device=d) * 2).tolist()         # doctest: +SKIP
    [0.0, 2.0, 4.0]
    """

    name = "remote"

    def __init__(self, target: str, timeout: Any = None) -> None:
        super().__init__()
        host, port, inner = parse_target(target)
        if "autodiff<" in inner:
            raise ValueError(
                f"remote<{target}> is not supported: autodiff keeps its graph in the tensors, "
                f"which live on the client; write autodiff<remote<{host}:{port}/"
                f"{inner.replace('autodiff<', '').rstrip('>')}>> (the graph is kept here, "
                "every op runs on the server)")
        self.address = f"{host}:{port}"
        self.host, self.port, self.inner_name = host, port, inner
        self.tls = target.startswith("wss://")
        if timeout is None:
            timeout = os.environ.get("EMBER_REMOTE_TIMEOUT", DEFAULT_TIMEOUT)
        try:
            self.timeout = float(timeout)
        except ValueError:
            raise ValueError(f"remote timeout must be a number of seconds, got {timeout!r}")\
                from None
        if not self.timeout > 0:
            raise ValueError(f"remote timeout must be positive, got {timeout!r}")
        self._conn: Connection | None = None
        self._composites: frozenset[str] = frozenset()
        self.connection()  # fail now, with the reason, if the server cannot be reached

    # -- the session -------------------------------------------------------------------------

    def connection(self) -> Connection:
        """The live session; a new one if the last one ended (its tensors stay lost)."""
        conn = self._conn
        if conn is None or not conn.alive:
            conn = self._conn = Connection(self.address, self.host, self.port,
                                           self.inner_name, self.timeout, self.tls)
            by_name = {d.name: d for d in ALL_DTYPES}
            self.dtypes = frozenset(by_name[n] for n in conn.info["dtypes"] if n in by_name)
            self._composites = frozenset(conn.info["composites"])
        return conn

    def _session_of(self, args: Sequence[Tensor]) -> Connection:
        if not args:
            return self.connection()
        conn: Connection = args[0].payload.conn
        if conn.alive:
            for a in args:
                if a.payload.conn is not conn:
                    return self._revive(args)
            return conn
        return self._revive(args)

    def _revive(self, args: Sequence[Tensor]) -> Connection:
        """Inputs from a session that ended: "session lost", except for constants (core
        caches small ones per device), which are made again in the live session."""
        for a in args:
            h: RemoteHandle = a.payload
            if not h.conn.alive and h.recipe is None:
                raise h.conn.lost()
        conn = self.connection()
        for a in args:
            h = a.payload
            if h.conn is not conn:
                name, params = h.recipe  # type: ignore[misc]  # checked above
                h.conn, h.id = conn, conn.new_id()
                conn.records.append(("op", name, (), params, (h.id,)))
        return conn

    def implements(self, op: Op) -> bool:
        """A composite runs as one remote op where the server's device has a kernel for it and
        its result shapes are known here (so that it pipelines)."""
        return op.name in self._composites and op in RULES

    # -- ops -------------------------------------------------------------------------------------

    def dispatch(self, op: Op, args: Sequence[Tensor], params: dict[str, Any]) -> Any:
        conn = self._session_of(args)
        rule = RULES.get(op)
        shapes: Any = None
        if rule is not None:
            try:
                shapes = rule([a.payload.shape for a in args], params)
            except ShapeError:
                raise  # the op's own rule refuses it: here, at the call, as on a local device
            except (ValueError, KeyError, TypeError):
                shapes = None  # the server reports what is wrong, at the next sync
        n = op.outputs
        if n == -1:
            if shapes is None:
                raise NotImplementedError(f"{op.name} on {self.device}: its number of results "
                                          "is not known without a shape rule")
            n = len(shapes)
        records = conn.records
        device = self.device
        code = conn.codes.get(op)
        if n == 1 and op.outputs == 1:  # most ops: spelled out, no generators
            tid = conn.new_id()
            if code is None:
                records.append(("op", op.name, tuple([a.payload.id for a in args]), params,
                                (tid,)))
            elif params:
                records.append((code, (tid,), tuple([a.payload.id for a in args]), params))
            elif len(args) == 1:
                records.append((code, tid, args[0].payload.id))
            elif len(args) == 2:
                records.append((code, tid, args[0].payload.id, args[1].payload.id))
            else:
                records.append((code, tid, *[a.payload.id for a in args]))
            if shapes is not None:  # what the server will have to work on, roughly
                conn.elements += prod(shapes)
                if conn.elements >= FLUSH_ELEMENTS:
                    conn.flush()
            if len(records) >= conn.flush_records:
                conn.flush()
            dtype = args[0].dtype if op.result == "same" else op.result_rule(args, params)
            if shapes is None:
                h: RemoteHandle = PendingShapeHandle(conn, tid)
            else:  # RemoteHandle(...) spelled out: no call of __init__
                h = _new(RemoteHandle)
                h.conn, h.id, h.shape, h.host = conn, tid, shapes, None
                h.recipe = (op.name, params) if op is _FULL else None
            return device.tensor_type.from_payload(
                h, device, dtype)  # type: ignore[arg-type]  # one output: one dtype
        ids = tuple([conn.new_id() for _ in range(n)])
        ins = tuple([a.payload.id for a in args])
        records.append(("op", op.name, ins, params, ids) if code is None
                       else (code, ids, ins, params))
        if len(records) >= conn.flush_records:
            conn.flush()
        make = device.tensor_type.from_payload
        dtypes: Any = op.result_rule(args, params)
        if shapes is None:
            shapes = [None] * n
        return tuple(make(_handle(conn, i, s), device, d)
                     for i, s, d in zip(ids, shapes, dtypes, strict=True))

    def dispatch_binary(self, op: Op, a: Tensor, b: Tensor) -> Tensor | None:
        """Core's fast path of eager binary ops (two float tensors of this device, one dtype,
        broadcasting checked): one coded record; ``None`` sends core to `dispatch`."""
        ha: RemoteHandle = a.payload
        hb: RemoteHandle = b.payload
        conn = ha.conn
        code = conn.codes.get(op)
        if hb.conn is not conn or code is None or not conn.alive:
            return None
        shape = ha.shape
        if hb.shape != shape:
            shape = _broadcast([shape, hb.shape], _NO_PARAMS)
        tid = conn.new_id()
        records = conn.records
        records.append((code, tid, ha.id, hb.id))
        if len(records) >= conn.flush_records:
            conn.flush()
        h = _new(RemoteHandle)  # RemoteHandle(...) spelled out: no call of __init__
        h.conn, h.id, h.shape, h.recipe, h.host = conn, tid, shape, None, None
        device = self.device
        return device.tensor_type.from_payload(
            h, device, a.dtype if op.result == "same" else op.result_rule(  # type: ignore[arg-type]  # one output: one dtype
                (a, b), _NO_PARAMS))

    # -- data movement ---------------------------------------------------------------------------

    def from_numpy(self, array: np.ndarray, dtype: DType) -> RemoteHandle:
        conn = self.connection()
        data = np.ascontiguousarray(array).tobytes()
        limit = conn.info["max_message"]
        if len(data) + 1024 > limit:
            raise ValueError(f"a tensor of {len(data)} bytes is over the message limit of the "
                             f"remote server {self.address} ({limit} bytes, its "
                             "--max-message-mb)")
        tid = conn.new_id()
        conn.records.append(("put", tid, dtype.name, array.shape, data))
        conn.pending_bytes += len(data)
        if conn.pending_bytes >= FLUSH_BYTES or len(conn.records) >= conn.flush_records:
            conn.flush()
        return RemoteHandle(conn, tid, tuple(array.shape),
                            host=data if len(data) <= HOST_COPY else None)

    def to_numpy(self, payload: RemoteHandle, dtype: DType) -> np.ndarray:
        conn = payload.conn
        if not conn.alive:
            raise conn.lost()
        if payload.host is not None:  # data this client sent: tensors never change
            conn.check_open()
            return np.frombuffer(payload.host, dtype=numpy_dtype(dtype)).reshape(payload.shape)
        reply = conn.flush(("get", payload.id))
        _, dname, shape, data = reply  # type: ignore[misc]  # a data reply
        if dname != dtype.name:
            raise RemoteConnectionError(f"the server sent {dname} for a {dtype.name} tensor")
        return np.frombuffer(data, dtype=numpy_dtype(dtype)).reshape(shape)

    def synchronize(self) -> None:
        conn = self._conn
        if conn is not None and conn.alive:
            conn.flush(("sync",))

    def memory_stats(self) -> dict[str, int]:
        """What this client holds on the server: ``bytes`` and ``tensors``."""
        reply = self.connection().flush(("sync",))
        return dict(reply[1])  # type: ignore[index]  # an ok reply
