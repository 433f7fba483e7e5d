"""Grad mode: whether autodiff devices record ops (thread-local, on by default).

Autodiff reads :data:`STATE.enabled` once per op; everything else uses the context managers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

__all__ = ["STATE", "enable_grad", "is_grad_enabled", "no_grad", "set_grad_enabled"]

F = TypeVar("F", bound=Callable[..., Any])


class _GradState(threading.local):
    enabled: bool = True  # the class attribute is every new thread's default


STATE = _GradState()


def is_grad_enabled() -> bool:
    """Whether ops on autodiff devices are being recorded in this thread.

    Examples
    --------
    >>> import ember
    >>> with ember.no_grad():
    ...     ember.is_grad_enabled()
    False
    """
    return STATE.enabled


class set_grad_enabled:  # PyTorch's name; a class so it works as a decorator too
    """Turn recording on or off inside a ``with`` block (or for a decorated function)."""

    def __init__(self, mode: bool) -> None:
        self.mode = bool(mode)
        self.prev: list[bool] = []

    def __enter__(self) -> None:
        self.prev.append(STATE.enabled)
        STATE.enabled = self.mode

    def __exit__(self, *exc: object) -> None:
        STATE.enabled = self.prev.pop()

    def __call__(self, fn: F) -> F:
        mode = self.mode

        @wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)

        return run  # type: ignore[return-value]  # same signature as fn


class no_grad(set_grad_enabled):  # PyTorch's name
    """Do not record ops on autodiff devices: results do not require grad.

    Examples
    --------
    >>> import ember
    >>> with ember.no_grad():
    ...     pass
    """

    def __init__(self) -> None:
        super().__init__(False)


class enable_grad(set_grad_enabled):  # PyTorch's name
    """Record ops again inside a ``no_grad`` block."""

    def __init__(self) -> None:
        super().__init__(True)

