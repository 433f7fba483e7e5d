"""``benchmarks/gpu/_llama.py`` on the CPU with its tiny Llama-style model: ember's greedy
decode (eager, and compiled with the position as a device tensor) emits PyTorch's tokens for
the same weights, and the script's check passes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

GPU_BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="needs PyTorch (the peer)")


@pytest.fixture(scope="module")
def llama() -> Any:
    sys.path.insert(0, str(GPU_BENCH))
    try:
        import _llama as module
    finally:
        sys.path.remove(str(GPU_BENCH))
    return module


def test_tiny_llama_greedy_decode_equals_pytorchs_eager_and_compiled(llama: Any) -> None:
    import torch

    import ember

    cfg = llama.TINY
    state = llama.init_state(cfg, std=1.0)
    prompt = np.random.default_rng(0).integers(0, cfg.vocab, (2, 8))
    tm = llama.llama(torch, cfg, 2)
    tm.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    with torch.no_grad():
        want = llama.greedy_decode(torch, tm, torch.tensor(prompt), 20).numpy()
        logits = tm(torch.tensor(want[:, :-1]), 0)[:, 7:]
    top2 = logits.topk(2, -1).values
    assert (top2[..., 0] - top2[..., 1]).min() > 1e-2  # no near-tie a rounding could flip
    assert len(set(want[:, 8:].ravel().tolist())) > 10  # not one token repeated
    with ember.no_grad():
        em = llama.llama(ember, cfg, 2)
        em.load_state_dict(state)
        np.testing.assert_allclose(em(ember.tensor(want[:, :-1]), 0).numpy()[:, 7:],
                                   logits.numpy(), rtol=1e-3, atol=1e-3)
        eager = llama.greedy_decode(ember, em, ember.tensor(prompt), 20).numpy()
        step = ember.compile(llama.greedy_step(em))
        compiled = llama.greedy_decode(ember, em, ember.tensor(prompt), 20, step).numpy()
    np.testing.assert_array_equal(eager, want)
    np.testing.assert_array_equal(compiled, want)
    assert (step.stats.traces, step.stats.replays) == (1, 18)


def test_decode_script_checks_every_mode_against_pytorch(capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    sys.path.insert(0, str(GPU_BENCH))
    try:
        import llama_decode
    finally:
        sys.path.remove(str(GPU_BENCH))
    assert llama_decode.main(["--tiny", "--prompt", "4", "--new", "6", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "greedy tokens equal PyTorch's: PASS" in out
    assert all(m in out for m in llama_decode.MODES)
