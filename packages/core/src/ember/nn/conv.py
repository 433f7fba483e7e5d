"""Convolutions: `Conv1d`, `Conv2d`, `ConvTranspose1d`, `ConvTranspose2d` (PyTorch layouts)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from .. import _creation as cr, functional as F
from .._random import Generator
from .._tensor import Tensor
from . import init
from .linear import DeviceLike, DTypeLike
from .module import Module

__all__ = ["Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d"]

Size = int | Sequence[int]


def _ntuple(v: Size, n: int) -> tuple[int, ...]:
    return (int(v),) * n if isinstance(v, int) else tuple(int(i) for i in v)


class _ConvNd(Module):
    _n: int = 2
    _transposed: bool = False

    weight: Tensor
    bias: Tensor | None

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Size, stride: Size,
                 padding: Size | str, dilation: Size, groups: int, bias: bool,
                 padding_mode: str, output_padding: Size, device: DeviceLike,
                 dtype: DTypeLike, generator: Generator | None) -> None:
        super().__init__()
        n = self._n
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"in_channels ({in_channels}) and out_channels ({out_channels}) "
                             f"must be divisible by groups ({groups})")
        if padding_mode != "zeros":
            raise ValueError(f"padding_mode {padding_mode!r} is not supported (only 'zeros')")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _ntuple(kernel_size, n)
        self.stride = _ntuple(stride, n)
        self.dilation = _ntuple(dilation, n)
        self.groups = groups
        self.padding_mode = padding_mode
        self.output_padding = _ntuple(output_padding, n)
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"padding must be 'same', 'valid' or numbers, got {padding!r}")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise ValueError("padding='same' needs stride 1")
            self.padding: tuple[int, ...] | str = padding
        else:
            self.padding = _ntuple(padding, n)
        if self._transposed:
            shape = (in_channels, out_channels // groups, *self.kernel_size)
        else:
            shape = (out_channels, in_channels // groups, *self.kernel_size)
        self.register_parameter("weight", cr.empty(shape, device=device, dtype=dtype))
        if bias:
            self.register_parameter("bias", cr.empty(out_channels, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters(generator)

    def reset_parameters(self, generator: Generator | None = None) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5), generator=generator)
        if self.bias is not None:
            fan_in, _ = init.fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound, generator)

    def _padded(self, x: Tensor) -> tuple[Tensor, tuple[int, ...]]:
        """``x`` and the symmetric padding to pass to the kernel (``'same'`` may pad ``x``)."""
        if self.padding == "valid":
            return x, (0,) * self._n
        if self.padding != "same":
            assert not isinstance(self.padding, str)
            return x, self.padding
        sym: list[int] = []
        extra: list[int] = []
        for k, d in zip(self.kernel_size, self.dilation, strict=True):
            total = d * (k - 1)
            sym.append(total // 2)
            extra.append(total - 2 * (total // 2))  # Note: PyTorch puts the odd one at the end
        if any(extra):
            pads: list[int] = []
            for e in reversed(extra):
                pads += [0, e]
            x = _pad(x, pads)
        return x, tuple(sym)

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0,) * self._n:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._n:
            s += f", dilation={self.dilation}"
        if self._transposed and self.output_padding != (0,) * self._n:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


def _pad(x: Tensor, pads: list[int]) -> Tensor:
    from .._manipulation import pad

    return pad(x, pads)


class _Conv(_ConvNd):
    """`Conv1d` and `Conv2d`: PyTorch's signature, and ``forward`` through the functional form
    of ``_n`` dimensions."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Size, stride: Size = 1,
                 padding: Size | str = 0, dilation: Size = 1, groups: int = 1,
                 bias: bool = True, padding_mode: str = "zeros", *, device: DeviceLike = None,
                 dtype: DTypeLike = None, generator: Generator | None = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, 0, device, dtype, generator)

    def forward(self, x: Tensor) -> Tensor:
        x, pad = self._padded(x)
        conv = F.conv1d if self._n == 1 else F.conv2d
        return conv(x, self.weight, self.bias, self.stride, pad, self.dilation, self.groups)


class _ConvTranspose(_ConvNd):
    """`ConvTranspose1d` and `ConvTranspose2d` likewise."""

    _transposed = True

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Size, stride: Size = 1,
                 padding: Size = 0, output_padding: Size = 0, groups: int = 1,
                 bias: bool = True, dilation: Size = 1, padding_mode: str = "zeros", *,
                 device: DeviceLike = None, dtype: DTypeLike = None,
                 generator: Generator | None = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, output_padding, device, dtype, generator)

    def forward(self, x: Tensor) -> Tensor:
        assert not isinstance(self.padding, str)
        conv = F.conv_transpose1d if self._n == 1 else F.conv_transpose2d
        return conv(x, self.weight, self.bias, self.stride, self.padding, self.output_padding,
                    self.groups, self.dilation)


class Conv1d(_Conv):
    """1-D convolution of ``x[N, C, L]``; ``weight[out, in/groups, k]``."""

    _n = 1


class Conv2d(_Conv):
    """2-D convolution of ``x[N, C, H, W]``; ``weight[out, in/groups, kH, kW]``.

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> conv = nn.Conv2d(1, 4, 3, padding=1)
    >>> conv(ember.zeros(2, 1, 8, 8)).shape
    (2, 4, 8, 8)
    """

    _n = 2


class ConvTranspose1d(_ConvTranspose):
    """Transposed 1-D convolution; ``weight[in, out/groups, k]`` as PyTorch."""

    _n = 1


class ConvTranspose2d(_ConvTranspose):
    """Transposed 2-D convolution; ``weight[in, out/groups, kH, kW]`` as PyTorch."""

    _n = 2
