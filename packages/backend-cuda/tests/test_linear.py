"""`linear` on ``cuda:0``: the bias epilogue of the Triton matmul at widths the conformance
suite does not reach, and through the recurring-launch path (`DriverLaunch`).

Needs a GPU (skipped without one: CI has none).  Session 14 found the first version of the
epilogue faulting (misaligned address) where the output width was not a multiple of the vector
width (5, 10 columns); these widths, tile-crossing ones and sizes large enough for kernel
selection are what this file runs.  The oracle is numpy in float64.
"""

from __future__ import annotations

import ember
import numpy as np
import pytest

from ember_cuda import probe

pytestmark = pytest.mark.skipif(not probe()[0], reason="needs a CUDA GPU")

F = ember.nn.functional
TOL = {ember.float32: 2e-5, ember.float16: 2e-2, ember.bfloat16: 6e-2}


@pytest.mark.parametrize("dtype", list(TOL), ids=lambda d: d.name)
@pytest.mark.parametrize("m,k,n", [(16, 20, 5), (7, 3, 1), (33, 65, 10), (512, 784, 1024),
                                   (512, 1024, 10), (130, 64, 67)])
def test_linear_matches_numpy(m: int, k: int, n: int, dtype: ember.DType) -> None:
    rng = np.random.default_rng(m * 1000 + n)
    x, w, b = (rng.standard_normal(s) for s in ((m, k), (n, k), (n,)))
    dev = ember.device("cuda:0")
    xt, wt, bt = (ember.tensor(v, dtype=dtype, device=dev) for v in (x, w, b))
    want = (xt.to(dtype=ember.float64).numpy() @ wt.to(dtype=ember.float64).numpy().T
            + bt.to(dtype=ember.float64).numpy())
    scale = np.abs(want).max()
    for _ in range(3):  # the JIT launch, then recorded launches
        got = F.linear(xt, wt, bt).to(dtype=ember.float64).numpy()
        assert np.abs(got - want).max() <= TOL[dtype] * scale * max(1.0, k / 64)


def test_linear_gradients_match_numpy() -> None:
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s) for s in ((16, 20), (5, 20), (5,)))
    ad = ember.device("autodiff<cuda:0>")
    xt, wt, bt = (ember.tensor(v, dtype=ember.float32, device=ad, requires_grad=True)
                  for v in (x, w, b))
    y = F.linear(xt, wt, bt)
    grads = (y * y).sum().backward()
    gy = 2 * (x @ w.T + b)
    for t, want in ((xt, gy @ w), (wt, gy.T @ x), (bt, gy.sum(0))):
        np.testing.assert_allclose(grads[t].numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
@pytest.mark.parametrize("m,k,n", [(5, 16, 20), (3, 7, 10), (10, 33, 5), (130, 64, 67)])
def test_matmul_odd_sizes_with_transposed_operands(layout: str, m: int, k: int, n: int) -> None:
    # the operand loads use the same wrapped row/column indices and contiguity hints as the
    # first bias epilogue did: odd M/N with the wrapped axis contiguous must not fault either
    rng = np.random.default_rng(m + 10 * n)
    a = rng.standard_normal((k, m)).T if layout[0] == "t" else rng.standard_normal((m, k))
    b = rng.standard_normal((n, k)).T if layout[1] == "t" else rng.standard_normal((k, n))
    dev = ember.device("cuda:0")
    at = ember.tensor(np.ascontiguousarray(a.T if layout[0] == "t" else a),
                      dtype=ember.float32, device=dev)
    bt = ember.tensor(np.ascontiguousarray(b.T if layout[1] == "t" else b),
                      dtype=ember.float32, device=dev)
    at = at.T if layout[0] == "t" else at
    bt = bt.T if layout[1] == "t" else bt
    for _ in range(2):
        np.testing.assert_allclose((at @ bt).numpy(), a @ b, rtol=1e-4, atol=1e-4)
