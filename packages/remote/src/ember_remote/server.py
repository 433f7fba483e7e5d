"""``ember-remote serve``: a WebSocket server that runs clients' tensor ops on its devices.

One thread per connection.  A connection's first message must authenticate (the token,
compared in constant time) within ``AUTH_TIMEOUT`` seconds and in at most ``AUTH_BYTES``
bytes; nothing else is read before.  Then it is a `Session` of its own until it closes, when
its tensors are dropped.  A message that cannot be decoded gets an error and the connection is
closed; any other bad record is an error reported at the client's next sync.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import threading
from collections.abc import Sequence
from typing import Any

import ember
from ember.backend import Device
from websockets.exceptions import ConnectionClosed
from websockets.sync.server import Server, ServerConnection, serve

from ._protocol import VERSION, ProtocolError, pack, unpack
from ._session import Limits, Session

__all__ = ["AUTH_BYTES", "AUTH_TIMEOUT", "RemoteServer"]

AUTH_TIMEOUT = 10.0
AUTH_BYTES = 4096
LOG = logging.getLogger("ember_remote")


class RemoteServer:
    """Serve ``devices`` (device strings; all available ones when empty) to clients holding
    ``token``.

    Examples
    --------
    >>> server = RemoteServer("127.0.0.1", 0, token="0123456789abcdef", devices=["cpu"])
    >>> server.port > 0
    True
    >>> server.close()
    """

    def __init__(self, host: str, port: int, *, token: str, devices: Sequence[str] = (),
                 limits: Limits | None = None, max_clients: int = 64,
                 keepalive: float = 10.0) -> None:
        if len(token) < 16:
            raise ValueError("the token must be at least 16 characters long (use e.g. "
                             "`python -c 'import secrets; print(secrets.token_hex(32))'`)")
        self.token = token.encode()
        self.devices = list(devices)
        self.limits = limits or Limits()
        self.max_clients = max_clients
        #: a new id per process: a client reconnecting to a restarted server sees it change
        self.server_id = secrets.token_hex(8)
        self.clients = 0
        self._lock = threading.Lock()
        self._server: Server = serve(
            self._handle, host, port, max_size=AUTH_BYTES, compression=None,
            ping_interval=keepalive, ping_timeout=keepalive, open_timeout=AUTH_TIMEOUT,
            close_timeout=2, logger=LOG)
        self.host, self.port = self._server.socket.getsockname()[:2]

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def close(self) -> None:
        self._server.shutdown()

    # -- one connection --------------------------------------------------------------------

    def _device(self, name: Any) -> Device:
        if not isinstance(name, str):
            raise ProtocolError("the device must be a string")
        allowed = self.devices
        if allowed and name not in allowed and str(ember.device(name)) not in allowed:
            raise ProtocolError(f"device {name!r} is not served here (served: "
                                f"{', '.join(allowed)})")
        dev = ember.device(name)
        if dev.tensor_type is not ember.Tensor:
            raise ProtocolError(
                f"device {name!r} keeps state in its tensors ({dev.tensor_type.__name__}), which "
                "cannot live on a server: put that decorator on the client "
                f"(autodiff<remote<HOST:PORT/{dev.base}>>)")
        return dev

    def _authenticate(self, conn: ServerConnection) -> Session | None:
        try:
            first = conn.recv(timeout=AUTH_TIMEOUT)
        except TimeoutError:
            conn.close(1008, "no authentication message in time")
            return None
        try:
            msg = unpack(first, max_bytes=AUTH_BYTES)  # type: ignore[arg-type]  # checked there
            if msg[0] != "auth" or len(msg) != 4:
                raise ProtocolError("the first message must be ['auth', version, token, device]")
            _, version, token, device = msg
            token_bytes = token.encode() if isinstance(token, str) else b""
            if not hmac.compare_digest(token_bytes, self.token):
                raise PermissionError("wrong token")
            if version != VERSION:
                raise ProtocolError(f"protocol version {version!r}, this server speaks "
                                    f"{VERSION}")
            dev = self._device(device)
        except (ProtocolError, PermissionError, ValueError, ember.DeviceUnavailableError) as exc:
            LOG.warning("ember-remote: refused %s: %s", conn.remote_address, exc)
            conn.send(pack(["refused", str(exc)]))
            conn.close(1008, "refused")
            return None
        backend = dev.backend
        from ember.ops import registry

        composites = [name for name, op in registry.items()
                      if op.composite and dev.implements(op)]
        table = sorted(registry)  # coded op records name an op by its position here
        info = {"device": str(dev), "dtypes": sorted(d.name for d in ember.backend.ALL_DTYPES
                                                     if backend.supports(d)),
                "composites": composites, "ops": table,
                "max_message": self.limits.max_message,
                "max_tensor": self.limits.max_tensor, "max_client": self.limits.max_client}
        conn.send(pack(["hello", self.server_id, info]))
        conn.protocol.max_message_size = self.limits.max_message
        return Session(dev, self.limits, table)

    def _handle(self, conn: ServerConnection) -> None:
        with self._lock:
            full = self.clients >= self.max_clients
            if not full:
                self.clients += 1
        if full:
            conn.close(1013, f"the server has {self.max_clients} clients, its limit")
            return
        session: Session | None = None
        try:
            session = self._authenticate(conn)
            if session is None:
                return
            for data in conn:
                try:
                    reply = session.handle(data)  # type: ignore[arg-type]  # checked there
                except ProtocolError as exc:  # undecodable: the stream cannot be trusted
                    conn.send(pack(["error", "ProtocolError", str(exc), ""]))
                    conn.close(1008, "malformed message")
                    return
                if reply is not None:
                    conn.send(reply)
        except ConnectionClosed:
            pass
        except Exception:  # never let one client take the server down
            LOG.exception("ember-remote: connection from %s failed", conn.remote_address)
        finally:
            if session is not None:
                session.close()
            with self._lock:
                self.clients -= 1
