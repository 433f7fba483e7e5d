"""cuBLASLt on ``cuda:0`` (`ember_cuda.cublaslt`): every algorithm the heuristic offers,
for each dtype, operand layout, the bias epilogue, batches (broadcast B) and 16-byte aligned
operands; then matmul and linear with kernel selection made to pick cuBLASLt, first call and
recorded replays.  The oracle is numpy in float64 on the operands as stored.

Needs a GPU (skipped without one: CI has none).
"""

from __future__ import annotations

from typing import Any

import ember
import numpy as np
import pytest

from ember_cuda import probe

pytestmark = pytest.mark.skipif(not probe()[0], reason="needs a CUDA GPU")

TOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 1e-5, "tf32": 2e-3}


def _array(x: np.ndarray, dtype: ember.DType, transposed: bool) -> tuple[Any, np.ndarray]:
    """``x`` on cuda:0 (a transposed view of its transpose when asked) and the values it
    holds, in float64."""
    dev = ember.device("cuda:0")
    t = ember.tensor(np.ascontiguousarray(x.T) if transposed else x, dtype=dtype, device=dev)
    t = t.T if transposed else t
    return t.payload, t.to(dtype=ember.float64).numpy()


@pytest.mark.parametrize("bias", [False, True], ids=["plain", "bias"])
@pytest.mark.parametrize("layout", ["nn", "tn", "nt"])
@pytest.mark.parametrize("name", list(TOL))
def test_every_algorithm_matches_numpy(name: str, layout: str, bias: bool) -> None:
    from ember_cuda.cublas import gemm_layout
    from ember_cuda.cublaslt import LtGemm, alignment

    be = ember.device("cuda:0").backend
    dtype = ember.float32 if name == "tf32" else getattr(ember, name)
    rng = np.random.default_rng(len(layout) + 7 * bias)
    m, n, k = 300, 264, 136
    a, av = _array(rng.standard_normal((m, k)), dtype, layout[0] == "t")
    b, bv = _array(rng.standard_normal((k, n)), dtype, layout[1] == "t")
    z, zv = _array(rng.standard_normal((n,)), dtype, False)
    out = be.empty((m, n), a.dtype)
    la, lb = gemm_layout(m, k, *a.strides), gemm_layout(k, n, *b.strides)
    assert la is not None and lb is not None
    align = alignment(out.ptr, a.ptr, b.ptr, z.ptr)
    lt = LtGemm(be.memory.index, m, n, k, 1, la, lb, 0, 0,
                "float32" if name == "tf32" else name, "tf32" if name == "tf32" else "ieee",
                bias, align)
    assert lt.algos, "the heuristic offered no algorithm"
    want = av @ bv + (zv if bias else 0)
    from ember_cuda.cublaslt import WORKSPACE

    for i in range(len(lt.algos)):
        be.memory.synchronize()
        lt.run(i, out.ptr, a.ptr, b.ptr, z.ptr, be.memory.stream(),
               be.memory.workspace(WORKSPACE))
        got = be.memory.to_numpy(out).astype(np.float64)
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err <= TOL[name], f"algorithm {i}: relative error {err:.2e}"


@pytest.mark.parametrize("offset", [0, 8], ids=["256-aligned", "16-aligned"])
def test_batched_with_broadcast_b(offset: int) -> None:
    """Three matrices of A against one B (batch stride 0); A starts ``offset`` float32s into
    its buffer, so 16-byte aligned only."""
    from ember_cuda.cublas import gemm_layout
    from ember_cuda.cublaslt import WORKSPACE, LtGemm, alignment

    be = ember.device("cuda:0").backend
    rng = np.random.default_rng(2)
    batch, m, n, k = 3, 64, 96, 80
    flat = rng.standard_normal(batch * m * k + offset).astype(np.float32)
    base = be.memory.from_numpy(flat)
    a = base.view((batch, m, k), (m * k, k, 1), base.offset + offset)
    bnp = rng.standard_normal((k, n)).astype(np.float32)
    b = be.memory.from_numpy(bnp)
    out = be.empty((batch, m, n), np.dtype(np.float32))
    la, lb = gemm_layout(m, k, k, 1), gemm_layout(k, n, n, 1)
    assert la is not None and lb is not None
    align = alignment(out.ptr, a.ptr, b.ptr)
    assert align == (256 if offset == 0 else 16)
    lt = LtGemm(be.memory.index, m, n, k, batch, la, lb, m * k, 0, "float32", "ieee", False,
                align)
    assert lt.algos
    want = flat[offset:].reshape(batch, m, k).astype(np.float64) @ bnp.astype(np.float64)
    for i in range(len(lt.algos)):
        lt.run(i, out.ptr, a.ptr, b.ptr, 0, be.memory.stream(), be.memory.workspace(WORKSPACE))
        np.testing.assert_allclose(be.memory.to_numpy(out), want, rtol=1e-4, atol=1e-4)


