"""Shared fixtures: the ``wgpu:0`` device, or a clean skip where no WebGPU adapter exists."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest


def _device() -> Any:
    import ember

    row = next((d for d in ember.devices() if d.name == "wgpu:0"), None)
    if row is None or not row.available:
        reason = row.reason if row is not None else "the wgpu plugin is not registered"
        pytest.skip(f"no WebGPU adapter: {reason}")
    return ember.device("wgpu:0")


@pytest.fixture(scope="session")
def wg_device() -> Any:
    return _device()


def check(actual: Any, expected: Any, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Compare an ember tensor with a numpy float64 (or exact integer/bool) oracle."""
    got = actual.numpy()
    exp = np.asarray(expected)
    assert got.shape == exp.shape, (got.shape, exp.shape)
    if exp.dtype.kind in "biu":
        np.testing.assert_array_equal(got, exp)
    else:
        np.testing.assert_allclose(got.astype(np.float64), exp, rtol=rtol, atol=atol)
