"""Without the hardware, `cuda:0` is listed as unavailable with its reason, and using it raises."""

from __future__ import annotations

import ember
import pytest

from ember_cuda import probe

pytestmark = pytest.mark.skipif(probe()[0], reason="a cuda GPU is present")


def test_cuda_is_listed_unavailable_with_a_reason() -> None:
    rows = [d for d in ember.devices() if d.name.startswith("cuda")]
    assert rows, "the cuda plugin registered no device"
    assert not rows[0].available
    assert rows[0].reason == probe()[1] != ""


def test_using_cuda_raises_the_reason() -> None:
    with pytest.raises(ember.DeviceUnavailableError, match=probe()[1].split("(")[0].strip()):
        ember.device("cuda:0")
