"""The CPU fusion compiler's blocked path: blocks handed out to two threads, scalars read as
filled blocks, reciprocal as a division; every result bit for bit the cpu backend's."""

from __future__ import annotations

import threading

import ember
import numpy as np
import pytest

from ember_cpu import fusion

N = 4096 * 12 + 77  # 13 blocks of 4096: past THREAD_MIN_BLOCKS, a short last block
DEVICE = "fusion<cpu,chunk=4096,threads=2>"


def _edges(n: int, seed: int = 0) -> np.ndarray:
    a = np.random.default_rng(seed).standard_normal(n).astype(np.float32) * 4
    a[:8] = [np.nan, -0.0, 0.0, np.inf, -np.inf, 1e-40, -1e-40, 88.0]
    return a


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    bits = {4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
    # nan payloads aside (conformance treats every nan alike), the very same bits
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(bits), want[~nan].view(bits))


def chain(x: ember.Tensor) -> ember.Tensor:
    v = (x * 1.5 + 0.25).relu() * 0.5 - 1
    return v * v.sigmoid()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_chain_blocked_on_two_threads_is_the_cpu_result(dtype: type) -> None:
    a = _edges(N).astype(dtype)
    want = chain(ember.tensor(a)).numpy()
    for _ in range(3):  # the block buffers are reused from call to call
        _same(chain(ember.tensor(a, device=DEVICE)).numpy(), want)


@pytest.mark.parametrize("op", ["maximum", "minimum", "clamp_min", "clamp_max", "clamp",
                                "reciprocal", "rsqrt"])
def test_scalar_operands_and_division_give_the_cpu_bits(op: str) -> None:
    a = _edges(N, 1)
    b = _edges(N, 2)

    def f(x: ember.Tensor, y: ember.Tensor, s: float) -> ember.Tensor:
        v = x * y + 0.5
        if op == "maximum":
            v = ember.maximum(v, ember.tensor(np.float32(s), device=v.device))
        elif op == "minimum":
            v = ember.minimum(ember.tensor(np.float32(s), device=v.device), v)
        elif op == "clamp_min":
            v = v.clamp(min=s)
        elif op == "clamp_max":
            v = v.clamp(max=s)
        elif op == "clamp":
            v = v.clamp(min=-s, max=s)
        elif op == "reciprocal":
            v = v.reciprocal()
        else:
            v = v.abs().rsqrt()
        return v * 2 - y

    # one compiled kernel, new scalars each call (clamp's bounds are params: -0.0 there
    # differs from the cpu's before this change too, a separate matter)
    scalars = (0.0, 1.25, float("nan")) if op.startswith("clamp") else (0.0, -0.0, 1.25,
                                                                          float("nan"))
    for s in scalars:
        with np.errstate(all="ignore"):  # inf - inf on the cpu (fusion is quiet)
            want = f(ember.tensor(a), ember.tensor(b), s).numpy()
        got = f(ember.tensor(a, device=DEVICE), ember.tensor(b, device=DEVICE), s).numpy()
        _same(got, want)


def test_blocks_go_to_whichever_thread_is_free(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    real = fusion._BlockedKernel._thread_buffers

    def spy(self: fusion._BlockedKernel, fills: list, fast: bool = False) -> tuple[list, list]:
        seen.append(threading.current_thread().name)
        return real(self, fills, fast)

    monkeypatch.setattr(fusion._BlockedKernel, "_thread_buffers", spy)
    a = _edges(4096 * 64)
    want = chain(ember.tensor(a)).numpy()
    for _ in range(5):
        _same(chain(ember.tensor(a, device=DEVICE)).numpy(), want)
    # the caller always takes part; a helper joins when it wakes in time (not asserted:
    # a busy machine may keep it off its core for the whole call)
    assert seen.count("MainThread") == 5
    assert set(seen) <= {"MainThread", "ember-fusion"}


def test_small_groups_run_on_the_caller_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> None:
        raise AssertionError("a small group was handed to helper threads")

    monkeypatch.setattr(fusion._HELPERS, "run", refuse)
    a = _edges(4096 * (fusion.THREAD_MIN_BLOCKS - 1))
    _same(chain(ember.tensor(a, device=DEVICE)).numpy(), chain(ember.tensor(a)).numpy())
    small = _edges(100)
    _same(chain(ember.tensor(small, device="fusion<cpu>")).numpy(),
          chain(ember.tensor(small)).numpy())


def test_an_error_in_a_block_reaches_the_caller() -> None:
    calls: list[int] = []

    def fn(i: int) -> None:
        calls.append(i)
        if i == 5:
            raise ValueError("block 5")

    with pytest.raises(ValueError, match="block 5"):
        fusion._HELPERS.run(fn, 12, 2)
    fusion._HELPERS.run(calls.append, 12, 2)  # the helpers still serve
    assert sorted(calls[-12:]) == list(range(12))
