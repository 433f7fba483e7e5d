"""Error messages name the problem: both shapes, both devices, the device and the dtype, the
position of a ragged list."""

from __future__ import annotations

import re
from typing import Any

import pytest

import ember

from ... import _dtype as dt
from ..._device import REGISTRY, DeviceSpec
from .._case import Case, register


def _raises(exc: type[BaseException], *needles: str) -> Any:
    """``pytest.raises`` whose message must contain every needle (literally)."""
    return pytest.raises(exc, match="(?s)" + "".join(f"(?=.*{re.escape(n)})" for n in needles))


def _shapes_add(device: Any) -> None:
    a, b = ember.ones(2, 3, device=device), ember.ones(4, device=device)
    with _raises(ember.ShapeError, "(2, 3)", "(4,)"):
        a + b


def _shapes_matmul(device: Any) -> None:
    a, b = ember.ones(2, 3, device=device), ember.ones(4, 5, device=device)
    with _raises(ember.ShapeError, "(2, 3)", "(4, 5)"):
        a @ b


def _shapes_cat(device: Any) -> None:
    a, b = ember.ones(2, 3, device=device), ember.ones(2, 4, device=device)
    with _raises(ember.ShapeError, "(2, 3)", "(2, 4)"):
        ember.cat([a, b], 0)


def _shapes_reshape(device: Any) -> None:
    with _raises((ValueError, ember.ShapeError), "(2, 3)", "(4,)"):  # type: ignore[arg-type]
        ember.ones(2, 3, device=device).reshape(4)


def _shapes_where(device: Any) -> None:
    c = ember.ones(3, dtype=dt.bool_, device=device)
    with _raises(ember.ShapeError, "(3,)", "(2,)"):
        ember.where(c, ember.ones(2, device=device), 0.0)


def peer_device(device: Any, *, without: dt.DType | None = None) -> Any:
    """A second device of the same backend family, registered under ``<name>-peer``; with
    ``without``, a peer that does not support that dtype."""
    base = device.base
    spec = REGISTRY.devices[base.name]
    name = f"{base.name}-peer" + (f"-no-{without.name}" if without else "")
    if name not in REGISTRY.devices:
        def factory(index: int, spec: DeviceSpec = spec) -> Any:
            backend = spec.factory(index)
            if without is not None:
                backend.dtypes = frozenset(backend.dtypes) - {without}
            return backend
        REGISTRY.devices[name] = DeviceSpec(name=name, factory=factory, probe=spec.probe,
                                            indexed=False, description="conformance peer")
    return ember.device(name)


def _two_devices(device: Any) -> None:
    other = peer_device(device)
    a, b = ember.ones(3, device=device), ember.ones(3, device=other)
    with _raises(ember.DeviceMismatchError, str(device), str(other)):
        a + b
    with _raises(ember.DeviceMismatchError, str(device), str(other)):
        ember.cat([a, b])
    np.testing.assert_array_equal((a + b.to(device)).numpy(), [2.0, 2.0, 2.0])


def _unsupported_dtype(device: Any) -> None:
    missing = [d for d in dt.ALL_DTYPES if not device.supports(d)]
    target = device
    d = missing[0] if missing else dt.float16
    if not missing:
        target = peer_device(device, without=d)
    with _raises(ember.DTypeError, str(target), d.name):
        ember.zeros(2, dtype=d, device=target)
    with _raises(ember.DTypeError, str(target), d.name):
        ember.ones(2, device=target).to(d)


def _ragged(device: Any) -> None:
    with _raises(ember.ShapeError, "[1]"):
        ember.tensor([[1.0, 2.0], [3.0]], device=device)
    with _raises(ember.ShapeError, "[0][1]"):
        ember.tensor([[[1.0], [2.0, 3.0]]], device=device)


def _bad_dim(device: Any) -> None:
    with _raises(IndexError, "3", "2"):
        ember.ones(2, 2, device=device).sum(dim=3)


import numpy as np  # noqa: E402  # used by the checks above, kept near them

for _cid, _fn in {
    "error-broadcast-names-both-shapes": _shapes_add,
    "error-matmul-names-both-shapes": _shapes_matmul,
    "error-cat-names-both-shapes": _shapes_cat,
    "error-reshape-names-shapes": _shapes_reshape,
    "error-where-names-shapes": _shapes_where,
    "error-two-devices-names-both": _two_devices,
    "error-unsupported-dtype-names-device-and-dtype": _unsupported_dtype,
    "error-ragged-list-names-position": _ragged,
    "error-dim-out-of-range": _bad_dim,
}.items():
    register(Case(id=_cid, group="errors", check=_fn, dtypes=(dt.float32,)))
