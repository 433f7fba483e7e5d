"""Without the hardware, `cuda:0` is listed as unavailable with its reason, and using it raises."""

from __future__ import annotations

import pytest
from ember.testing import check_unavailable

from ember_cuda import probe

pytestmark = pytest.mark.skipif(probe()[0], reason="a cuda GPU is present")


def test_cuda_is_listed_unavailable_with_its_reason_which_using_it_raises() -> None:
    check_unavailable("cuda", probe()[1])
