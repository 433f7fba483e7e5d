from __future__ import annotations

import ember
import numpy as np
import pytest

import ember_fusion

FUSED = "fusion<cpu,eager=0>"  # record every op, however small its tensors
#: tiny blocks and two threads, so that small test tensors take the blocked, threaded path
BLOCKED = "fusion<cpu,chunk=7,threads=2>"


@pytest.fixture
def fused() -> ember.Device:
    ember_fusion.reset_stats(FUSED)
    return ember.device(FUSED)


@pytest.fixture
def blocked() -> ember.Device:
    ember_fusion.reset_stats(BLOCKED)
    return ember.device(BLOCKED)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
