"""A clean stop on Ctrl-C / SIGTERM: finish the step, checkpoint, exit 0.

The first SIGINT or SIGTERM only raises a flag that the training loop reads after each step.
A second one aborts at once (``KeyboardInterrupt``): whatever checkpoint was being written stays
a ``.tmp-`` directory and the last complete checkpoint is untouched.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any

__all__ = ["StopRequest"]


class StopRequest:
    """Context manager that turns the first SIGINT/SIGTERM into ``requested = True``.

    Examples
    --------
    >>> import os, signal
    >>> with StopRequest() as stop:
    ...     os.kill(os.getpid(), signal.SIGTERM)
    ...     stop.requested
    True
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.requested = False
        self.signal_name: str | None = None
        self._previous: dict[int, Any] = {}
        self._active = False

    def request(self, reason: str = "request") -> None:
        """Ask for a stop from code (a callback, early stopping)."""
        self.requested = True
        self.signal_name = self.signal_name or reason

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # A handler installed before (ember_distributed's MPI engine) may say that this signal
        # is the launcher tearing the job down while we wait in a collective: it raises then.
        chain = getattr(self._previous.get(signum), "ember_chain", None)
        if callable(chain):
            chain(signum)
        if self.requested:
            self._restore()
            raise KeyboardInterrupt(f"second {signal.Signals(signum).name}: aborting")
        self.requested = True
        self.signal_name = signal.Signals(signum).name

    def __enter__(self) -> StopRequest:
        # Signal handlers can only be set from the main thread; elsewhere we only watch the flag.
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
            self._active = True
        return self

    def _restore(self) -> None:
        if self._active:
            for s, h in self._previous.items():
                signal.signal(s, h)
            self._active = False

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._restore()
