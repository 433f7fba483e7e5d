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

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import ember
import numpy as np
from ember_fusion.testing import check_census, check_program

#: bytes of a known pattern before and after every allocation the interpreter's kernels write
GUARD, PATTERN = 1024, 0xA5

#: device strings of their own, so that the census counts only these programs' groups
DEVICES = ["fusion<triton-interpret,plain=2>", "fusion<triton-interpret,limit=4,plain=2>"]
PROGRAMS, SHAPES = 20, 25


@contextmanager
def guarded() -> Iterator[list[tuple[np.ndarray, int, int]]]:
    """Every host allocation of the interpreter's memory gets `GUARD` bytes of `PATTERN` on
    each side while this is open; the allocations made are yielded (`overwritten` checks
    them), so an out-of-bounds store of a kernel is caught, not only a wrong value."""
    memory: Any = ember.device("triton-interpret").backend.memory
    made: list[tuple[np.ndarray, int, int]] = []

    def allocate(nbytes: int) -> np.ndarray:
        buf = np.full(nbytes + 16 + 2 * GUARD, PATTERN, np.uint8)
        start = GUARD + (-(buf.ctypes.data + GUARD)) % 16
        made.append((buf, start, nbytes))
        return buf[start:start + nbytes]

    memory.allocate = allocate
    try:
        yield made
    finally:
        del memory.allocate


def overwritten(made: list[tuple[np.ndarray, int, int]]) -> int:
    """How many of ``made``'s guards a kernel wrote into (and forget them)."""
    bad = sum(bool((buf[:start] != PATTERN).any() or (buf[start + n:] != PATTERN).any())
              for buf, start, n in made)
    made.clear()
    return bad


def test_layer_programs_agree_fused_and_unfused() -> None:
    failures = []
    with guarded() as made:
        for shapes in range(SHAPES):
            for seed in range(PROGRAMS):
                device = DEVICES[(seed + shapes) % 2]
                try:
                    check_program(seed, device, "triton-interpret", small=True, shapes=shapes)
                except AssertionError as exc:
                    failures.append(str(exc))
                if overwritten(made):
                    failures.append(f"layer program {seed} (shapes {shapes}, small) on {device}"
                                    " or triton-interpret wrote out of bounds")
    assert not failures, (f"{len(failures)} of {PROGRAMS * SHAPES} programs differ; "
                          f"first:\n{failures[0]}")
    check_census(DEVICES, {"prologue": 40, "epilogue": 20, "cross": 10, "matmul": 20})


def test_a_loop_kernel_masks_rows_shorter_than_the_longest() -> None:
    """A long-row (loop) kernel runs BK columns at a time up to the longest row; a value with
    shorter rows whose width BK divides (16 here, BK 4) was stored unmasked past its rows' ends
    (an out-of-bounds write that corrupted the interpreter's heap; found by layer program
    2008).  Its loads and stores are masked to its own width."""
    from ember_fusion._api import _backend

    device = "fusion<triton-interpret,limit=4,plain=1>"
    rng = np.random.default_rng(2)
    a = rng.standard_normal((2, 67)).astype(np.float32)
    b = rng.random((2, 16)) < 0.5
    x, bt = ember.tensor(a, device=device), ember.tensor(b, device=device)
    h, nb = (x * 2).relu() * 0.125, ~bt
    np.testing.assert_array_equal(h.numpy(), np.maximum(a * 2, 0) * np.float32(0.125))
    np.testing.assert_array_equal(nb.numpy(), ~b)
    sources = [getattr(k, "source", "") for k in _backend(device).kernel_cache.values()]
    loop = [s for s in sources if "for k0 in range(0, 67, BK)" in s]
    assert len(loop) == 1 and "kk < 16" in loop[0], sources
