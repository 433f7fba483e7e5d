"""The guide example end to end on tiny MNIST-format IDX files (28x28), in subprocesses."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from ember.data import write_idx

GUIDE = Path(__file__).resolve().parents[3] / "examples" / "guide"
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}


def _write_mnist(root: Path, n_train: int = 120, n_test: int = 40) -> None:
    """Images whose class is where a bright square sits: learnable in an epoch or two."""
    rng = np.random.default_rng(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = rng.integers(0, 10, size=n).astype(np.uint8)
        images = rng.integers(0, 40, size=(n, 28, 28)).astype(np.uint8)
        for i, c in enumerate(labels):
            r, q = divmod(int(c), 5)
            images[i, 4 + 12 * r:10 + 12 * r, 1 + 5 * q:5 + 5 * q] = 255
        write_idx(root / f"{prefix}-images-idx3-ubyte", images)
        write_idx(root / f"{prefix}-labels-idx1-ubyte", labels)


def test_guide_trains_on_idx_files_and_infers_in_a_new_process(tmp_path):
    data, art = tmp_path / "mnist", tmp_path / "artifacts"
    data.mkdir()
    _write_mnist(data)
    train = subprocess.run(
        [sys.executable, str(GUIDE / "train.py"), "--data", str(data), "--artifacts", str(art),
         "--epochs", "6", "--batch-size", "16", "--lr", "3e-3"],
        capture_output=True, text=True, env=ENV, timeout=600, check=False)
    assert train.returncode == 0, train.stdout + train.stderr
    assert "\x1b" not in train.stdout
    config = json.loads((art / "config.json").read_text())
    assert config["config"]["model"]["image_size"] == 28
    assert {p.name for p in art.iterdir()} >= {"config.json", "metrics", "checkpoints", "plots",
                                               "model.safetensors", "test_metrics.json"}
    infer = subprocess.run(
        [sys.executable, str(GUIDE / "infer.py"), "--artifacts", str(art), "--show", "3"],
        capture_output=True, text=True, env=ENV, timeout=600, check=False)
    assert infer.returncode == 0, infer.stdout + infer.stderr
    lines = infer.stdout.splitlines()
    assert lines[0].startswith("inference on cpu")  # the training device without autodiff
    assert len([ln for ln in lines if ln[:4].strip().isdigit()]) == 3
    accuracy = float(lines[-1].split()[2])
    want = json.loads((art / "test_metrics.json").read_text())["accuracy"]
    assert accuracy == want  # the same weights and test split as at the end of training
    assert accuracy > 0.5  # well above chance (0.1) on this easy task


def _guide_main() -> object:
    spec = importlib.util.spec_from_file_location("guide_main", GUIDE / "main.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_main_job_lists_every_file_it_saved(tmp_path):
    """The listing that ends ``main.py`` names the model, config, metric logs, checkpoints and
    each plot, and accounts for every file of the artifacts folder."""
    data, art = tmp_path / "mnist", tmp_path / "artifacts"
    data.mkdir()
    _write_mnist(data, n_train=40, n_test=20)
    train = subprocess.run(
        [sys.executable, str(GUIDE / "train.py"), "--data", str(data), "--artifacts", str(art),
         "--epochs", "1", "--batch-size", "20"],
        capture_output=True, text=True, env=ENV, timeout=600, check=False)
    assert train.returncode == 0, train.stdout + train.stderr
    lines = _guide_main().saved(str(art))  # type: ignore[attr-defined]
    paths = [Path(ln[16:]) for ln in lines]
    labels = [ln[:16].strip() for ln in lines if ln[:16].strip()]
    assert all(p.exists() for p in paths)
    plots = sorted((art / "plots").glob("*.png"))
    assert len(plots) >= 5 and [p for p in paths if p.parent.name == "plots"] == plots
    assert labels[:2] == ["model", "config"] and f"plots ({len(plots)})" in labels
    assert art / "model.safetensors" in paths and art / "test_metrics.json" in paths
    on_disk = {p for p in art.rglob("*") if p.is_file()}
    assert on_disk == {f for f in on_disk if any(p == f or p in f.parents for p in paths)}


def test_the_guide_says_its_data_and_names_one_best_epoch_with_its_checkpoint(tmp_path):
    """train.py starts by naming its data and split sizes; its summary names the best epoch once
    (the metric that stops the run is the one that picks the best), beside that epoch's
    checkpoint, whose weights are the ``model.safetensors`` that inference loads."""
    data, art = tmp_path / "mnist", tmp_path / "artifacts"
    data.mkdir()
    _write_mnist(data, n_train=60, n_test=20)
    train = subprocess.run(
        [sys.executable, str(GUIDE / "train.py"), "--data", str(data), "--artifacts", str(art),
         "--epochs", "4", "--batch-size", "16", "--keep-last", "1"],
        capture_output=True, text=True, env=ENV, timeout=600, check=False)
    assert train.returncode == 0, train.stdout + train.stderr
    lines = train.stdout.splitlines()
    assert lines[0] == f"data: MNIST IDX files in {data}; split by seed: 54 train / 6 valid / " \
                       "20 test images"
    summary = lines[lines.index("summary"):]
    said = [ln for ln in summary if "epoch " in ln]
    assert len(said) == 1 and said[0].startswith("  best: valid/loss "), summary
    epoch = int(said[0].split(" at epoch ")[1].split(":")[0])
    best = json.loads((art / "checkpoints" / "best.json").read_text())
    assert best["epoch"] == epoch and best["metric"] == "valid/loss"
    assert str(art / "checkpoints" / f"epoch-{epoch:04d}") in said[0]
    assert not any(ln.startswith("  checkpoint:") for ln in summary)  # not the last one
    weights = (art / "checkpoints" / f"epoch-{epoch:04d}" / "model.safetensors").read_bytes()
    assert (art / "model.safetensors").read_bytes() == weights


def test_the_digits_are_described_with_their_source_and_split_sizes():
    spec = importlib.util.spec_from_file_location("guide_data", GUIDE / "data.py")
    assert spec is not None and spec.loader is not None
    data = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(data)
    line = data.describe(None, {"train": [0] * 1258, "valid": [0] * 180, "test": [0] * 359})
    assert line.startswith("data: scikit-learn's digits (ember.data.load_digits: 1,797 8x8")
    assert line.endswith("split by seed: 1,258 train / 180 valid / 359 test images")
