"""Tests of the Triton kernels on the interpreter device (small shapes: ~0.6 ms a program)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import ember
import pytest


@pytest.fixture(scope="session")
def dev() -> ember.Device:
    return ember.device("triton-interpret")


@pytest.fixture
def launches(dev: ember.Device, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Kernel launches on ``triton-interpret`` (and its decorator stacks) by kernel name; a
    launch returns what the backend's does, so planned launches are cached as usual."""
    be = dev.backend
    seen: Counter[str] = Counter()
    real = be.launch

    def counting(kernel: Any, grid: Any, *args: Any, **meta: Any) -> Any:
        seen[getattr(kernel, "__name__", None) or kernel.fn.__name__] += 1
        return real(kernel, grid, *args, **meta)

    monkeypatch.setattr(be, "launch", counting)
    return seen
