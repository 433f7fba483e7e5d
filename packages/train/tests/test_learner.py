"""The Learner in-process: loops, accumulation, schedulers, early stopping, artifacts."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tiny_run import build

import ember
import ember_train
from ember import nn, optim
from ember.data import DataLoader, TensorDataset
from ember.nn import functional as F
from ember_train import Checkpointer, EarlyStopping, Learner, StepOutput


def _weights(model) -> dict[str, bytes]:
    return {k: t.numpy().tobytes() for k, t in model.state_dict().items()}


def _linear_problem(n=64, batch=16, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    return DataLoader(TensorDataset(ember.tensor(x), ember.tensor(y)), batch_size=batch)


def _model(seed=0):
    m = nn.Linear(4, 2, generator=ember.Generator(seed))
    m.to("autodiff<cpu>")
    return m


def test_fit_learns_and_logs_every_split(tmp_path):
    model, opt, sched, train, valid = build()
    learner = Learner(model, opt, loss_fn=F.cross_entropy, scheduler=sched,
                      device="autodiff<cpu>", artifacts=tmp_path, renderer="none",
                      metrics=ember_train.default_metrics(num_classes=3), plots=False)
    result = learner.fit(train, valid, epochs=6)
    assert result.stop_reason == "completed" and result.epochs_done == 6
    losses = [r["loss"] for r in result.history["train"]]
    assert losses[-1] < losses[0] * 0.8
    rows = [json.loads(ln) for ln in (tmp_path / "metrics" / "valid.jsonl").read_text()
            .splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert {"loss", "accuracy", "precision", "recall", "f1", "items_per_s",
            "epoch_time_s", "memory_mib"} <= set(rows[0])
    # StepLR(step_size=2, gamma=0.5), stepped per epoch: lr halves every two epochs
    assert [r["lr"] for r in result.history["train"]] == pytest.approx(
        [0.02, 0.02, 0.01, 0.01, 0.005, 0.005])
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["learner"]["epochs"] == 6 and config["learner"]["optimizer"] == "Adam"
    assert (tmp_path / "model.safetensors").exists()


def test_accumulating_two_half_batches_equals_one_full_batch():
    full, half = _model(), _model()
    assert _weights(full) == _weights(half)
    Learner(full, optim.SGD(full.parameters(), lr=0.5), loss_fn=F.cross_entropy,
            device="autodiff<cpu>", renderer="none").fit(_linear_problem(batch=32), epochs=2)
    Learner(half, optim.SGD(half.parameters(), lr=0.5), loss_fn=F.cross_entropy,
            device="autodiff<cpu>", renderer="none", accumulate=2).fit(
        _linear_problem(batch=16), epochs=2)
    for (k, a), b in zip(full.state_dict().items(), half.state_dict().values(), strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)


def test_scheduler_per_step_moves_every_optimizer_step():
    model = _model()
    opt = optim.SGD(model.parameters(), lr=1.0)
    sched = optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    result = Learner(model, opt, loss_fn=F.cross_entropy, scheduler=sched,
                     scheduler_interval="step", device="autodiff<cpu>",
                     renderer="none").fit(_linear_problem(batch=16), epochs=1)  # 4 steps
    assert opt.param_groups[0]["lr"] == pytest.approx(1.0 / 16)
    # the logged lr is the one of the last step taken
    assert result.history["train"][0]["lr"] == pytest.approx(1.0 / 16)


def test_early_stopping_stops_after_patience_epochs_without_improvement():
    model = _model()
    opt = optim.SGD(model.parameters(), lr=0.0)  # nothing changes: no epoch improves
    stop = EarlyStopping("valid/loss", patience=2)
    result = Learner(model, opt, loss_fn=F.cross_entropy, device="autodiff<cpu>",
                     renderer="none", early_stopping=stop).fit(
        _linear_problem(), _linear_problem(), epochs=10)
    assert result.epochs_done == 3  # best at 1, then 2 epochs without a better value
    assert result.stop_reason.startswith("early stopping: valid/loss")


def test_min_delta_counts_small_gains_as_no_improvement():
    stop = EarlyStopping("valid/accuracy", patience=1, min_delta=0.05)
    assert stop.mode == "max"
    stop.update(1, {"valid": {"accuracy": 0.90}})
    stop.update(2, {"valid": {"accuracy": 0.93}})  # +0.03 < min_delta
    assert stop.should_stop() and stop.best == 0.90


def test_best_checkpoint_survives_pruning_and_becomes_the_served_model(tmp_path):
    model, opt, sched, train, valid = build()
    learner = Learner(model, opt, loss_fn=F.cross_entropy, scheduler=sched,
                      device="autodiff<cpu>", artifacts=tmp_path, renderer="none",
                      keep_last=1, best_metric="valid/loss", plots=False)
    result = learner.fit(train, valid, epochs=5)
    _, value, epoch = result.best
    names = [c.name for c in Checkpointer(tmp_path / "checkpoints").list()]
    assert f"epoch-{epoch:04d}" in names and "epoch-0005" in names and len(names) <= 2
    assert value == min(r["loss"] for r in result.history["valid"])
    best = ember_train.load_state(tmp_path / "checkpoints" / f"epoch-{epoch:04d}" /
                                  "model.safetensors")
    served = ember_train.load_state(tmp_path / "model.safetensors")
    assert {k: t.numpy().tobytes() for k, t in best.items()} == {
        k: t.numpy().tobytes() for k, t in served.items()}


def test_model_with_its_own_steps():
    class Wrapped(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 2, generator=ember.Generator(0))
            self.calls = {"train": 0, "valid": 0}

        def train_step(self, batch):
            self.calls["train"] += 1
            x, y = batch
            out = self.net(x)
            return StepOutput(F.cross_entropy(out, y), out, y)

        def valid_step(self, batch):
            self.calls["valid"] += 1
            x, y = batch
            return F.cross_entropy(self.net(x), y)  # a bare loss: no accuracy

    model = Wrapped()
    model.to("autodiff<cpu>")
    result = Learner(model, optim.SGD(model.parameters(), lr=0.1), device="autodiff<cpu>",
                     renderer="none").fit(_linear_problem(), _linear_problem(), epochs=1)
    assert model.calls == {"train": 4, "valid": 4}
    assert result.history["train"][0]["accuracy"] is not None
    assert result.history["valid"][0]["accuracy"] is None  # no output given, metric skipped


def test_validate_runs_in_eval_mode_without_gradients():
    model = nn.Sequential(nn.Linear(4, 2), nn.Dropout(0.9))
    model.to("autodiff<cpu>")
    learner = Learner(model, loss_fn=F.cross_entropy, device="autodiff<cpu>", renderer="none")
    a = learner.validate(_linear_problem())
    b = learner.validate(_linear_problem())
    assert a["loss"] == b["loss"]  # dropout off: deterministic
    assert model.training  # back in training mode afterwards


def test_model_on_another_device_is_refused_with_a_hint():
    with pytest.raises(ValueError, match=r"model\.to\('autodiff<cpu>'\)"):
        Learner(nn.Linear(2, 2), device="autodiff<cpu>")


def test_resume_in_process_is_bit_exact(tmp_path):
    model, opt, sched, train, valid = build()
    Learner(model, opt, loss_fn=F.cross_entropy, scheduler=sched, device="autodiff<cpu>",
            renderer="none", plots=False).fit(train, valid, epochs=4)
    want = _weights(model)
    for epochs in (2, 4):
        model, opt, sched, train, valid = build()
        Learner(model, opt, loss_fn=F.cross_entropy, scheduler=sched, device="autodiff<cpu>",
                artifacts=tmp_path, renderer="none", plots=False).fit(
            train, valid, epochs=epochs, resume=True)
    assert _weights(model) == want


@pytest.mark.parametrize("device", ["autodiff<cpu>", "autodiff<fusion<cpu>>"])
def test_compiled_steps_train_to_the_same_weights_and_metrics(device):
    """compile=True traces the train and valid steps and replays them (a partial last batch
    and the per-epoch learning rate included): the weights and metrics match eager's."""
    results, weights, learners = [], [], []
    for compile_ in (False, True):
        rng = np.random.default_rng(0)
        x = rng.normal(size=(70, 4)).astype(np.float32)  # 70 = 4 batches of 16 and one of 6
        y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
        data = DataLoader(TensorDataset(ember.tensor(x), ember.tensor(y)), batch_size=16)
        g = ember.Generator(3)
        model = nn.Sequential(nn.Linear(4, 8, generator=g), nn.Tanh(),
                              nn.Linear(8, 2, generator=g))
        model.to(device)
        opt = optim.AdamW(model.parameters(), lr=0.05)
        sched = optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        learner = Learner(model, opt, loss_fn=F.cross_entropy, scheduler=sched, device=device,
                          renderer="none", plots=False, compile=compile_)
        learner.fit(data, data, epochs=3)
        results.append(learner.validate(data))
        weights.append({k: t.numpy() for k, t in model.state_dict().items()})
        learners.append(learner)
    eager, compiled = weights
    for k in eager:
        np.testing.assert_allclose(compiled[k], eager[k], rtol=1e-5, atol=1e-6, err_msg=k)
    assert results[1]["loss"] == pytest.approx(results[0]["loss"], rel=1e-5)
    stats = learners[1]._compiled["train"].compiled.stats
    # two shapes (16 and 6 rows); the first call of each creates optimizer state or is new
    assert stats.replays >= 3 * 5 - 5, stats
    assert stats.traces <= 4, stats
