"""`Linear`, `Bilinear`, `Identity`, `Flatten`, `Unflatten`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .. import _creation as cr, functional as F
from .._device import Device
from .._dtype import DType
from .._random import Generator
from .._tensor import Tensor
from . import init
from .module import Module

__all__ = ["Bilinear", "Flatten", "Identity", "Linear", "Unflatten", "bilinear"]

DeviceLike = str | Device | None
DTypeLike = DType | str | None


class Linear(Module):
    """``y = x @ weight.T + bias`` with ``weight`` of shape ``[out_features, in_features]``.

    Initialised as PyTorch: ``kaiming_uniform_(weight, a=sqrt(5))`` and ``bias`` uniform in
    ``±1/sqrt(in_features)``.

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> fc = nn.Linear(4, 3, generator=ember.Generator(0))
    >>> fc.weight.shape, fc(ember.ones(2, 4)).shape
    ((3, 4), (2, 3))
    """

    weight: Tensor
    bias: Tensor | None

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 device: DeviceLike = None, dtype: DTypeLike = None,
                 generator: Generator | None = None) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.register_parameter("weight", cr.empty(out_features, in_features, device=device,
                                                   dtype=dtype))
        if bias:
            self.register_parameter("bias", cr.empty(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters(generator)

    def reset_parameters(self, generator: Generator | None = None) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5), generator=generator)
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            init.uniform_(self.bias, -bound, bound, generator)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None
             ) -> Tensor:
    """``y[..., o] = input1[..., i] weight[o, i, j] input2[..., j] + bias[o]``.

    One matmul of ``input1`` against ``weight`` laid out ``[in1, out * in2]``, then a product
    with ``input2`` summed over ``in2``.
    """
    out_f, in1, in2 = weight.shape
    if input1.shape[-1] != in1 or input2.shape[-1] != in2 or input1.shape[:-1] != \
            input2.shape[:-1]:
        raise ValueError(f"bilinear: inputs {input1.shape} and {input2.shape} do not fit "
                         f"weight {weight.shape} (same leading axes, last axes {in1} and {in2})")
    lead = input1.shape[:-1]
    x1, x2 = input1.reshape(-1, in1), input2.reshape(-1, in2)
    mixed = (x1 @ weight.permute(1, 0, 2).reshape(in1, out_f * in2)).reshape(-1, out_f, in2)
    y = (mixed * x2.unsqueeze(1)).sum(-1)
    if bias is not None:
        y = y + bias
    return y.reshape(*lead, out_f)


class Bilinear(Module):
    """``y = x1^T A x2 + b`` with ``weight`` of shape ``[out, in1, in2]``, PyTorch's
    initialisation (all uniform in ``±1/sqrt(in1_features)``).

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> nn.Bilinear(3, 4, 2)(ember.ones(5, 3), ember.ones(5, 4)).shape
    (5, 2)
    """

    weight: Tensor
    bias: Tensor | None

    def __init__(self, in1_features: int, in2_features: int, out_features: int,
                 bias: bool = True, *, device: DeviceLike = None, dtype: DTypeLike = None,
                 generator: Generator | None = None) -> None:
        super().__init__()
        self.in1_features, self.in2_features = in1_features, in2_features
        self.out_features = out_features
        self.register_parameter("weight", cr.empty(out_features, in1_features, in2_features,
                                                   device=device, dtype=dtype))
        self.register_parameter("bias", cr.empty(out_features, device=device, dtype=dtype)
                                if bias else None)
        self.reset_parameters(generator)

    def reset_parameters(self, generator: Generator | None = None) -> None:
        bound = 1 / math.sqrt(self.in1_features) if self.in1_features > 0 else 0
        for p in self.parameters():
            init.uniform_(p, -bound, bound, generator)

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:
        return bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class Identity(Module):
    """Returns its input."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, x: Any) -> Any:
        return x


class Flatten(Module):
    """Flatten axes ``start_dim..end_dim`` (default: all but the batch axis)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Split axis ``dim`` into ``unflattened_size``."""

    def __init__(self, dim: int, unflattened_size: Sequence[int]) -> None:
        super().__init__()
        self.dim = dim
        self.unflattened_size = tuple(unflattened_size)

    def forward(self, x: Tensor) -> Tensor:
        return x.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
