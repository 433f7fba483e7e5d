"""Grad mode: whether autodiff devices record ops (thread-local, on by default).

Autodiff reads :data:`STATE.enabled` once per op; everything else uses the context managers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

__all__ = ["STATE", "enable_grad", "inference_mode", "is_grad_enabled",
           "is_inference_mode_enabled", "no_grad", "set_grad_enabled"]

F = TypeVar("F", bound=Callable[..., Any])


class _GradState(threading.local):
    enabled: bool = True  # the class attribute is every new thread's default
    inference: bool = False


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



def is_inference_mode_enabled() -> bool:
    """Whether an `inference_mode` block is active in this thread.

    Examples
    --------
    >>> import ember
    >>> with ember.inference_mode():
    ...     ember.is_inference_mode_enabled(), ember.is_grad_enabled()
    (True, False)
    """
    return STATE.inference


class inference_mode:  # PyTorch's name
    """Run code that only computes values: no op is recorded for autodiff (as `no_grad`),
    and `is_inference_mode_enabled` is true.  A context manager or a decorator (with or
    without parentheses); ``inference_mode(False)`` turns it off inside an outer one and turns
    recording back on, as PyTorch's.

    Note: ember tensors have no version counters or views to protect, so inference mode costs
    nothing beyond `no_grad`; tensors made inside it are ordinary tensors.

    Examples
    --------
    >>> import ember
    >>> w = ember.ones(2, device="autodiff<cpu>", requires_grad=True)
    >>> with ember.inference_mode():
    ...     (w * 2).requires_grad
    False
    >>> @ember.inference_mode
    ... def predict(x):
    ...     return (x * w).sum()
    >>> predict(ember.ones(2, device="autodiff<cpu>")).requires_grad
    False
    """

    def __new__(cls, mode: bool | Callable[..., Any] = True) -> Any:
        if callable(mode):  # used as a bare decorator: @ember.inference_mode
            return inference_mode(True)(mode)
        return super().__new__(cls)

    def __init__(self, mode: bool | Callable[..., Any] = True) -> None:
        self.mode = True if callable(mode) else bool(mode)
        self.prev: list[tuple[bool, bool]] = []

    def __enter__(self) -> None:
        self.prev.append((STATE.enabled, STATE.inference))
        STATE.enabled, STATE.inference = not self.mode, self.mode

    def __exit__(self, *exc: object) -> None:
        STATE.enabled, STATE.inference = self.prev.pop()

    def __call__(self, fn: F) -> F:
        mode = self.mode

        @wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with inference_mode(mode):
                return fn(*args, **kwargs)

        return run  # type: ignore[return-value]  # same signature as fn