@pytest.fixture
def pick_cublaslt(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Kernel selection that picks cuBLASLt's first algorithm (without timing anything)."""
    be = ember.device("cuda:0").backend
    picked: list[str] = []

    def choose(key: Any, candidates: dict[str, Any], favoured: Any = ()) -> str:
        name = next(c for c in candidates if c.startswith("cublaslt:"))
        picked.append(name)
        return name

    monkeypatch.setattr(be.selector, "known", lambda key: None)
    monkeypatch.setattr(be.selector, "choose", choose)
    monkeypatch.setattr(be, "matmul_plans", {})
    monkeypatch.setattr(be, "use_vendor_gemm", True)
    return picked


def test_matmul_and_linear_through_cublaslt(pick_cublaslt: list[str]) -> None:
    dev = ember.device("cuda:0")
    rng = np.random.default_rng(4)
    m, k, n = 512, 784, 1024  # the MLP's first layer: above the size kernel selection times
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (n, k), (n,)))
    xt, wt, bt = (ember.tensor(v, device=dev) for v in (x, w, b))
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    for _ in range(3):  # selection, then the recorded plan with new output buffers
        np.testing.assert_allclose((xt @ wt.T).numpy(), x64 @ w64.T, rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(ember.nn.functional.linear(xt, wt, bt).numpy(),
                                   x64 @ w64.T + b, rtol=1e-4, atol=1e-3)
    assert len(pick_cublaslt) == 2  # one selection each; the rest replayed the plans
    assert dev.backend.matmul_plans


def test_selection_with_cublas_times_only_tritons_own_pick(monkeypatch: pytest.MonkeyPatch,
                                                           ) -> None:
    """Where Triton's configs were already timed for a bucket (``use_vendor_gemm`` off), the
    bucket with cuBLAS candidates times that pick against cuBLASLt's algorithms only."""
    import ember_triton.linalg as la

    be = ember.device("cuda:0").backend
    pick = la._config_name(la._CONFIGS["half"][2])
    offered: list[list[str]] = []

    def known(key: Any) -> str | None:
        return pick if key[-3] is False else None  # Triton-only buckets: already chosen

    def choose(key: Any, candidates: dict[str, Any], favoured: Any = ()) -> str:
        offered.append(list(candidates))
        return next(iter(candidates))

    monkeypatch.setattr(be.selector, "known", known)
    monkeypatch.setattr(be.selector, "choose", choose)
    monkeypatch.setattr(be, "matmul_plans", {})
    monkeypatch.setattr(be, "use_vendor_gemm", True)
    rng = np.random.default_rng(6)
    a, b = (rng.standard_normal((1024, 1024)).astype(np.float32) for _ in range(2))
    at, bt = (ember.tensor(v, dtype=ember.bfloat16, device=ember.device("cuda:0"))
              for v in (a, b))
    got = (at @ bt).to(dtype=ember.float64).numpy()
    want = at.to(dtype=ember.float64).numpy() @ bt.to(dtype=ember.float64).numpy()
    assert np.abs(got - want).max() <= 1.6e-2 * np.abs(want).max()
    assert len(offered) == 1
    assert offered[0][0] == pick
    assert len(offered[0]) > 1 and all(c.startswith("cublaslt:") for c in offered[0][1:])
