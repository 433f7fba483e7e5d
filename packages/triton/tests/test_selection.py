"""Kernel selection (timed choice per shape bucket, cached on disk) and the tile matmul kernel
every candidate config runs, checked on the interpreter against numpy float64."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import ember
import numpy as np
import pytest

from ember_triton._autotune import MARGIN, ROUNDS, KernelSelector, bucket


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("EMBER_AUTOTUNE", raising=False)
    return tmp_path


def _timer(costs: dict[str, float], calls: list[str]) -> Callable[[Callable[[], str]], float]:
    def timer(fn: Callable[[], str]) -> float:
        name = fn()
        calls.append(name)
        return costs[name]
    return timer


def _cands(ran: list[str]) -> dict[str, Callable[[], str]]:
    def make(name: str) -> Callable[[], str]:
        def run() -> str:
            ran.append(name)
            return name
        return run
    return {n: make(n) for n in ("triton:a", "triton:b", "cublas")}


def test_selector_picks_the_fastest_and_runs_it_last(cache: Path) -> None:
    calls: list[str] = []
    ran: list[str] = []
    sel = KernelSelector("GPU X sm90", _timer({"triton:a": 3.0, "triton:b": 1.0,
                                               "cublas": 2.0}, calls))
    assert sel.choose(("matmul", 64), _cands(ran)) == "triton:b"
    order = ["triton:a", "triton:b", "cublas"]
    # the first candidate is timed once to see whether the GPU needs heating, then rounds
    # interleave the candidates, each round starting one candidate later
    assert calls == ["triton:a"] + [c for r in range(ROUNDS) for c in order[r:] + order[:r]]
    assert ran[-1] == "triton:b"  # the winner's result is what is left in the output
    assert sel.timings(("matmul", 64)) == {"triton:a": 3.0, "triton:b": 1.0, "cublas": 2.0}
    calls.clear()
    assert sel.choose(("matmul", 64), _cands(ran)) == "triton:b"
    assert calls == []  # remembered: no second timing


def test_rounds_interleave_and_each_candidate_keeps_its_best(cache: Path) -> None:
    # a clock that slows down while candidates are timed: the first round favours the
    # first candidate, later rounds show which is really faster
    seen: list[str] = []

    def drifting(fn: Callable[[], str]) -> float:
        name = fn()
        seen.append(name)
        slow = 1.0 + 0.5 * (len(seen) - 1) / 3 if len(seen) <= 3 else 1.0
        return {"triton:a": 1.1, "triton:b": 2.0, "cublas": 1.0}[name] * slow
    sel = KernelSelector(None, drifting)
    assert sel.choose(("k",), _cands([])) == "cublas"
    assert sel.timings(("k",)) == {"triton:a": 1.1, "triton:b": 2.0, "cublas": 1.0}


def test_favoured_candidates_lose_only_by_more_than_the_margin(cache: Path) -> None:
    costs = {"triton:a": 1.0, "triton:b": 3.0, "cublas": 1.0 + MARGIN / 2}
    sel = KernelSelector(None, _timer(costs, []))
    assert sel.choose(("k",), _cands([]), favoured=["cublas"]) == "cublas"
    costs["cublas"] = 1.0 + 2 * MARGIN
    assert sel.choose(("k", 2), _cands([]), favoured=["cublas"]) == "triton:a"
    assert sel.choose(("k", 3), _cands([])) == "triton:a"  # nothing favoured: the fastest


def test_choice_persists_per_device_model_across_selectors(cache: Path) -> None:
    sel = KernelSelector("GPU X sm90", _timer({"triton:a": 1.0, "triton:b": 2.0,
                                               "cublas": 3.0}, []))
    sel.choose(("k", 1), _cands([]))
    assert sel.path is not None and sel.path.parent == cache / "autotune"
    assert json.loads(sel.path.read_text())["choices"] == {"('k', 1)": "triton:a"}

    def no_timing(fn: Callable[[], str]) -> float:
        raise AssertionError("a cached choice must not be timed again")
    again = KernelSelector("GPU X sm90", no_timing)
    assert again.choose(("k", 1), _cands([])) == "triton:a"
    other = KernelSelector("GPU Y sm80", _timer({"triton:a": 5.0, "triton:b": 2.0,
                                                 "cublas": 3.0}, []))
    assert other.choose(("k", 1), _cands([])) == "triton:b"  # another model tunes itself
    assert other.path != sel.path
    assert not list((cache / "autotune").glob("*.tmp"))  # written atomically, nothing left over


def test_corrupt_cache_file_warns_and_is_rewritten(cache: Path) -> None:
    probe = KernelSelector("GPU Z sm90", lambda fn: 1.0)
    assert probe.path is not None
    probe.path.parent.mkdir(parents=True)
    probe.path.write_text("{not json")
    with pytest.warns(RuntimeWarning, match="ignoring the kernel-selection cache"):
        sel = KernelSelector("GPU Z sm90", _timer({"triton:a": 2.0, "triton:b": 1.0,
                                                   "cublas": 3.0}, []))
    assert sel.choose(("k",), _cands([])) == "triton:b"
    assert json.loads(probe.path.read_text())["choices"] == {"('k',)": "triton:b"}


def test_failing_candidate_is_skipped_with_a_warning(cache: Path) -> None:
    def timer(fn: Callable[[], str]) -> float:
        name = fn()
        if name == "triton:a":
            raise RuntimeError("out of shared memory")
        return {"triton:b": 2.0, "cublas": 1.0}[name]
    sel = KernelSelector(None, timer)
    with pytest.warns(RuntimeWarning, match="'triton:a'.*out of shared memory"):
        assert sel.choose(("k",), _cands([])) == "cublas"

    def broken(fn: Callable[[], str]) -> float:
        raise RuntimeError("no")
    with pytest.warns(RuntimeWarning), pytest.raises(RuntimeError, match="every kernel candidate"):
        KernelSelector(None, broken).choose(("k",), _cands([]))


def test_autotune_off_takes_the_first_candidate_untimed(cache: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_AUTOTUNE", "0")

    def no_timing(fn: Callable[[], str]) -> float:
        raise AssertionError("timing is off")
    assert KernelSelector("GPU X sm90", no_timing).choose(("k",), _cands([])) == "triton:a"
    assert not (cache / "autotune").exists()


def test_bucket_is_the_next_power_of_two() -> None:
    assert [bucket(n) for n in (0, 1, 2, 3, 64, 65, 4096, 4097)] == [0, 1, 2, 4, 64, 128, 4096,
                                                                    8192]


@pytest.mark.parametrize("cfg", [(16, 16, 16, 1), (16, 32, 16, 2), (32, 16, 16, 3)])
@pytest.mark.parametrize("layout", ["nn", "tn", "nt"])
def test_tile_matmul_kernel_matches_numpy_for_every_grouping(dev: ember.Device,
                                                             cfg: tuple[int, int, int, int],
                                                             layout: str) -> None:
    """Tiles that wrap at M and N, a ragged K tail, grouped tile order, transposed operands."""
    be = dev.backend
    rng = np.random.default_rng(1)
    m, n, k = 50, 70, 40
    a = rng.uniform(-1, 1, (k, m)).T if layout[0] == "t" else rng.uniform(-1, 1, (m, k))
    b = rng.uniform(-1, 1, (n, k)).T if layout[1] == "t" else rng.uniform(-1, 1, (k, n))
    xa = be.memory.from_numpy(np.ascontiguousarray(a.T if layout[0] == "t" else a)
                              .astype(np.float32))
    xb = be.memory.from_numpy(np.ascontiguousarray(b.T if layout[1] == "t" else b)
                              .astype(np.float32))
    if layout[0] == "t":
        xa = xa.transpose((1, 0))
    if layout[1] == "t":
        xb = xb.transpose((1, 0))
    out = be.empty((m, n), np.float32)
    bias = rng.uniform(-1, 1, n).astype(np.float32)
    xbias = be.memory.from_numpy(bias)
    bm, bn, bk, group = cfg
    grid = (-(-m // bm) * -(-n // bn), 1)
    # the bias epilogue (`ember.ops.composite.linear`); a K-major B also as transposed tiles
    for has_bias, kmajor in [(False, False), (True, False)] + (
            [(False, True), (True, True)] if layout[1] == "t" else []):
        be.launch(be.module("linalg").matmul_dot, grid, out, xa, xb, xbias, m, n, k, 1, 0, 0,
                  xa.strides[0], xa.strides[1], 0, 0, xb.strides[0], xb.strides[1], k,
                  PRECISION="ieee", UPCAST=False, WIDE=False, BM=bm, BN=bn, BK=bk,
                  GROUP_M=group, EVEN_K=k % bk == 0, HAS_BIAS=has_bias, B_KMAJOR=kmajor)
        want = a @ b + bias if has_bias else a @ b
        np.testing.assert_allclose(be.memory.to_numpy(out), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
def test_tf32_matmul_reads_both_operands_k_major(dev: ember.Device,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 layout: str) -> None:
    """With ``matmul_precision="tf32"`` a 2-D float32 matmul copies an operand whose K axis is
    not contiguous and loads B as transposed tiles; the result is the same product."""
    be = dev.backend
    monkeypatch.setattr(be, "matmul_precision", "tf32")
    rng = np.random.default_rng(3)
    m, n, k = 33, 20, 45
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    xa = ember.tensor(a.T.copy(), device=dev).T if layout[0] == "t" else ember.tensor(
        a, device=dev)
    xb = ember.tensor(b.T.copy(), device=dev).T if layout[1] == "t" else ember.tensor(
        b, device=dev)
    got = (xa @ xb).numpy()
    # tf32 keeps 10 mantissa bits of each operand: products good to about 1e-3
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=0,
                               atol=5e-3 * np.sqrt(k))


def test_big_candidates_heat_the_gpu_before_the_rounds(cache: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A candidate of HEAT_MIN_MS or more per call runs about HEAT_MS untimed before the
    timed rounds (so all are timed at the GPU's sustained clock); a small one does not."""
    import ember_triton._autotune as at

    monkeypatch.setattr(at, "HEAT_MS", 40.0)
    for per_call, heated in ((2 * at.HEAT_MIN_MS, int(40.0 / (2 * at.HEAT_MIN_MS))),
                             (at.HEAT_MIN_MS / 2, 0)):
        calls: list[str] = []
        ran: list[str] = []
        sel = KernelSelector(None, _timer({"triton:a": per_call, "triton:b": per_call * 2,
                                           "cublas": per_call * 3}, calls))
        assert sel.choose(("k", per_call), _cands(ran)) == "triton:a"
        timed = len(calls)
        # untimed calls: the heating, all of the first, and the winner's last run
        assert len(ran) == timed + heated + 1
        assert ran[:heated + 1] == ["triton:a"] * (heated + 1)
