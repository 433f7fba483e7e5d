"""`Unfold`: sliding local blocks as columns (im2col)."""

from __future__ import annotations

from collections.abc import Sequence

from .._tensor import Tensor
from .._windows import im2col
from .module import Module

__all__ = ["Unfold"]

IntPair = int | Sequence[int]


class Unfold(Module):
    """``x[N, C, H, W]`` -> ``[N, C * kH * kW, L]``, as ``torch.nn.Unfold``.

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> nn.Unfold(kernel_size=(2, 3))(ember.ones(2, 5, 3, 4)).shape
    (2, 30, 4)
    """

    def __init__(self, kernel_size: IntPair, dilation: IntPair = 1, padding: IntPair = 0,
                 stride: IntPair = 1) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.dilation = dilation
        self.padding = padding
        self.stride = stride

    def forward(self, x: Tensor) -> Tensor:
        return im2col(x, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"padding={self.padding}, stride={self.stride}")
