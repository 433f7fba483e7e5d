"""``ember-remote serve``: a WebSocket server that runs clients' tensor ops on its devices.

One thread per connection.  A connection is *pending* from its accept until its token is
checked: at most ``max_pending`` of them (a new one pushes the oldest out, so idle peers
cannot hold the door shut), each with ``auth_timeout`` seconds in all for the TLS and
WebSocket handshakes and its first message, which must authenticate (the token, compared in
constant time) in at most ``AUTH_BYTES`` bytes; nothing else is read before.  A wrong token
makes its peer's address wait (`Backoff`) before its next token is even looked at.  Then it
takes one of ``max_clients`` slots and is a `Session` of its own until it closes, when its
tensors are dropped.  The device it asks for is looked up by its text in a finite allow-list
(`AllowList`): nothing a client names is built, so a client cannot make the server connect
anywhere, start threads or grow core's device cache.  Running out of file descriptors refuses
new connections for a moment; it never stops the server.
"""

from __future__ import annotations

import errno
import hmac
import ipaddress
import itertools
import logging
import os
import secrets
import selectors
import socket
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import ember
from ember.backend import Device
from websockets.exceptions import ConnectionClosed
from websockets.sync.server import Server, ServerConnection, serve

from ._devices import AllowList
from ._protocol import VERSION, ProtocolError, pack, unpack
from ._session import Limits, Session

__all__ = ["AUTH_BYTES", "AUTH_TIMEOUT", "MAX_PENDING", "Backoff", "RemoteServer"]

#: seconds a connection has, from its accept, to finish the handshakes and authenticate
AUTH_TIMEOUT = 5.0
AUTH_BYTES = 4096
#: connections not yet authenticated, at most (their own slots: never a client's)
MAX_PENDING = 16
#: after a wrong token, its peer waits BACKOFF seconds, doubled per wrong token in a row, at
#: most BACKOFF_CAP, before a token of it is looked at again
BACKOFF = 1.0
BACKOFF_CAP = 60.0
#: accept errors that mean "out of descriptors or memory for now", not "the socket closed"
_EXHAUSTED = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
LOG = logging.getLogger("ember_remote")
_LOCAL = threading.local()


