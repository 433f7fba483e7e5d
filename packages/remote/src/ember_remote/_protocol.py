"""The wire format: one msgpack array per WebSocket message, raw bytes for tensor data.

No pickle anywhere: every message is a msgpack array whose first item names its kind, and the
only non-msgpack value is an ember dtype (extension type 1: its name).  Tensor data travels as
msgpack ``bin`` (the array's C-order bytes), read back with ``numpy.frombuffer`` after checking
that its length is the shape's elements times the dtype's item size.

Client to server
    ``["auth", VERSION, token, device]`` - the first message of a connection, nothing else is
    read before it.  The server answers ``["hello", server_id, info]`` or ``["refused", why]``;
    ``info["ops"]`` is the op table: the names of the server's ops, whose positions are the
    codes of coded op records.  The client chooses every result id itself.
    ``["batch", records]`` - records run in order; each is one of
        ``[code, out_id, *arg_ids]``                 run op number ``code`` of the hello's op
                                                      table: no params, one result (most ops)
        ``[code, out_ids, arg_ids, params]``         run op number ``code``, any op
        ``id``                                        the client dropped tensor ``id``
        ``["op", name, arg_ids, params, out_ids]``   run the op named ``name``
        ``["put", id, dtype, shape, data]``          a host array becomes tensor ``id``
        ``["free", ids]``                             the client dropped these tensors
        ``["get", id]``       (sync) reply ``["data", dtype, shape, data]``
        ``["shape", id]``     (sync) reply ``["shape", shape]``
        ``["sync"]``          (sync) reply ``["ok", stats]``
    A batch ends with at most one sync record, whose reply is the batch's only answer.

Server to client
    the reply to a sync record, or ``["error", type_name, message, op_name]`` for the first op
    that failed since the last sync (or for the sync record itself).
"""

from __future__ import annotations

import threading
from typing import Any

import msgpack  # type: ignore[import-untyped]  # msgpack ships no type information
from ember import DType
from ember.backend import ALL_DTYPES

__all__ = ["DTYPE_EXT", "MAX_ITEMS", "VERSION", "ProtocolError", "dtype_named", "pack", "unpack"]

#: bumped whenever the schema changes; client and server must agree
VERSION = 2
DTYPE_EXT = 1
_BY_NAME = {d.name: d for d in ALL_DTYPES}


class ProtocolError(ValueError):
    """A message that does not follow the schema (the server answers it, never crashes)."""


def dtype_named(name: Any) -> DType:
    d = _BY_NAME.get(name) if isinstance(name, str) else None
    if d is None:
        shown = (repr(name[:40]) + ("..." if len(name) > 40 else "") if isinstance(name, str)
                 else f"a {type(name).__name__}")
        raise ProtocolError(f"unknown dtype {shown} (known: {', '.join(_BY_NAME)})")
    return d


def _default(value: Any) -> Any:
    if isinstance(value, DType):
        return msgpack.ExtType(DTYPE_EXT, value.name.encode())
    # HostFloat / HostInt (ember.compile's host numbers) and numpy scalars travel as numbers
    if hasattr(value, "__float__") and not isinstance(value, (str, bytes)):
        return int(value) if hasattr(value, "__index__") else float(value)
    raise TypeError(f"ember_remote cannot send a parameter of type {type(value).__name__}: "
                    f"{value!r}")


def _ext_hook(code: int, data: bytes) -> Any:
    if code != DTYPE_EXT:
        raise ProtocolError(f"unknown msgpack extension type {code}")
    try:
        return dtype_named(data.decode())
    except UnicodeDecodeError:
        raise ProtocolError("a dtype name that is not text") from None


#: a packer per thread: a Packer keeps its buffer between calls, and ``_default`` (Python)
#: can let another thread in while a message is half packed
_LOCAL = threading.local()


def pack(message: Any) -> bytes:
    """The bytes of one message."""
    try:
        packer = _LOCAL.packer
    except AttributeError:
        packer = _LOCAL.packer = msgpack.Packer(default=_default, use_bin_type=True)
    return packer.pack(message)  # type: ignore[no-any-return]  # msgpack is untyped


#: a message up to this size decodes without counting its items: even one of nothing but
#: empty maps (64 bytes of objects per byte) stays under 8 MiB
_UNCOUNTED = 128 << 10
#: items (array elements and map entries, containers included) one message may decode to
MAX_ITEMS = 1 << 18


class _Count:
    """A msgpack hook that counts the items decoded so far and stops at the limit."""

    __slots__ = ("left",)

    def __init__(self, limit: int) -> None:
        self.left = limit

    def __call__(self, obj: Any) -> Any:
        self.left -= len(obj) + 1
        if self.left < 0:
            raise ProtocolError("the message holds more items than the server's limit")
        return obj


def unpack(data: bytes, *, max_bytes: int, max_items: int = MAX_ITEMS) -> list[Any]:
    """One message, as tuples (so params like ``shape`` arrive as tuples); a `ProtocolError`
    for anything that is not a well-formed msgpack array starting with a kind.

    Decoding is linear in the message's size and bounded: no array holds more than
    ``max_items`` items, a message longer than 128 KiB holds at most ``max_items`` items in all
    (arrays and maps count their items and themselves; a Python object costs up to 64 times
    its encoded size), and nesting stops at msgpack's own depth limit (a `ProtocolError`)."""
    if not isinstance(data, bytes):
        raise ProtocolError("expected a binary message, got text")
    if len(data) > max_bytes:
        raise ProtocolError(f"message of {len(data)} bytes is over the limit of {max_bytes}")
    hooks: dict[str, Any] = {}
    if len(data) > _UNCOUNTED:
        count = _Count(max_items)
        hooks = {"list_hook": count, "object_hook": count}
    try:
        # strict limits: a hostile length prefix cannot make the unpacker allocate beyond them
        msg = msgpack.unpackb(data, use_list=False, raw=False, ext_hook=_ext_hook,
                              strict_map_key=True,
                              max_bin_len=max_bytes, max_str_len=1 << 16,
                              max_array_len=max_items, max_map_len=1 << 10, max_ext_len=64,
                              **hooks)
    except ProtocolError:
        raise
    except Exception as exc:  # msgpack raises several types for malformed input
        raise ProtocolError(f"malformed message: {type(exc).__name__}: {str(exc)[:200]}") \
            from None
    if not isinstance(msg, tuple) or not msg or not isinstance(msg[0], str):
        raise ProtocolError("a message is an array whose first item names its kind")
    return list(msg)
