"""Without the hardware, `rocm:0` is listed as unavailable with its reason, and using it raises."""

from __future__ import annotations

import pytest
from ember.testing import check_unavailable

from ember_rocm import probe

pytestmark = pytest.mark.skipif(probe()[0], reason="a rocm GPU is present")


def test_rocm_is_listed_unavailable_with_its_reason_which_using_it_raises() -> None:
    check_unavailable("rocm", probe()[1])