class Backoff:
    """Per peer address (an IPv6 one by its /64), how long until its next token is checked.

    Each wrong token in a row doubles the wait, from ``base`` up to ``cap`` seconds; a right
    token clears it, and a peer quiet for ``cap`` seconds after its wait is forgotten.  At most
    ``peers`` addresses are remembered (the oldest are dropped first).

    Examples
    --------
    >>> b = Backoff(base=1.0, cap=60.0)
    >>> b.failed("10.0.0.2", now=0.0), b.failed("10.0.0.2", now=1.0), b.wait("10.0.0.2", now=2.5)
    (1.0, 2.0, 0.5)
    """

    def __init__(self, base: float = BACKOFF, cap: float = BACKOFF_CAP,
                 peers: int = 4096) -> None:
        self.base, self.cap, self.peers = base, cap, peers
        #: peer -> (wrong tokens in a row, end of its wait)
        self._peers: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(host: str) -> str:
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            return host
        if ip.version == 6:
            return str(ipaddress.ip_network(f"{ip}/64", strict=False))
        return str(ip)

    def wait(self, peer: str, now: float | None = None) -> float:
        """Seconds until a token from ``peer`` is looked at again (0: now)."""
        if self.base <= 0:
            return 0.0
        entry = self._peers.get(self.key(peer))
        if entry is None:
            return 0.0
        return max(0.0, entry[1] - (time.monotonic() if now is None else now))

    def failed(self, peer: str, now: float | None = None) -> float:
        """A wrong token from ``peer``: its new wait."""
        if self.base <= 0:
            return 0.0
        now = time.monotonic() if now is None else now
        key = self.key(peer)
        with self._lock:
            count, until = self._peers.pop(key, (0, now))
            if now - until > self.cap:
                count = 0
            wait = min(self.cap, self.base * 2.0 ** min(count, 64))
            self._peers[key] = (count + 1, now + wait)
            while len(self._peers) > self.peers:
                self._peers.popitem(last=False)
        return wait

    def succeeded(self, peer: str) -> None:
        with self._lock:
            self._peers.pop(self.key(peer), None)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class RemoteServer:
    """Serve ``devices`` (device strings; by default every available device and ``fusion<>``
    around it, see `AllowList`) to clients holding ``token``.

    ``ssl_context``, when given, makes it a TLS (``wss://``) server.

    Examples
    --------
    >>> server = RemoteServer("127.0.0.1", 0, token="0123456789abcdef", devices=["cpu"])
    >>> server.port > 0
    True
    >>> server.close()
    """

    def __init__(self, host: str, port: int, *, token: str, devices: Sequence[str] = (),
                 limits: Limits | None = None, max_clients: int = 64,
                 keepalive: float = 10.0, max_pending: int = MAX_PENDING,
                 auth_timeout: float = AUTH_TIMEOUT, backoff: Backoff | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        if len(token) < 16:
            raise ValueError("the token must be at least 16 characters long (use e.g. "
                             "`python -c 'import secrets; print(secrets.token_hex(32))'`)")
        if max_pending < 1 or max_clients < 1 or not auth_timeout > 0:
            raise ValueError("max_pending and max_clients must be >= 1 and auth_timeout > 0")
        self.token = token.encode()
        self.allowed = AllowList(devices)
        self.devices = list(self.allowed.served.values())
        self.limits = limits or Limits()
        self.max_clients = max_clients
        self.max_pending = max_pending
        self.auth_timeout = auth_timeout
        self.backoff = backoff or Backoff()
        #: a new id per process: a client reconnecting to a restarted server sees it change
        self.server_id = secrets.token_hex(8)
        self.clients = 0
        self._lock = threading.Lock()
        #: ticket -> socket of each connection whose token is not checked yet, oldest first
        self._pending: OrderedDict[int, socket.socket] = OrderedDict()
        self._tickets = itertools.count()
        self._server: Server = serve(
            self._handle, host, port, max_size=AUTH_BYTES, compression=None,
            ping_interval=keepalive, ping_timeout=keepalive, open_timeout=auth_timeout,
            close_timeout=2, logger=LOG, ssl=ssl_context,
            # frames received and not yet handled, per connection: at most two messages
            # (each up to the message limit) wait in memory; beyond that the socket is
            # not read, and TCP holds the client back
            max_queue=(2, 1))
        self.host, self.port = self._server.socket.getsockname()[:2]
        self.loopback = _is_loopback(host)
        #: a descriptor held back so that, out of descriptors, one accept can still succeed
        #: (and close what it accepted): the backlog drains instead of spinning
        self._spare: int | None = os.open(os.devnull, os.O_RDONLY)
        self._exhausted_at = 0.0
        self._serving = False

    @property
    def pending(self) -> int:
        """Connections whose token is not checked yet."""
        return len(self._pending)

    # -- accepting -------------------------------------------------------------------------

    def serve_forever(self) -> None:
        """Accept connections until `close` (websockets' own loop stops at the first failed
        accept, so running out of descriptors would end the server: this one goes on)."""
        server = self._server
        with self._lock:
            if server.socket_closed.is_set():  # close() came first
                return
            self._serving = True
        poller = selectors.DefaultSelector()
        poller.register(server.shutdown_watcher, selectors.EVENT_READ)
        try:
            try:
                poller.register(server.socket, selectors.EVENT_READ)
            except (OSError, ValueError):  # close() ran first
                return
            while True:
                poller.select()
                if server.socket.fileno() == -1:
                    break
                try:
                    sock, addr = server.socket.accept()
                except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                    continue
                except OSError as exc:
                    if server.socket.fileno() == -1 or exc.errno not in _EXHAUSTED:
                        if exc.errno == errno.EBADF:
                            break
                        LOG.warning("ember-remote: accept failed: %s", exc)
                        continue
                    if self._shed(poller):
                        break
                    continue
                self._start(sock, addr)
        finally:
            poller.close()
            server.socket_closed.set()
            server.shutdown_watcher.close()

    def _shed(self, poller: selectors.BaseSelector) -> bool:
        """Out of descriptors: refuse the oldest waiting connection by accepting it with the
        spare descriptor and closing it at once (so the backlog drains instead of the loop
        spinning on it); with no spare to be had, stop listening for a moment.  True when the
        server was closed meanwhile."""
        now = time.monotonic()
        if now - self._exhausted_at > 10:
            LOG.warning("ember-remote: out of file descriptors (%d pending, %d clients): "
                        "refusing new connections until some close", self.pending,
                        self.clients)
        self._exhausted_at = now
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None
            try:
                sock, _ = self._server.socket.accept()
                sock.close()
            except OSError:
                pass
            try:
                self._spare = os.open(os.devnull, os.O_RDONLY)
                return False
            except OSError:
                self._spare = None
        poller.unregister(self._server.socket)
        closed = bool(poller.select(timeout=0.05))
        try:
            poller.register(self._server.socket, selectors.EVENT_READ)
        except (OSError, ValueError):  # close() ran meanwhile
            closed = True
        return closed

    def _start(self, sock: socket.socket, addr: Any) -> None:
        with self._lock:
            evicted = None
            if len(self._pending) >= self.max_pending:
                _, evicted = self._pending.popitem(last=False)
            ticket = next(self._tickets)
            self._pending[ticket] = sock
        if evicted is not None:  # its handler thread sees the end of its stream and stops
            try:
                socket.socket.shutdown(evicted, socket.SHUT_RDWR)  # the raw socket, TLS or not
            except OSError:
                pass
        server = self._server
        thread = threading.Thread(target=self._run, args=(sock, addr, ticket),
                                  name="ember-remote-connection")
        with server.lock:
            server.handler_threads.add(thread)
        try:
            thread.start()
        except RuntimeError:  # no thread to be had: refuse this one
            with server.lock:
                server.handler_threads.discard(thread)
            self._release(ticket)
            sock.close()

    def _run(self, sock: socket.socket, addr: Any, ticket: int) -> None:
        _LOCAL.ticket = ticket
        _LOCAL.deadline = time.monotonic() + self.auth_timeout
        try:
            self._server.handler(sock, addr)
        finally:
            self._release(ticket)

    def _release(self, ticket: int) -> None:
        with self._lock:
            self._pending.pop(ticket, None)

    def close(self) -> None:
        """Stop accepting, close every connection (their sessions are dropped) and wait for
        their threads."""
        with self._lock:
            unserved = not self._serving and not self._server.socket_closed.is_set()
            if unserved:  # websockets' shutdown waits for a serve_forever that never ran
                self._server.socket_closed.set()
        self._server.shutdown()
        with self._lock:
            if unserved:
                self._server.shutdown_watcher.close()
            if self._spare is not None:
                os.close(self._spare)
                self._spare = None

    # -- one connection --------------------------------------------------------------------

    def _device_named(self, name: Any) -> Device:
        entry = self.allowed.resolve(name)  # text only: nothing the client named is built
        dev = ember.device(entry)
        if dev.tensor_type is not ember.Tensor:
            raise PermissionError(
                f"device {name!r} keeps state in its tensors ({dev.tensor_type.__name__}), "
                "which cannot live on a server: put that decorator on the client "
                f"(autodiff<remote<HOST:PORT/{dev.base}>>)")
        return dev

    def _refuse(self, conn: ServerConnection, why: str, log: bool = True) -> None:
        if log:
            LOG.warning("ember-remote: refused %s: %s", conn.remote_address, why)
        try:
            conn.send(pack(["refused", why]))
        finally:
            conn.close(1008, "refused")

    def _authenticate(self, conn: ServerConnection) -> Session | None:
        peer = str(conn.remote_address[0]) if conn.remote_address else ""
        try:
            first = conn.recv(timeout=max(0.0, _LOCAL.deadline - time.monotonic()))
        except TimeoutError:
            conn.close(1008, "no authentication message in time")
            return None
        try:
            msg = unpack(first, max_bytes=AUTH_BYTES)  # type: ignore[arg-type]  # checked there
            if msg[0] != "auth" or len(msg) != 4:
                raise ProtocolError("the first message must be ['auth', version, token, device]")
            _, version, token, device = msg
            wait = self.backoff.wait(peer)
            if wait > 0:  # the token is not even looked at: guessing gains nothing
                self._refuse(conn, f"too many wrong tokens from {peer}: try again in "
                                   f"{wait:.1f} s", log=False)
                return None
            token_bytes = token.encode() if isinstance(token, str) else b""
            if not hmac.compare_digest(token_bytes, self.token):
                wait = self.backoff.failed(peer)
                raise PermissionError("wrong token" + (f" (the next try from {peer} is "
                                                       f"looked at in {wait:g} s)" if wait
                                                       else ""))
            self.backoff.succeeded(peer)
            if version != VERSION:
                raise ProtocolError(f"protocol version {version!r}, this server speaks "
                                    f"{VERSION}")
            dev = self._device_named(device)
            with self._lock:  # the token is good: from a pending slot to a client's
                if self._pending.pop(_LOCAL.ticket, None) is None:
                    raise ConnectionError("pushed out by newer connections")
                if self.clients >= self.max_clients:
                    raise PermissionError(f"the server has {self.max_clients} clients, its "
                                          "limit (--max-clients)")
                self.clients += 1
                _LOCAL.client = True
        except (ProtocolError, PermissionError, ConnectionError, ValueError,
                ember.DeviceUnavailableError) as exc:
            self._refuse(conn, str(exc))
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
        _LOCAL.client = False
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
            if _LOCAL.client:
                with self._lock:
                    self.clients -= 1
