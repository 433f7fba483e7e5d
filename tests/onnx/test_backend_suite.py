"""onnx's own backend conformance suite (``onnx.backend.test.BackendTest``) on ember's ``cpu``.

Every case runs: node cases (opsets 7-28), the light real models, and the simple,
pytorch-converted and pytorch-operator models (opsets 6-12), each checked by onnx's own
comparison against its expected outputs.  A case either passes or is listed in
`backend_suite_exclusions` under its reason (an operator, dtype or value kind ember does not
import, or a known wrong result with its cause); any other case that fails or raises fails
here.  ``python scripts/onnx_suite_counts.py`` counts the outcomes (and onnxruntime's).
"""

from __future__ import annotations

import unittest
import warnings

import pytest

pytest.importorskip("onnx")

import onnx.backend.test
from backend_suite_exclusions import EXCLUDED

import ember.onnx.backend

REASONS = {name: reason for reason, names in EXCLUDED.items() for name in names}


def _cases() -> dict[str, type[unittest.TestCase]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # onnx's case generators warn about float8 casts
        cases = onnx.backend.test.BackendTest(ember.onnx.backend, __name__).test_cases
    for cls in cases.values():
        for name in [n for n in vars(cls) if n.startswith("test_")]:
            if not name.endswith("_cpu"):  # onnx's CUDA copies: ember's cpu is the CI device
                delattr(cls, name)
            elif name in REASONS:
                setattr(cls, name, unittest.skip(REASONS[name])(getattr(cls, name)))
    return cases


globals().update(_cases())


def test_every_excluded_case_exists() -> None:
    names = {n for cls in _cases().values() for n in vars(cls) if n.startswith("test_")}
    assert not set(REASONS) - names, sorted(set(REASONS) - names)
