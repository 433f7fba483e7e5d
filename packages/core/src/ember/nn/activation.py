"""Activation modules: thin wrappers of the functional forms, with PyTorch's arguments."""

from __future__ import annotations

from .. import _creation as cr, functional as F
from .._tensor import Tensor
from ._activations import softmin
from .linear import DeviceLike, DTypeLike
from .module import Module

__all__ = [
    "ELU", "GELU", "LeakyReLU", "LogSoftmax", "Mish", "PReLU", "ReLU", "SiLU", "Sigmoid",
    "Softmax", "Softmin", "Softplus", "Tanh",
]


class ReLU(Module):
    """``max(x, 0)``.

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> nn.ReLU()(ember.tensor([-1., 2.])).tolist()
    [0.0, 2.0]
    """

    def __init__(self, inplace: bool = False) -> None:  # inplace accepted for ported code
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class SiLU(Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return F.silu(x)


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.tanh()


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.sigmoid()


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: Tensor) -> Tensor:
        return F.leaky_relu(x, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}"


class Softplus(Module):
    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, x: Tensor) -> Tensor:
        return F.softplus(x, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Mish(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.mish(x)


class ELU(Module):
    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha = alpha

    def forward(self, x: Tensor) -> Tensor:
        return F.elu(x, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


class PReLU(Module):
    """``max(x, 0) + weight * min(x, 0)``; ``weight`` has ``num_parameters`` entries (channels
    along axis 1), initialised to ``init``."""

    weight: Tensor

    def __init__(self, num_parameters: int = 1, init: float = 0.25, *,
                 device: DeviceLike = None, dtype: DTypeLike = None) -> None:
        super().__init__()
        self.num_parameters = num_parameters
        self.register_parameter("weight", cr.full((num_parameters,), init, device=device,
                                                  dtype=dtype or "float32"))

    def forward(self, x: Tensor) -> Tensor:
        w = self.weight
        if self.num_parameters > 1 and x.ndim >= 2:
            w = w.reshape(-1, *([1] * (x.ndim - 2)))
        return x.clamp(min=0) + w * x.clamp(max=0)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class Softmax(Module):
    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return F.softmax(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Module):
    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return F.log_softmax(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Softmin(Module):
    """``softmax(-x, dim)`` (`ember.nn.functional.softmin`)."""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return softmin(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
