"""The vendor-GEMM hook (`ember_triton.vendor`): matmuls are right with no provider at all,
and a provider set on the backend is asked for each problem and runs the ones selection gives
it.  The provider here is a test double computing with numpy; the real one is
``ember_cuda.gemm.CublasGemm`` (checked on the GPU by ``packages/backend-cuda/tests``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ember
import numpy as np
import pytest

import ember_triton.linalg as la
from ember_triton.vendor import DeviceArray, MatmulPlan


def _host(be: Any, x: DeviceArray) -> np.ndarray:
    return np.asarray(be.memory.to_numpy(be.contiguous(x)))


class _Offer:
    def __init__(self, gemm: NumpyGemm, be: Any, out: DeviceArray, a: DeviceArray,
                 b: DeviceArray, bias: DeviceArray | None) -> None:
        self.gemm, self.be, self.operands = gemm, be, (out, a, b, bias)
        self.variant = "numpy"
        self.names: Sequence[str] = ("numpy:gemm",)

    def run(self, name: str) -> MatmulPlan | None:
        out, a, b, bias = self.operands
        self.gemm.runs.append(name)
        c = _host(self.be, a).astype(np.float64) @ _host(self.be, b).astype(np.float64)
        if bias is not None:
            c += _host(self.be, bias)
        # ``out`` is a fresh contiguous array: its host storage's bytes are its elements
        out.storage[out.offset * out.dtype.itemsize:][:c.size * out.dtype.itemsize].view(
            out.dtype)[...] = c.astype(out.dtype).ravel()
        return None


class NumpyGemm:
    """A `VendorGemm` that records what it is offered and computes with numpy."""

    def __init__(self, take: bool = True) -> None:
        self.take = take
        self.offers: list[tuple[tuple[int, ...], int, str, bool]] = []
        self.runs: list[str] = []

    def offer(self, backend: Any, out: DeviceArray, a: DeviceArray, b: DeviceArray,
              args: tuple[int, ...], batch: int, precision: str,
              bias: DeviceArray | None) -> _Offer | None:
        self.offers.append((args[:3], batch, precision, bias is not None))
        return _Offer(self, backend, out, a, b, bias) if self.take else None


@pytest.fixture
def be(dev: ember.Device, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The interpreter's backend with fresh matmul plans, every problem big enough to ask a
    provider, and selection that picks the provider's candidate where there is one."""
    backend = dev.backend
    monkeypatch.setattr(backend, "matmul_plans", {})
    monkeypatch.setattr(la, "TUNE_MIN_MACS", 0)

    def choose(key: Any, candidates: dict[str, Any], favoured: Any = ()) -> str:
        return next((c for c in candidates if c in favoured), next(iter(candidates)))

    monkeypatch.setattr(backend.selector, "choose", choose)
    return backend


def _problems(dev: ember.Device) -> list[tuple[Any, np.ndarray]]:
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (2, 20, 12)).astype(np.float32)
    b = rng.uniform(-1, 1, (12, 8)).astype(np.float32)
    w = rng.uniform(-1, 1, (8, 12)).astype(np.float32)
    bias = rng.uniform(-1, 1, 8).astype(np.float32)
    ta, tb, tw, tbias = (ember.tensor(v, device=dev) for v in (a, b, w, bias))
    a64 = a.astype(np.float64)
    return [(ta[0] @ tb, a64[0] @ b), (ta @ tb, a64 @ b),
            (ember.nn.functional.linear(ta[1], tw, tbias), a64[1] @ w.T + bias)]


def test_matmuls_are_right_with_no_provider(dev: ember.Device, be: Any) -> None:
    assert be.vendor_gemm is None  # the interpreter device has none
    for got, want in _problems(dev):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_a_provider_is_asked_and_runs_what_selection_gives_it(
        dev: ember.Device, be: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    gemm = NumpyGemm()
    monkeypatch.setattr(be, "vendor_gemm", gemm)
    for got, want in _problems(dev):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
    assert gemm.offers == [((20, 8, 12), 1, "ieee", False), ((20, 8, 12), 2, "ieee", False),
                           ((20, 8, 12), 1, "ieee", True)]
    assert gemm.runs == ["numpy:gemm"] * 3


def test_a_provider_that_declines_leaves_triton_and_one_switched_off_is_not_asked(
        dev: ember.Device, be: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    declining = NumpyGemm(take=False)
    monkeypatch.setattr(be, "vendor_gemm", declining)
    for got, want in _problems(dev):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
    assert len(declining.offers) == 3 and declining.runs == []
    off = NumpyGemm()
    monkeypatch.setattr(be, "vendor_gemm", off)
    monkeypatch.setattr(be, "use_vendor_gemm", False)
    for got, want in _problems(dev):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
    assert off.offers == [] and off.runs == []
