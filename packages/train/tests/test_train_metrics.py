"""Metrics against scikit-learn's, accumulated over several steps."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import f1_score, precision_score, recall_score, top_k_accuracy_score

import ember
from ember_train import (
    F1,
    Accuracy,
    LearningRate,
    Loss,
    Precision,
    ProcessMemory,
    Recall,
    StepView,
    Throughput,
    TopKAccuracy,
)


def _steps(seed=0, n_steps=4, batch=25, classes=5):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_steps):
        logits = rng.normal(size=(batch, classes)).astype(np.float32)
        target = rng.integers(0, classes, size=batch)
        # make it better than chance so the scores are not all tiny
        logits[np.arange(batch), target] += rng.normal(1.0, 1.0, size=batch).astype(np.float32)
        out.append((logits, target))
    return out


def _run(metric, steps):
    metric.reset()
    for logits, target in steps:
        metric.update(StepView(ember.tensor(1.0), ember.tensor(logits), ember.tensor(target),
                               len(target), 0.1, 0.01))
    return metric.compute()


@pytest.mark.parametrize(("metric", "oracle"), [
    (Precision(5), lambda y, p: precision_score(y, p, average="macro", zero_division=0)),
    (Recall(5), lambda y, p: recall_score(y, p, average="macro", zero_division=0)),
    (F1(5), lambda y, p: f1_score(y, p, average="macro", zero_division=0)),
    (Accuracy(), lambda y, p: float((y == p).mean())),
])
def test_classification_metrics_match_sklearn_over_several_steps(metric, oracle):
    steps = _steps()
    y = np.concatenate([t for _, t in steps])
    p = np.concatenate([lg.argmax(-1) for lg, _ in steps])
    assert _run(metric, steps) == pytest.approx(oracle(y, p), abs=1e-12)


def test_top_k_accuracy_matches_sklearn():
    steps = _steps(seed=1)
    y = np.concatenate([t for _, t in steps])
    scores = np.concatenate([lg for lg, _ in steps])
    want = top_k_accuracy_score(y, scores, k=3, labels=range(5))
    assert _run(TopKAccuracy(3), steps) == pytest.approx(want)
    assert TopKAccuracy(3).name == "top3_accuracy"


def test_macro_scores_leave_out_classes_never_seen():
    # class 2 neither appears nor is predicted: it must not drag the mean down
    logits = np.eye(3, dtype=np.float32)[[0, 1, 0, 1]]
    target = np.array([0, 1, 0, 0])
    steps = [(logits, target)]
    assert _run(Recall(3), steps) == pytest.approx(
        recall_score(target, logits.argmax(-1), average="macro", zero_division=0))
    assert _run(F1(3), steps) == pytest.approx(
        f1_score(target, logits.argmax(-1), average="macro", zero_division=0))


def test_loss_is_weighted_by_items():
    m = Loss()
    m.reset()
    m.update(StepView(ember.tensor(1.0), None, None, 30, None, 0.1))
    m.update(StepView(ember.tensor(4.0), None, None, 10, None, 0.1))
    assert m.compute() == pytest.approx((30 * 1.0 + 10 * 4.0) / 40)


def test_throughput_and_lr():
    t, lr = Throughput(), LearningRate()
    for m in (t, lr):
        m.reset()
    for i in range(3):
        v = StepView(ember.tensor(0.0), None, None, 50, 0.1 / (i + 1), 0.5)
        t.update(v)
        lr.update(v)
    assert t.compute() == pytest.approx(150 / 1.5)
    assert lr.compute() == pytest.approx(0.1 / 3)


def test_process_memory_is_plausible():
    m = ProcessMemory()
    m.reset()
    mib = m.compute()
    assert 10 < mib < 64 * 1024


def test_metric_state_resumes_the_accumulation():
    steps = _steps(seed=2)
    whole = _run(F1(5), steps)
    a = F1(5)
    a.reset()
    for logits, target in steps[:2]:
        a.update(StepView(ember.tensor(1.0), ember.tensor(logits), ember.tensor(target),
                          len(target), None, 0.0))
    saved = a.state_dict()
    b = F1(5)
    b.reset()
    b.load_state_dict(saved)
    for logits, target in steps[2:]:
        b.update(StepView(ember.tensor(1.0), ember.tensor(logits), ember.tensor(target),
                          len(target), None, 0.0))
    assert b.compute() == whole
