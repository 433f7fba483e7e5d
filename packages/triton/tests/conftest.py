"""Tests of the Triton kernels on the interpreter device (small shapes: ~0.6 ms a program)."""

from __future__ import annotations

import ember
import pytest


@pytest.fixture(scope="session")
def dev() -> ember.Device:
    return ember.device("triton-interpret")
