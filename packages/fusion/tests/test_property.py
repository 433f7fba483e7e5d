"""Random op programs give the same values fused as unfused (cpu is the oracle)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember_fusion.testing import SHAPES, Step, run, step


@settings(max_examples=220, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=st.lists(step, min_size=1, max_size=14),
       shapes=st.lists(st.sampled_from(SHAPES), min_size=1, max_size=3),
       keep=st.lists(st.integers(0, 99), max_size=3),
       dtype=st.sampled_from(["float32", "float64"]),
       device=st.sampled_from(["fusion<cpu>", "fusion<cpu,eager=0>",
                               "fusion<cpu,chunk=7,threads=2>",
                               "fusion<cpu,chunk=16,threads=1>"]),
       seed=st.integers(0, 2**16))
def test_random_programs_agree_fused_and_unfused(program: list[Step], shapes: list[Any],
                                                 keep: list[int], dtype: str, device: str,
                                                 seed: int) -> None:
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(rng.standard_normal(s), dtype=dtype) for s in shapes]
    want = run(program, arrays, keep, "cpu")
    got = run(program, arrays, keep, device)
    tol = 1e-4 if dtype == "float32" else 1e-10
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
