"""Random layer programs give the same values on ``fusion<opencl:0>`` as on ``opencl:0``.

The programs are `ember_fusion.testing.layer_program` s (reductions with prologues and
epilogues, row norms and softmaxes, matmul epilogues, int and bool chains; see
packages/fusion/tests/test_layer_programs.py, which runs them on cpu), with small shapes and
at most two motifs each.  Building a generated kernel costs pocl ~0.1-0.2 s and every launch a
few milliseconds, so the 500 programs here are 10 programs' ops each over 50 sets of shapes:
sources take shapes as arguments, so most kernels are built once per program.  Ints and
bools agree exactly, floats within `ember_fusion.testing.TOL`.  A failure prints the program and
the call that replays it.
"""

from __future__ import annotations

from typing import Any

from ember_fusion.testing import check_census, check_program

#: a device string of its own, so that the census counts only these programs' groups
DEVICE = "fusion<opencl:0,min_nodes=2>"
PROGRAMS, SHAPES = 10, 50


def test_layer_programs_agree_fused_and_unfused(cl_device: Any) -> None:
    failures = []
    for shapes in range(SHAPES):
        for seed in range(PROGRAMS):
            try:
                check_program(seed, DEVICE, "opencl:0", small=True, shapes=shapes)
            except AssertionError as exc:
                failures.append(str(exc))
    assert not failures, (f"{len(failures)} of {PROGRAMS * SHAPES} programs differ; "
                          f"first:\n{failures[0]}")
    # generated kernels, not op-by-op runs, for what the programs fuse
    check_census([DEVICE], {"prologue": 40, "epilogue": 20, "cross": 10, "matmul": 20})
