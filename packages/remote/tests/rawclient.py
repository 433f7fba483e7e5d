"""A hand-driven protocol client for the tests: sends exactly the bytes it is given."""

from __future__ import annotations

from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from ember_remote._protocol import VERSION, pack, unpack


def open_raw(port: int, token: str | None, device: str = "cpu") -> tuple[ClientConnection, Any]:
    """A connection, authenticated with ``token`` unless it is None; and the server's answer."""
    ws = connect(f"ws://127.0.0.1:{port}/", open_timeout=10, compression=None, proxy=None,
                 max_size=None)
    ws.__enter__()
    if token is None:
        return ws, None
    ws.send(pack(["auth", VERSION, token, device]))
    return ws, unpack(ws.recv(timeout=10), max_bytes=1 << 30)  # type: ignore[arg-type]


def ask(ws: ClientConnection, *records: Any) -> list[Any]:
    """Send one batch (its last record a sync) and return the decoded answer."""
    ws.send(pack(["batch", list(records)]))
    return unpack(ws.recv(timeout=10), max_bytes=1 << 30)  # type: ignore[arg-type]


def answer_or_close(ws: ClientConnection, data: bytes) -> list[Any] | None:
    """Send raw bytes; the server's answer, or None when it closed the connection."""
    try:
        ws.send(data)
        return unpack(ws.recv(timeout=10), max_bytes=1 << 30)  # type: ignore[arg-type]
    except ConnectionClosed:
        return None


__all__ = ["answer_or_close", "ask", "open_raw"]
