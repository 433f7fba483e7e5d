"""Pooling modules: `MaxPool1d`, `MaxPool2d`, `AvgPool2d`, `AdaptiveAvgPool2d`,
`AdaptiveMaxPool2d`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import functional as F
from .._tensor import Tensor
from . import _pooling as P
from .module import Module

__all__ = ["AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "AvgPool2d", "MaxPool1d", "MaxPool2d"]

Size = int | Sequence[int]


class _MaxPoolNd(Module):
    """What `MaxPool1d` and `MaxPool2d` share: PyTorch's options (``stride`` defaults to
    ``kernel_size``)."""

    def __init__(self, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
                 dilation: Size = 1, return_indices: bool = False,
                 ceil_mode: bool = False) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool2d(_MaxPoolNd):
    """Maximum over ``kernel_size`` windows (``stride`` defaults to ``kernel_size``).

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> nn.MaxPool2d(2)(ember.arange(16.).reshape(1, 1, 4, 4)).tolist()
    [[[[5.0, 7.0], [13.0, 15.0]]]]
    """

    def forward(self, x: Tensor) -> Any:
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode, self.return_indices)


class AvgPool2d(Module):
    """Mean over ``kernel_size`` windows."""

    def __init__(self, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
                 ceil_mode: bool = False, count_include_pad: bool = True) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """Mean pooling to a fixed ``output_size`` (PyTorch's window bounds)."""

    def __init__(self, output_size: Size) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        return F.adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class MaxPool1d(_MaxPoolNd):
    """Maximum over ``kernel_size`` windows of the last axis of ``[N, C, L]`` or ``[C, L]``.

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> nn.MaxPool1d(2)(ember.tensor([[[1., 3., 2., 5.]]])).tolist()
    [[[3.0, 5.0]]]
    """

    def forward(self, x: Tensor) -> Any:
        return P.max_pool1d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode, self.return_indices)


class AdaptiveMaxPool2d(Module):
    """Max pooling to a fixed ``output_size`` (``None`` keeps that axis), PyTorch's windows."""

    def __init__(self, output_size: int | Sequence[int | None],
                 return_indices: bool = False) -> None:
        super().__init__()
        self.output_size = output_size
        self.return_indices = return_indices

    def forward(self, x: Tensor) -> Any:
        return P.adaptive_max_pool2d(x, self.output_size, self.return_indices)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"
