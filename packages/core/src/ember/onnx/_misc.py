"""Miscellaneous operators."""

from __future__ import annotations
