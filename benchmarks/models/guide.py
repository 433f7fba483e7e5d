"""The guide's CNN (`examples/guide`: conv 16, conv 32, max-pool, dropout, linear 64, linear
10) on its digits training split, batch 32, AdamW: one step of the epoch that
``benchmarks/guide_epoch.py`` times whole.

The ember model and the data come from the example itself; `torch_guide_cnn` is its PyTorch
mirror (``guide_epoch.py`` uses it too).  Dropout draws different masks in the two frameworks,
so the loss check runs in eval mode.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

import ember
from ember import optim

from ._harness import SEED, ModelBench

GUIDE = Path(__file__).resolve().parents[2] / "examples" / "guide"
BATCH, LR, WEIGHT_DECAY = 32, 2e-3, 1e-4


def _example(name: str) -> ModuleType:
    """``examples/guide/<name>.py``, loaded under a private name (the example's modules are
    called ``data`` and ``model``, which other code on ``sys.path`` may also be called)."""
    spec = importlib.util.spec_from_file_location(f"_ember_guide_{name}", GUIDE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def torch_guide_cnn() -> Any:
    """The guide's `GuideCNN` (for 8x8 digits) in PyTorch, with the same parameter names."""
    import torch
    from torch import nn

    class TorchCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
            self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
            self.pool = nn.MaxPool2d(2)
            self.dropout = nn.Dropout(0.25)
            self.fc1 = nn.Linear(32 * 4 * 4, 64)
            self.fc2 = nn.Linear(64, 10)

        def forward(self, x: Any) -> Any:
            x = self.pool(torch.relu(self.conv2(torch.relu(self.conv1(x)))))
            x = self.dropout(x).flatten(1)
            return self.fc2(self.dropout(torch.relu(self.fc1(x))))

    return TorchCNN()


class GuideBench(ModelBench):
    name = "guide"
    title = f"guide CNN on 8x8 digits, batch {BATCH}; AdamW"
    reps = 10

    def data(self, rng: np.random.Generator) -> list[tuple[np.ndarray, ...]]:
        """The batches of the guide's first training epoch (full ones only, so every step has
        the same shapes)."""
        data = _example("data")
        train = data.loaders(data.splits(None, SEED), BATCH, SEED)["train"]
        ds = train.dataset
        x_all = ds.dataset.tensors[0].numpy()[ds.indices]
        y_all = ds.dataset.tensors[1].numpy()[ds.indices]
        return [(x_all[idx].copy(), y_all[idx].copy()) for idx in train.batch_indices(0)
                if len(idx) == BATCH]

    def torch_model(self) -> Any:
        return torch_guide_cnn()

    def ember_model(self) -> ember.nn.Module:
        return _example("model").GuideCNN(8)  # type: ignore[no-any-return]  # a GuideCNN

    def torch_optimizer(self, params: Any) -> Any:
        import torch

        return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)

    def ember_optimizer(self, params: Any) -> optim.Optimizer:
        return optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)
