"""Recurrent language models: embedding 64, a 2-layer LSTM or GRU of hidden size 128
(``batch_first``), a linear head over a 65-token vocabulary; sequences of 32, batch 16, Adam.

Written once over the framework's namespace, as `gpt`; random token data.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

import ember
from ember import optim

from ._harness import ModelBench

VOCAB, EMBED, HIDDEN, LAYERS, SEQ, BATCH, LR = 65, 64, 128, 2, 32, 16, 1e-3


def rnn_lm(lib: ModuleType, cell: str) -> Any:
    """``cell`` is ``"LSTM"`` or ``"GRU"``."""
    nn = lib.nn

    class RNNLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(VOCAB, EMBED)
            self.rnn = getattr(nn, cell)(EMBED, HIDDEN, num_layers=LAYERS, batch_first=True)
            self.head = nn.Linear(HIDDEN, VOCAB)

        def forward(self, idx: Any) -> Any:
            out, _ = self.rnn(self.embed(idx))
            return self.head(out)

    return RNNLM()


class RNNBench(ModelBench):
    cell = "LSTM"
    reps = 3

    def data(self, rng: np.random.Generator) -> list[tuple[np.ndarray, ...]]:
        out = []
        for _ in range(8):
            seq = rng.integers(0, VOCAB, (BATCH, SEQ + 1))
            out.append((seq[:, :-1].copy(), seq[:, 1:].copy()))
        return out

    def torch_model(self) -> Any:
        import torch

        return rnn_lm(torch, self.cell)

    def ember_model(self) -> ember.nn.Module:
        return rnn_lm(ember, self.cell)  # type: ignore[no-any-return]  # an ember.nn.Module

    def torch_optimizer(self, params: Any) -> Any:
        import torch

        return torch.optim.Adam(params, lr=LR)

    def ember_optimizer(self, params: Any) -> optim.Optimizer:
        return optim.Adam(params, lr=LR)


_SHAPE = (f"embedding {EMBED}, {LAYERS} layers of hidden {HIDDEN}, seq {SEQ}, batch {BATCH}, "
          f"vocab {VOCAB}; Adam")


class LSTMBench(RNNBench):
    name = "lstm"
    title = f"LSTM language model: {_SHAPE}"
    cell = "LSTM"


class GRUBench(RNNBench):
    name = "gru"
    title = f"GRU language model: {_SHAPE}"
    cell = "GRU"
