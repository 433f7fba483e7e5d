"""Helpers for a backend package's own tests: its device or a clean skip, and a comparison
of a tensor with a numpy oracle."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from .._device import Device, device, devices

__all__ = ["check", "device_or_skip"]


def device_or_skip(name: str, missing: str) -> Device:
    """The device ``name`` (e.g. ``"opencl:0"``), or a pytest skip ``"{missing}: {reason}"``
    where it is unavailable or its plugin is not registered."""
    row = next((d for d in devices() if d.name == name), None)
    if row is None or not row.available:
        family = name.partition(":")[0]
        reason = row.reason if row is not None else f"the {family} plugin is not registered"
        pytest.skip(f"{missing}: {reason}")
    return device(name)


def check(actual: Any, expected: Any, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Compare an ember tensor with a numpy float64 (or exact integer/bool) oracle."""
    got = actual.numpy()
    exp = np.asarray(expected)
    assert got.shape == exp.shape, (got.shape, exp.shape)
    if exp.dtype.kind in "biu":
        np.testing.assert_array_equal(got, exp)
    else:
        np.testing.assert_allclose(got.astype(np.float64), exp, rtol=rtol, atol=atol)
