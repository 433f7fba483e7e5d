"""What a graph capture (record one step, replay it many times) needs from the core.

A captured step replays the kernels it recorded with the addresses they used, so a value that
Python *rebinds* (a parameter after an optimizer step, an optimizer's moment) must end up back
in the memory the recording reads.  Backends that capture (``ember_cuda.graph``) push a
`Capture` while recording; the core reports every in-place payload replacement to it, and
optimizers refuse state that lives on the host and changes every step (a replay could not see
it change).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ._tensor import Tensor

__all__ = ["Capture", "CaptureError", "active", "capturing", "replace"]


class CaptureError(RuntimeError):
    """A step cannot be captured for replay (the message says which value or call)."""


class Capture(Protocol):
    def note_replace(self, t: Tensor) -> None:
        """``t``'s payload is about to be replaced (called before the replacement)."""


_ACTIVE: list[Capture] = []


def active() -> bool:
    """Whether a capture is recording on this process."""
    return bool(_ACTIVE)


@contextmanager
def capturing(capture: Capture) -> Iterator[None]:
    _ACTIVE.append(capture)
    try:
        yield
    finally:
        _ACTIVE.remove(capture)


def replace(t: Tensor, data: Any) -> None:
    """Give ``t`` the payload ``data`` in place, telling an active capture first."""
    for c in _ACTIVE:
        c.note_replace(t)
    t._data = data
