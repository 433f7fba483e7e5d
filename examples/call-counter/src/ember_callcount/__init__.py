"""``count<inner>``: an example decorator that counts the ops a device stack runs."""

from __future__ import annotations

from .backend import CountingBackend

__all__ = ["CountingBackend"]
