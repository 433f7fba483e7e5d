"""Random op programs give the same values on ``fusion<triton-interpret>`` as on
``triton-interpret`` (the programs are `ember_fusion.testing`'s, shared with the CPU compiler's
property test)."""

from __future__ import annotations

from typing import Any

import numpy as np
from ember_fusion.testing import SHAPES, Step, run, step
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

#: ``limit=4`` forces long-row loops, several programs per group and combine passes
DEVICES = ["fusion<triton-interpret>", "fusion<triton-interpret,limit=4>"]


# 80 (was 200): test_fusion_layers.py's 500 layer programs cover reductions, rows and
# matmul epilogues; these cover free elementwise compositions over broadcast shapes
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=st.lists(step, min_size=1, max_size=10),
       shapes=st.lists(st.sampled_from(SHAPES), min_size=1, max_size=3),
       keep=st.lists(st.integers(0, 99), max_size=3),
       dtype=st.sampled_from(["float32", "float64"]),
       device=st.sampled_from(DEVICES),
       seed=st.integers(0, 2**16))
def test_random_programs_agree_fused_and_unfused(program: list[Step], shapes: list[Any],
                                                 keep: list[int], dtype: str, device: str,
                                                 seed: int) -> None:
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(rng.standard_normal(s), dtype=dtype) for s in shapes]
    want = run(program, arrays, keep, "triton-interpret")
    got = run(program, arrays, keep, device)
    tol = 1e-4 if dtype == "float32" else 1e-10
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
