"""``benchmarks/gpu/gpt2.py`` on the CPU with its tiny GPT-2 (2 layers, width 64, vocabulary
256, sequence 32): ember's eager and compiled training losses equal PyTorch's in float32, and
the script's check fails a run that trains differently."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

GPU_BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="needs PyTorch (the peer)")


@pytest.fixture(scope="module")
def gpt2() -> Any:
    sys.path.insert(0, str(GPU_BENCH))
    try:
        import gpt2 as module
    finally:
        sys.path.remove(str(GPU_BENCH))
    return module


def test_tiny_gpt2_trains_to_pytorchs_losses_eager_and_compiled(gpt2: Any) -> None:
    setup = gpt2.prepare(gpt2.TINY, "cpu", batch=4, precision="fp32")
    runs = gpt2.run_all(setup, 6, ("torch eager", "ember eager", "ember compiled"),
                        gpt2.Log(quiet=True))
    ref = runs["torch eager"].losses
    assert len(ref) == 6
    assert ref[0] - ref[-1] > 0.1  # it learns: the comparison below is not between flat lines
    for mode in ("ember eager", "ember compiled"):
        run = runs[mode]
        assert run.error is None, run.error
        assert run.losses == pytest.approx(ref, rel=1e-4), mode
        model = run.side.model
        assert model.lm_head.weight is model.transformer.wte.weight  # still tied
        assert gpt2.count_params(model) == gpt2.count_params(runs["torch eager"].side.model)
    check = gpt2.loss_check(runs, "fp32")
    assert all(c["ok"] for c in check.values()), check


def test_loss_check_fails_a_run_whose_losses_drift_or_drop_differently(gpt2: Any) -> None:
    ref = [10.9, 10.0, 9.2, 8.5]
    runs = {"torch eager": gpt2.Run("torch eager", ref),
            "ember eager": gpt2.Run("ember eager", [10.9, 10.1, 9.4, 8.8]),
            "ember compiled": gpt2.Run("ember compiled", [10.91, 10.02, 9.19, 8.52])}
    check = gpt2.loss_check(runs, "bf16")
    assert check["ember compiled"]["ok"]
    # within a few percent at every step, but the loss drops by 2.1 where PyTorch's drops 2.4
    assert check["ember eager"]["max_rel"] < 5e-2 and not check["ember eager"]["ok"]
    assert not gpt2.loss_check(runs, "fp32")["ember eager"]["ok"]


def test_script_runs_on_the_cpu_and_reports_every_mode(gpt2: Any, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    out = tmp_path / "gpt2.json"
    rc = gpt2.main(["--device", "cpu", "--tiny", "--steps", "3", "--rounds", "1", "--reps", "1",
                    "--json", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    result = json.loads(out.read_text())
    assert result["precision"] == "fp32" and not result["failed"]
    assert set(result["ms_per_step"]) == {"torch eager", "ember eager", "ember compiled"}
    assert all(ms > 0 for ms in result["ms_per_step"].values())
    assert "loss check: PASS" in printed and "tokens/s" in printed


def test_compiled_gradients_under_autocast_equal_eager_on_new_batches(gpt2: Any) -> None:
    """With the weights fixed, a compiled step's gradients on each new batch equal eager's
    (bf16 autocast; the trace's batch differs from every replay's).  The hardware device is
    ``$EMBER_GPT2_DEVICE`` (``cuda:0`` on a GPU machine), ``cpu`` by default."""
    import os

    import numpy as np

    import ember

    hw = os.environ.get("EMBER_GPT2_DEVICE", "cpu")
    setup = gpt2.prepare(gpt2.TINY, hw, batch=4, precision="bf16", n_batches=3)
    dev = f"autodiff<{hw}>"
    model = sys.modules["_gpt2"].gpt2(ember, setup.cfg, device=dev)
    model.load_state_dict(setup.state)
    names, params = zip(*model.named_parameters(), strict=True)
    data = [(ember.tensor(x, device=dev), ember.tensor(y, device=dev)) for x, y in setup.data]

    def grads(x: Any, y: Any) -> Any:
        with ember.autocast(setup.device_type, dtype=ember.bfloat16):
            loss = model(x, y)
        g = loss.backward()
        return loss, [g[p] for p in params]

    def host(out: Any) -> list[np.ndarray]:
        loss, gs = out
        return [loss.detach().numpy().astype(np.float64),
                *(g.numpy().astype(np.float64) for g in gs)]

    eager = [host(grads(*b)) for b in data]
    compiled = ember.compile(grads)
    got = [host(compiled(*b)) for b in data]
    assert compiled.stats.traces == 1 and compiled.stats.replays == 2
    assert not np.array_equal(eager[0][0], eager[1][0])  # the batches differ
    for b, (want, have) in enumerate(zip(eager, got, strict=True)):
        for name, w, h in zip(("loss", *names), want, have, strict=True):
            np.testing.assert_allclose(h, w, rtol=1e-5, atol=1e-6,
                                       err_msg=f"batch {b}: {name}")
