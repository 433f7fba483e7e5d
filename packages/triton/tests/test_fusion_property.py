"""Random op programs give the same values on ``fusion<triton-interpret>`` as on
``triton-interpret`` (the programs are `ember_fusion.testing`'s, shared with the CPU compiler's
property test)."""

from __future__ import annotations

from ember_fusion.testing import RandomProgram, check_random_program, random_program
from hypothesis import HealthCheck, given, settings

#: ``limit=4`` forces long-row loops, several programs per group and combine passes
DEVICES = ["fusion<triton-interpret>", "fusion<triton-interpret,limit=4>"]


# 80 (was 200): test_fusion_layers.py's 500 layer programs cover reductions, rows and
# matmul epilogues; these cover free elementwise compositions over broadcast shapes
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=random_program(DEVICES, max_steps=10))
def test_random_programs_agree_fused_and_unfused(case: RandomProgram) -> None:
    check_random_program(case, "triton-interpret")
