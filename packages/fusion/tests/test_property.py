"""Random op programs give the same values fused as unfused (cpu is the oracle)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from ember_fusion.testing import RandomProgram, check_random_program, random_program


@settings(max_examples=220, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=random_program(["fusion<cpu>", "fusion<cpu,eager=0>",
                               "fusion<cpu,chunk=7,threads=2>",
                               "fusion<cpu,chunk=16,threads=1>"], max_steps=14))
def test_random_programs_agree_fused_and_unfused(case: RandomProgram) -> None:
    check_random_program(case, "cpu")
