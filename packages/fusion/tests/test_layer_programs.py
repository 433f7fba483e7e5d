"""Random layer programs give the same values on ``fusion<cpu>`` as on ``cpu``.

The programs (`ember_fusion.testing.layer_program`) are what Fusion fuses beyond elementwise
chains: reductions (sum, mean, amax/amin, prod, var, any/all, argmax/argmin over inner axes,
axis 0 and all axes, keepdim on and off) with elementwise prologues and epilogues, softmax,
log_softmax, layer_norm and rms_norm rows (with residual adds and casts), 2-D matmuls with
epilogues (bias, activation, residual, scale, cast), int and bool chains, strided and broadcast
inputs, 0-d values.  Ints and bools must agree exactly; floats within `ember_fusion.testing.TOL`
(reordered sums: see there).  Programs of the same generator (small shapes) run on opencl
and the Triton interpreter in those packages' tests.  A failure prints the program and the
call that replays it.
"""

from __future__ import annotations

import ember
import numpy as np

import ember_fusion
from ember_fusion.testing import check_census, check_program

#: blocks of 64 and of 7 elements, so that most groups run blocked (two threads on the second)
DEVICES = ["fusion<cpu,eager=0,chunk=64>", "fusion<cpu,eager=0,chunk=7,threads=2>"]
PROGRAMS = 500


def test_layer_programs_agree_fused_and_unfused() -> None:
    from ember_cpu.fusion import wait_for_loops

    failures = []
    for seed in range(PROGRAMS):
        try:
            # every 10th program also runs twice more, the last time on the compiled loops
            # its kernels asked for (a kernel of four blocks or more, on its second call)
            check_program(seed, DEVICES[seed % 2], "cpu", runs=1 if seed % 10 else 3,
                          between=wait_for_loops)
        except AssertionError as exc:
            failures.append(str(exc))
    assert not failures, f"{len(failures)} of {PROGRAMS} programs differ; first:\n{failures[0]}"
    # the fused runs fused what the programs are about (so that this test cannot pass by
    # running everything op by op)
    check_census(DEVICES, {"prologue": 150, "epilogue": 80, "cross": 50, "matmul": 80})


def test_a_small_matmul_after_a_whole_group_heads_its_epilogue_group() -> None:
    """A matmul never joins a ``whole`` group (there it ran op by op on opencl, unfused with
    every op after it): it heads a group of its own with its epilogue."""
    device = "fusion<cpu,eager=0>"
    rng = np.random.default_rng(5)
    a = rng.standard_normal((13, 67)).astype(np.float32)
    w = rng.standard_normal((67, 3)).astype(np.float32)
    x, wt = ember.tensor(a, device=device), ember.tensor(w, device=device)
    ember_fusion.reset_stats(device)
    i = x.argmax(0)  # over axis 0, not crossable: a whole group
    h = (x @ wt).sigmoid() + 1
    np.testing.assert_array_equal(i.numpy(), a.argmax(0))
    np.testing.assert_allclose(h.numpy(), 1 / (1 + np.exp(-(a @ w))) + 1, rtol=1e-5)
    assert ember_fusion.stats(device).last_groups == ("whole[argmax]", "rows[matmul+sigmoid+add]")
