"""Helpers for a backend package's own tests: its device or a clean skip, and a comparison
of a tensor with a numpy oracle.  pytest is imported where it is used: ``ember.testing`` imports
this module, and ``python -m ember.testing`` must run without pytest (to say what to install)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._device import Device, device, devices
from .._errors import DeviceUnavailableError

__all__ = ["check", "check_unavailable", "device_or_skip"]


def device_or_skip(name: str, missing: str) -> Device:
    """The device ``name`` (e.g. ``"opencl:0"``), or a pytest skip ``"{missing}: {reason}"``
    where it is unavailable or its plugin is not registered."""
    row = next((d for d in devices() if d.name == name), None)
    if row is None or not row.available:
        family = name.partition(":")[0]
        reason = row.reason if row is not None else f"the {family} plugin is not registered"
        import pytest

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


def check_unavailable(family: str, reason: str) -> None:
    """That the device family ``family`` (e.g. ``"cuda"``) is listed unavailable with
    ``reason`` (non-empty), and that using ``{family}:0`` raises it."""
    rows = [d for d in devices() if d.name.startswith(family)]
    assert rows, f"the {family} plugin registered no device"
    assert not rows[0].available
    assert rows[0].reason == reason != ""
    import pytest

    with pytest.raises(DeviceUnavailableError, match=reason.split("(")[0].strip()):
        device(f"{family}:0")
