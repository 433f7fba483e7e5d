"""The guide's model: a small CNN (two convolutions, pooling, dropout, two linear layers)."""

from __future__ import annotations

from typing import Any

import ember
from ember import nn


class GuideCNN(nn.Module):
    """conv(3x3) -> relu -> conv(3x3) -> relu -> maxpool(2) -> dropout -> linear -> relu ->
    dropout -> linear.

    On 8x8 digits the two convolutions keep the size and one 2x2 pooling halves it; on 28x28
    MNIST each convolution is followed by a pooling (28 -> 14 -> 7), so the first linear layer
    stays small.  ``config()`` is what ``infer.py`` needs to rebuild it from ``config.json``.
    """

    def __init__(self, image_size: int = 8, num_classes: int = 10, channels: tuple[int, int] = (
            16, 32), hidden: int = 64, dropout: float = 0.25, *,
            generator: ember.Generator | None = None) -> None:
        super().__init__()
        c1, c2 = channels
        self.image_size, self.num_classes = image_size, num_classes
        self.channels, self.hidden, self.dropout_p = (c1, c2), hidden, dropout
        self.pool_twice = image_size >= 16
        self.conv1 = nn.Conv2d(1, c1, 3, padding=1, generator=generator)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1, generator=generator)
        self.pool = nn.MaxPool2d(2)
        self.dropout = nn.Dropout(dropout, generator=generator)
        side = image_size // 4 if self.pool_twice else image_size // 2
        self.fc1 = nn.Linear(c2 * side * side, hidden, generator=generator)
        self.fc2 = nn.Linear(hidden, num_classes, generator=generator)

    def forward(self, x: ember.Tensor) -> ember.Tensor:
        x = self.conv1(x).relu()
        if self.pool_twice:
            x = self.pool(x)
        x = self.pool(self.conv2(x).relu())
        x = self.dropout(x).flatten(1)
        x = self.dropout(self.fc1(x).relu())
        return self.fc2(x)

    def config(self) -> dict[str, Any]:
        return {"image_size": self.image_size, "num_classes": self.num_classes,
                "channels": list(self.channels), "hidden": self.hidden,
                "dropout": self.dropout_p}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> GuideCNN:
        return cls(config["image_size"], config["num_classes"], tuple(config["channels"]),
                   config["hidden"], config["dropout"])
