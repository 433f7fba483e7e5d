"""onnx's backend conformance suite on ``opencl:0``, sampled: one case in `SAMPLE`, every
kind of case (node, real, simple, pytorch-converted, pytorch-operator) drawn alike.

onnx's `BackendTest` names its devices ``CPU`` and ``CUDA``; `OpenCLBackend` is ember's
backend with ``CPU`` meaning ``opencl:0``, so the ``_cpu`` cases run there.  A case passes,
or is listed in `backend_suite_exclusions` (the cpu run's reasons hold for every device), or
in `OPENCL_EXCLUDED` with the reason it differs on this device; anything else fails.
"""

from __future__ import annotations

import unittest
import warnings
import zlib
from typing import Any

import pytest

pytest.importorskip("onnx")

import onnx.backend.test
from backend_suite_exclusions import EXCLUDED

import ember.onnx.backend as eob
from ember.testing import device_or_skip

DEVICE = "opencl:0"
#: one case in this many runs (drawn by a hash of its name, so the sample is stable)
SAMPLE = 8
#: cases that pass on cpu but not on this device, with the reason
OPENCL_EXCLUDED: dict[str, str] = {}

REASONS = {name: reason for reason, names in EXCLUDED.items() for name in names}
REASONS.update(OPENCL_EXCLUDED)


class OpenCLBackend(eob.EmberBackend):
    """ember's onnx backend with onnx's ``CPU`` device meaning ``opencl:0``."""

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> eob.EmberRep:
        return super().prepare(model, DEVICE if device == "CPU" else device, **kwargs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return super().supports_device(DEVICE if device == "CPU" else device)


def sampled(name: str) -> bool:
    return zlib.crc32(name.encode()) % SAMPLE == 0


def _cases() -> dict[str, type[unittest.TestCase]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # onnx's case generators warn about float8 casts
        cases = onnx.backend.test.BackendTest(OpenCLBackend, __name__).test_cases
    for cls in cases.values():
        for name in [n for n in vars(cls) if n.startswith("test_")]:
            if not name.endswith("_cpu") or not sampled(name):
                delattr(cls, name)
            elif name in REASONS:
                setattr(cls, name, unittest.skip(REASONS[name])(getattr(cls, name)))
    return cases


if eob.supports_device(DEVICE):
    globals().update(_cases())


def test_sample_is_large() -> None:
    """The sample covers at least 1/SAMPLE of the suite's cpu cases, less a margin, and runs
    on the device (skips only where no OpenCL platform exists)."""
    device_or_skip(DEVICE, "the onnx suite on opencl:0")
    ran = [n for cls in _cases().values() for n in vars(cls) if n.startswith("test_")]
    assert len(ran) >= 2000 // SAMPLE * 0.8, len(ran)
