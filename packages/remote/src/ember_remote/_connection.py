"""The client's side of one session: a WebSocket, the queue of records not yet sent, ids.

Records (ops, uploads, frees) are queued and sent in batches without waiting; only a sync
record (a read of data or of a shape, ``synchronize``) waits for an answer, and that answer
carries the first error any earlier record raised on the server.  When the connection drops,
every tensor of the session is lost: the next use raises `SessionLostError`.
"""

from __future__ import annotations

import itertools
import os
import ssl
import threading
import tomllib
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
from websockets.protocol import State
from websockets.sync.client import ClientConnection, connect

from ._protocol import VERSION, ProtocolError, pack, unpack

if TYPE_CHECKING:
    from ember.ops import Op

__all__ = ["Connection", "RemoteConnectionError", "RemoteError", "SessionLostError", "token_for"]

#: records queued before a batch is sent anyway (``EMBER_REMOTE_BATCH`` overrides); uploads
#: over FLUSH_BYTES in all go at once
FLUSH_RECORDS = int(os.environ.get("EMBER_REMOTE_BATCH", "1024"))
FLUSH_BYTES = 1 << 20
#: so that the server works while the client queues more, the queue also goes out once its
#: ops' results hold FLUSH_ELEMENTS elements in all (``EMBER_REMOTE_FLUSH_ELEMENTS``): a
#: stream of small ops goes in large batches, a stream of large ones early
FLUSH_ELEMENTS = int(os.environ.get("EMBER_REMOTE_FLUSH_ELEMENTS", str(1 << 18)))


class RemoteError(RuntimeError):
    """An op failed on the server in a way that has no ember error type of its own."""


class RemoteConnectionError(ConnectionError):
    """The server cannot be reached, refused the connection, or went away."""


class SessionLostError(RemoteConnectionError):
    """A tensor of a session that ended (the server restarted or the connection dropped)."""


def config_path() -> Path:
    """``$EMBER_REMOTE_CONFIG``, else ``~/.config/ember/remote.toml``."""
    env = os.environ.get("EMBER_REMOTE_CONFIG")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "ember" / "remote.toml"


def _server_config(address: str) -> tuple[dict[str, Any], dict[str, Any], Path]:
    """The config file's top level and its ``[servers."HOST:PORT"]`` table (empty dicts when
    there is no file)."""
    path = config_path()
    if not path.is_file():
        return {}, {}, path
    with path.open("rb") as f:
        try:
            config = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise RemoteConnectionError(f"cannot read {path}: {exc}") from None
    server = config.get("servers", {}).get(address, {})
    return config, server if isinstance(server, dict) else {}, path


def token_for(address: str) -> str:
    """The token for the server at ``address`` (``HOST:PORT``): ``$EMBER_REMOTE_TOKEN``, else
    the config file's ``[servers."HOST:PORT"] token``, else its top-level ``token``."""
    env = os.environ.get("EMBER_REMOTE_TOKEN")
    if env:
        return env.strip()
    config, server, path = _server_config(address)
    token = server.get("token", config.get("token"))
    if isinstance(token, str) and token:
        return token
    raise RemoteConnectionError(
        f"no token for the remote server {address}: set EMBER_REMOTE_TOKEN, or write it in "
        f"{path} as token = \"...\" (or under [servers.\"{address}\"])")


