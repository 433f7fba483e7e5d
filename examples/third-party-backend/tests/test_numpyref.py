"""What is specific to this backend; its op-by-op behaviour is the conformance suite's job
(``pytest --pyargs ember.testing.suite --ember-device=numpyref``)."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.backend import conformance_skips


def test_entry_point_registers_the_device_as_available() -> None:
    rows = {d.name: d for d in ember.devices()}
    assert rows["numpyref"].available
    assert rows["numpyref"].plugin == "numpyref"


def test_tensors_live_on_numpyref_and_compute_there() -> None:
    x = ember.tensor([[1.0, 2.0], [3.0, 4.0]], device="numpyref")
    y = (x @ x).sum(dim=0)
    assert str(y.device) == "numpyref"
    np.testing.assert_allclose(y.numpy(), [22.0, 32.0])


def test_bfloat16_is_refused_naming_device_and_dtype() -> None:
    with pytest.raises(ember.DTypeError, match=r"numpyref.*bfloat16"):
        ember.zeros(2, dtype=ember.bfloat16, device="numpyref")


def test_declared_skips_carry_reasons() -> None:
    skips = conformance_skips("numpyref")
    assert skips and all(reason for reason in skips.values())
    assert conformance_skips("cpu").keys().isdisjoint(skips)
