"""The summary that closes a run names one best epoch, beside the checkpoint holding it."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import numpy as np

import ember
import ember_train
from ember import nn, optim
from ember.data import DataLoader, TensorDataset
from ember.nn import functional as F
from ember_train import EarlyStopping, Learner, PlainRenderer, RunView

X = np.random.default_rng(0).normal(size=(48, 4)).astype(np.float32)
Y = (X[:, 0] > 0).astype(np.int64)


class TurningLoader:
    """Batches of the validation task for the first ``turn`` epochs, then of its opposite
    (labels swapped): the validation loss falls, then rises, so the best epoch is ``turn``."""

    def __init__(self, turn: int) -> None:
        self.turn, self.epoch = turn, 0
        self.right = DataLoader(TensorDataset(ember.tensor(X), ember.tensor(Y)), batch_size=16)
        self.wrong = DataLoader(TensorDataset(ember.tensor(X), ember.tensor(1 - Y)),
                                batch_size=16)

    def set_epoch(self, epoch: int) -> None:  # the Learner calls it with epoch - 1
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.right)

    def __iter__(self) -> Any:
        return iter(self.right if self.epoch < self.turn else self.wrong)


class Snapshots:
    """The model's weights at the end of each epoch (a callback)."""

    def __init__(self) -> None:
        self.weights: dict[int, dict[str, bytes]] = {}

    def on_epoch_end(self, learner: Learner, epoch: int, results: Any) -> None:
        self.weights[epoch] = _bytes(learner.model.state_dict())


def _bytes(state: dict[str, Any]) -> dict[str, bytes]:
    return {k: t.numpy().tobytes() for k, t in state.items()}


def _run(tmp_path: Path, turn: int = 2, epochs: int = 10, **kwargs: Any
         ) -> tuple[ember_train.FitResult, list[str], Snapshots]:
    model = nn.Linear(4, 2, generator=ember.Generator(0))
    model.to("autodiff<cpu>")
    out, snapshots = io.StringIO(), Snapshots()
    valid = DataLoader(TensorDataset(ember.tensor(X), ember.tensor(Y)), batch_size=48)
    learner = Learner(model, optim.SGD(model.parameters(), lr=0.5), loss_fn=F.cross_entropy,
                      device="autodiff<cpu>", artifacts=tmp_path, keep_last=1, plots=False,
                      renderer=PlainRenderer(RunView(), out), callbacks=[snapshots], **kwargs)
    result = learner.fit(TurningLoader(turn), valid, epochs=epochs)
    text = out.getvalue().splitlines()
    return result, text[text.index("summary") + 1:], snapshots


def _said(summary: list[str]) -> dict[str, str]:
    return dict(ln.strip().split(": ", 1) for ln in summary if re.match(r"  \S[^:]*: ", ln))


def test_summary_names_the_best_epoch_once_beside_its_checkpoint(tmp_path):
    result, summary, snapshots = _run(
        tmp_path, early_stopping=EarlyStopping("valid/loss", patience=2))
    losses = [r["loss"] for r in result.history["valid"]]
    best = int(np.argmin(losses)) + 1
    assert best == 2 and result.epochs_done == 4  # falls for 2 epochs, rises for 2: a stop
    assert sum(bool(re.search(r"\bepochs? \d", ln)) for ln in summary) == 1, summary
    said = _said(summary)
    where = tmp_path / "checkpoints" / "epoch-0002"
    assert said["best"] == (f"valid/loss {losses[1]:.4f} at epoch 2: {where}, its weights in "
                            f"{tmp_path / 'model.safetensors'}")
    assert said["stopped"] == ("early stopping: valid/loss did not improve by more than 0.0 "
                               "for 2 epochs")
    assert said["last checkpoint"] == str(tmp_path / "checkpoints" / "epoch-0004")
    assert "checkpoint" not in said
    saved = _bytes(ember_train.load_state(where / "model.safetensors"))
    assert saved == snapshots.weights[2] != snapshots.weights[4]
    assert _bytes(ember_train.load_state(tmp_path / "model.safetensors")) == saved


def test_best_metric_other_than_early_stoppings_is_the_one_epoch_named(tmp_path):
    result, summary, _ = _run(tmp_path, early_stopping=EarlyStopping("valid/loss", patience=2),
                              best_metric="valid/accuracy")
    metric, _, epoch = result.best
    assert metric == "valid/accuracy"
    assert [ln for ln in summary if re.search(r"\bepochs? \d", ln)] == [
        f"  best: valid/accuracy {result.best[1]:.4f} at epoch {epoch}: "
        f"{tmp_path / 'checkpoints' / f'epoch-{epoch:04d}'}, its weights in "
        f"{tmp_path / 'model.safetensors'}"]


def test_no_last_checkpoint_line_when_the_last_epoch_is_the_best(tmp_path):
    result, summary, snapshots = _run(tmp_path, turn=10, epochs=3, best_metric="valid/loss")
    assert result.best[2] == 3
    said = _said(summary)
    assert said["best"].startswith("valid/loss ") and ": " + str(
        tmp_path / "checkpoints" / "epoch-0003") in said["best"]
    assert "last checkpoint" not in said and "checkpoint" not in said
    saved = ember_train.load_state(tmp_path / "checkpoints" / "epoch-0003" / "model.safetensors")
    assert _bytes(saved) == snapshots.weights[3]


def test_without_a_best_metric_the_last_checkpoint_is_labelled_as_such(tmp_path):
    result, summary, _ = _run(tmp_path, epochs=3)
    said = _said(summary)
    assert result.best is None and "best" not in said
    assert said["last checkpoint"] == str(tmp_path / "checkpoints" / "epoch-0003")
