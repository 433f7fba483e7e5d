"""Shared fixtures: the ``opencl:0`` device, or a clean skip where no OpenCL platform exists."""

from __future__ import annotations

from typing import Any

import pytest
from ember.testing import check as check
from ember.testing import device_or_skip


@pytest.fixture(scope="session")
def cl_device() -> Any:
    return device_or_skip("opencl:0", "no OpenCL device")
