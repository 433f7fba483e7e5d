"""Random layer programs give the same values on ``fusion<triton-interpret>`` as on
``triton-interpret``.

The programs are `ember_fusion.testing.layer_program` s (reductions with prologues and
epilogues, row norms and softmaxes, matmul epilogues, int and bool chains; see
packages/fusion/tests/test_layer_programs.py, which runs them on cpu), with small shapes and at
most two motifs each, as the interpreter runs every program of a launch in Python: 500 programs,
20 programs' ops each over 25 sets of shapes.  Every other one runs with ``limit=4``, which
forces long-row loops, several programs per group and combine passes.  Ints and bools agree
exactly, floats within `ember_fusion.testing.TOL`.  A failure prints the program and the call
that replays it.
"""

from __future__ import annotations

from ember_fusion.testing import census, check_program

#: device strings of their own, so that the census counts only these programs' groups
DEVICES = ["fusion<triton-interpret,plain=2>", "fusion<triton-interpret,limit=4,plain=2>"]
PROGRAMS, SHAPES = 20, 25


def test_layer_programs_agree_fused_and_unfused() -> None:
    failures = []
    for shapes in range(SHAPES):
        for seed in range(PROGRAMS):
            try:
                check_program(seed, DEVICES[(seed + shapes) % 2], "triton-interpret",
                              small=True, shapes=shapes)
            except AssertionError as exc:
                failures.append(str(exc))
    assert not failures, (f"{len(failures)} of {PROGRAMS * SHAPES} programs differ; "
                          f"first:\n{failures[0]}")
    for device in DEVICES:  # generated kernels, not op-by-op runs, for what the programs fuse
        got = census(device)
        assert got["unfused"] == 0, got
        for kind, least in (("prologue", 40), ("epilogue", 20), ("cross", 10),
                            ("matmul", 20)):
            assert got[kind] >= least, (device, got)