def tls_context(address: str) -> ssl.SSLContext:
    """How a ``wss://`` client checks the server at ``address``: the system's certificate
    authorities, or the PEM file ``$EMBER_REMOTE_CA``, else the config file's
    ``[servers."HOST:PORT"] ca``, else its top-level ``ca`` (a path relative to the config
    file's folder), e.g. a self-signed server certificate itself.  The host name (or IP
    address) must match the certificate either way."""
    ca: Any = os.environ.get("EMBER_REMOTE_CA")
    if not ca:
        config, server, path = _server_config(address)
        ca = server.get("ca", config.get("ca"))
        if isinstance(ca, str) and ca:
            ca = path.parent / Path(ca).expanduser()
        else:
            ca = None
    try:
        context = ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise RemoteConnectionError(f"cannot load the certificate authorities {ca} for "
                                    f"{address}: {exc}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


_ERRORS: dict[str, type[Exception]] = {}


def _error_types() -> dict[str, type[Exception]]:
    """Server error names raised as the same type on the client (anything else: RemoteError)."""
    if not _ERRORS:
        import ember

        for t in (ember.ShapeError, ember.DTypeError, ember.DivisionByZeroError, ValueError,
                  TypeError, IndexError, KeyError, NotImplementedError, ZeroDivisionError,
                  OverflowError, MemoryError, ProtocolError):
            _ERRORS[t.__name__] = t
        _ERRORS["OutOfMemoryError"] = MemoryError
    return _ERRORS


class Connection:
    """An authenticated session with one server, for one of its devices."""

    def __init__(self, address: str, host: str, port: int, inner: str, timeout: float,
                 tls: bool = False) -> None:
        self.address, self.inner, self.timeout = address, inner, timeout
        token = token_for(address)
        where = f"the remote server {address}"
        # a wss:// device never falls back to ws://: the token goes out only once the
        # server's certificate checked out
        context = tls_context(address) if tls else None
        url_host = f"[{host}]" if ":" in host else host
        try:
            # the keepalive (a ping every timeout/2, answered within timeout/2) is what finds a
            # dead or unreachable server while we wait; proxy=None: never a proxy from the env
            self.ws: ClientConnection = connect(
                f"{'wss' if tls else 'ws'}://{url_host}:{port}/", ssl=context,
                open_timeout=timeout, ping_interval=timeout / 2,
                ping_timeout=timeout / 2, close_timeout=1, max_size=None, compression=None,
                proxy=None)
            # entering it marks it as held for the session's life (websockets >= 17.1 warns
            # about a connection used without `with`; this one is closed by `close`)
            self.ws.__enter__()
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
            raise RemoteConnectionError(f"cannot connect to {where} within {timeout:g} s: "
                                        f"{type(exc).__name__}: {exc}") from None
        self.alive = True
        self.reason = ""
        self._lock = threading.RLock()
        try:
            self.ws.send(pack(["auth", VERSION, token, inner]))
            reply = unpack(self.ws.recv(timeout=timeout), max_bytes=1 << 20)  # type: ignore[arg-type]  # binary
        except (ConnectionClosed, TimeoutError, ProtocolError) as exc:
            self.close()
            raise RemoteConnectionError(f"{where} did not accept the connection: "
                                        f"{type(exc).__name__}: {exc}") from None
        if reply[0] == "refused":
            self.close()
            raise RemoteConnectionError(f"{where} refused the connection: {reply[1]}")
        if reply[0] != "hello" or len(reply) != 3:
            self.close()
            raise RemoteConnectionError(f"{where} answered {reply[0]!r}, not hello")
        self.server_id: str = reply[1]
        self.info: dict[str, Any] = reply[2]
        from ember.ops import registry

        #: op -> its code in the server's op table (an op missing there is sent by name)
        self.codes: dict[Op, int] = {registry[name]: i for i, name in
                                     enumerate(self.info.get("ops", ())) if name in registry}
        self.records: deque[Any] = deque()
        self.flush_records = FLUSH_RECORDS
        #: elements of the queued ops' results (those counted: see `RemoteBackend.dispatch`)
        self.elements = 0
        self.pending_bytes = 0
        self._ids = itertools.count(1)
        self.new_id = self._ids.__next__

    # -- sending ---------------------------------------------------------------------------

    def lost(self) -> SessionLostError:
        return SessionLostError(
            f"session lost: this tensor lived in a session with the remote server "
            f"{self.address} that ended ({self.reason}); its data is gone (the server "
            "restarted or the connection dropped): create it again")

    def _dead(self, exc: BaseException) -> RemoteConnectionError:
        self.alive = False
        self.reason = f"{type(exc).__name__}: {exc}"
        self.close()
        return RemoteConnectionError(
            f"the remote server {self.address} is unreachable or went away "
            f"({self.reason}); waited at most {self.timeout:g} s (EMBER_REMOTE_TIMEOUT or "
            "the device option timeout= sets it); its tensors are lost")

    def check_open(self) -> None:
        """Raise as a sync would if the connection is known to have closed (a read answered
        from the client's copy of the data still finds a server that went away)."""
        if not self.alive:
            raise self.lost()
        if self.ws.state is not State.OPEN:
            raise self._dead(self.ws.close_exc or ConnectionError("the connection closed"))

    def flush(self, sync: tuple[Any, ...] | None = None) -> list[Any] | None:
        """Send every queued record (and ``sync`` last); wait for the answer to ``sync``."""
        if not self.alive:
            raise self.lost()
        with self._lock:
            q = self.records
            batch = [q.popleft() for _ in range(len(q))]
            self.pending_bytes = self.elements = 0
            if sync is not None:
                batch.append(sync)
            if not batch:
                return None
            try:
                self.ws.send(pack(["batch", batch]))
                if sync is None:
                    return None
                while True:
                    try:
                        data = self.ws.recv(timeout=self.timeout)
                        break
                    except TimeoutError:
                        # a long op: the keepalive pings still get answers, so keep waiting;
                        # a dead server closes the connection and recv raises instead
                        continue
            except (ConnectionClosed, OSError) as exc:
                raise self._dead(exc) from None
        reply = unpack(data, max_bytes=1 << 62)  # type: ignore[arg-type]  # binary frames only
        if reply[0] == "error":
            _, kind, message, op = reply
            error = _error_types().get(kind, RemoteError)
            raise error(f"remote op {op!r} failed on {self.address}/{self.inner}: {message}")
        return reply

    def free(self, tid: int) -> None:
        """A tensor was dropped: its id goes with the next batch (called from ``__del__``)."""
        if self.alive:
            self.records.append(tid)

    def close(self) -> None:
        try:
            self.ws.close()
        except Exception:  # closing a connection that is already broken
            pass
