"""ember's Remote decorator: ``remote<HOST:PORT/INNER>`` runs tensor ops on a server's device.

Start a server with ``ember-remote serve --bind 127.0.0.1:7878 --token-file FILE``; connect
with the device string and the token in ``EMBER_REMOTE_TOKEN`` (see ``docs/remote.md``).
"""

from __future__ import annotations

from ._connection import RemoteConnectionError, RemoteError, SessionLostError
from ._session import Limits
from .backend import RemoteBackend, RemoteHandle
from .server import RemoteServer

__all__ = [
    "Limits",
    "RemoteBackend",
    "RemoteConnectionError",
    "RemoteError",
    "RemoteHandle",
    "RemoteServer",
    "SessionLostError",
]
