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

__all__ = ["GENERATION", "Capture", "CaptureError", "active", "capturing", "invalidate",
           "new_state", "replace"]


class CaptureError(RuntimeError):
    """A step cannot be captured for replay (the message says which value or call)."""


class Capture(Protocol):
    def note_replace(self, t: Tensor) -> None:
        """``t``'s payload is about to be replaced (called before the replacement)."""


_ACTIVE: list[Capture] = []

#: bumped when parameters or optimizer state get new values outside a compiled function
#: (eager optimizer steps, ``load_state_dict``, assigning a parameter): compiled functions
#: key their recordings by it, so they trace again instead of reading stale tensors
GENERATION = [0]


def invalidate() -> None:
    """Tell compiled functions that tensors they may read were replaced from outside."""
    if not _ACTIVE:
        GENERATION[0] += 1


def new_state(why: str) -> bool:
    """A captured step created state (an optimizer's moments at its first step).  Returns
    whether every active capture accepts that (`ember.compile` traces again next call);
    otherwise the caller raises `CaptureError`."""
    notes = [getattr(c, "note_new_state", None) for c in _ACTIVE]
    if not notes or any(n is None for n in notes):
        return False
    for n in notes:
        n(why)  # type: ignore[misc]  # checked above
    return True


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
