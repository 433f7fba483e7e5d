"""`Dropout`: active in training mode only, drawing from an optional generator."""

from __future__ import annotations

from .. import functional as F
from .._random import Generator
from .._tensor import Tensor
from .module import Module

__all__ = ["Dropout"]


class Dropout(Module):
    """Zero elements with probability ``p`` in training mode and scale the rest by ``1/(1-p)``.

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> drop = nn.Dropout(0.5).eval()
    >>> drop(ember.ones(3)).tolist()
    [1.0, 1.0, 1.0]
    """

    def __init__(self, p: float = 0.5, inplace: bool = False, *,
                 generator: Generator | None = None) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        self.p = p
        self.generator = generator

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training, self.generator)

    def extra_repr(self) -> str:
        return f"p={self.p}"
