"""An MLP 784-256-256-10 with ReLU, batch 128, cross entropy, Adam; random inputs and labels
(the shapes of MNIST)."""

from __future__ import annotations

import itertools
from types import ModuleType
from typing import Any

import numpy as np

import ember
from ember import optim

from ._harness import ModelBench

SIZES, BATCH, LR = (784, 256, 256, 10), 128, 1e-3


def mlp(lib: ModuleType) -> Any:
    nn = lib.nn
    layers: list[Any] = []
    for fan_in, fan_out in itertools.pairwise(SIZES):
        layers += [nn.Linear(fan_in, fan_out), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


class MLPBench(ModelBench):
    name = "mlp"
    title = f"MLP {'-'.join(map(str, SIZES))}, ReLU, batch {BATCH}; Adam"
    reps = 20

    def data(self, rng: np.random.Generator) -> list[tuple[np.ndarray, ...]]:
        return [(rng.standard_normal((BATCH, SIZES[0])).astype(np.float32),
                 rng.integers(0, SIZES[-1], BATCH)) for _ in range(4)]

    def torch_model(self) -> Any:
        import torch

        return mlp(torch)

    def ember_model(self) -> ember.nn.Module:
        return mlp(ember)  # type: ignore[no-any-return]  # an ember.nn.Module

    def torch_optimizer(self, params: Any) -> Any:
        import torch

        return torch.optim.Adam(params, lr=LR)

    def ember_optimizer(self, params: Any) -> optim.Optimizer:
        return optim.Adam(params, lr=LR)
