"""What one client may make the server hold (`Limits`), and the bounded checks and messages
that client-sent values meet before anything else looks at them."""

from __future__ import annotations

import reprlib
from dataclasses import dataclass
from typing import Any

from ._protocol import MAX_ITEMS, ProtocolError

__all__ = ["Limits", "check_params", "show"]

#: a param is a scalar, a string, a dtype, or an array of at most this many of them or of
#: such arrays (a shape, a padding of pairs): what every rule and kernel needs
MAX_PARAM_ITEMS = 64


@dataclass(frozen=True)
class Limits:
    """What one client may send and keep.

    ``max_message``, ``max_tensor`` and ``max_client`` are bytes: a message, a result or one
    work buffer of an op, and all a client holds (tensors, failed ids and an op's work buffers
    while it runs).  Each tensor and each failed id also counts ``overhead`` bytes (what the
    server keeps for it besides its data, so that empty tensors are not free) and one against
    ``max_tensors``.  ``max_items`` bounds the items one message decodes to, ``max_checked``
    the op signatures a session remembers as checked.
    """

    max_message: int = 256 << 20
    max_tensor: int = 1 << 30
    max_client: int = 4 << 30
    max_tensors: int = 1 << 20
    max_items: int = MAX_ITEMS
    max_checked: int = 1 << 14
    overhead: int = 1024


_show = reprlib.Repr()
_show.maxlevel, _show.maxtuple, _show.maxlist, _show.maxdict = 3, 8, 8, 8
_show.maxstring = _show.maxother = _show.maxlong = 80


def show(value: Any) -> str:
    """A client-sent value for a message: bounded in length and depth whatever it is."""
    return _show.repr(value)


def check_params(name: str, params: dict[str, Any]) -> int:
    """Refuse a param no op could need (a long or deep array: rules and kernels would take
    time or memory in proportion); the number of items the params hold."""
    items = 0
    for key, value in params.items():
        if type(value) in (tuple, list):
            if len(value) > MAX_PARAM_ITEMS:
                raise ProtocolError(f"{name}: param {show(key)} holds {len(value)} items, over "
                                    f"{MAX_PARAM_ITEMS}")
            for v in value:
                if type(v) in (tuple, list):
                    if len(v) > MAX_PARAM_ITEMS or any(type(u) in (tuple, list, dict)
                                                        for u in v):
                        raise ProtocolError(f"{name}: param {show(key)} is nested too deep or "
                                            "too long")
                    items += len(v)
                elif type(v) is dict:
                    raise ProtocolError(f"{name}: param {show(key)} holds a map")
            items += len(value)
        elif type(value) is dict:
            raise ProtocolError(f"{name}: param {show(key)} is a map")
        items += 1
    return items
