"""Shared fixtures: the ``wgpu:0`` device, or a clean skip where no WebGPU adapter exists."""

from __future__ import annotations

from typing import Any

import pytest

from ember.testing import check as check, device_or_skip


@pytest.fixture(scope="session")
def wg_device() -> Any:
    return device_or_skip("wgpu:0", "no WebGPU adapter")
