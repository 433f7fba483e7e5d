"""Normalisation layers: `BatchNorm1d`/`BatchNorm2d` (running statistics), `LayerNorm`,
`GroupNorm`, `RMSNorm`, with PyTorch's parameter and buffer names."""

from __future__ import annotations

from collections.abc import Sequence

from .. import _creation as cr, functional as F
from .._tensor import Tensor
from ._norms import batch_norm, group_norm
from .linear import DeviceLike, DTypeLike
from .module import Module

__all__ = ["BatchNorm1d", "BatchNorm2d", "GroupNorm", "LayerNorm", "RMSNorm"]


class _BatchNorm(Module):
    _dims: tuple[int, ...] = (2, 3)

    weight: Tensor | None
    bias: Tensor | None
    running_mean: Tensor | None
    running_var: Tensor | None
    num_batches_tracked: Tensor | None

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, *,
                 device: DeviceLike = None, dtype: DTypeLike = None) -> None:
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self.register_parameter("weight", cr.ones(num_features, device=device, dtype=dtype))
            self.register_parameter("bias", cr.zeros(num_features, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", cr.zeros(num_features, device=device,
                                                          dtype=dtype))
            self.register_buffer("running_var", cr.ones(num_features, device=device,
                                                        dtype=dtype))
            self.register_buffer("num_batches_tracked",
                                 cr.tensor(0, dtype="int64", device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in self._dims:
            raise ValueError(f"{type(self).__name__} expects input of "
                             f"{' or '.join(map(str, self._dims))} axes, got {x.shape}")
        if x.shape[1] != self.num_features:
            raise ValueError(f"{type(self).__name__}({self.num_features}) got input with "
                             f"{x.shape[1]} channels: {x.shape}")
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.num_batches_tracked is not None:
            self.num_batches_tracked = self.num_batches_tracked + 1
            if self.momentum is None:  # a cumulative moving average
                factor = 1.0 / int(self.num_batches_tracked.item())
        use_batch = self.training or self.running_mean is None
        update = self.training and self.track_running_stats
        return batch_norm(x, self.running_mean if update or not use_batch else None,
                          self.running_var if update or not use_batch else None,
                          self.weight, self.bias, use_batch, factor, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalisation of ``[N, C]`` or ``[N, C, L]`` inputs over everything but ``C``.

    In training mode batch statistics normalise and update ``running_mean`` / ``running_var``
    (``momentum=None``: a cumulative average); in eval mode the running ones normalise.
    """

    _dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalisation of ``[N, C, H, W]`` inputs per channel.

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> bn = nn.BatchNorm2d(3)
    >>> _ = bn(ember.randn(4, 3, 2, 2))
    >>> [n for n, _ in bn.named_buffers()]
    ['running_mean', 'running_var', 'num_batches_tracked']
    """

    _dims = (4,)


def _shape(s: int | Sequence[int]) -> tuple[int, ...]:
    return (s,) if isinstance(s, int) else tuple(s)


class LayerNorm(Module):
    """Normalise over the last axes ``normalized_shape``; ``weight`` ones and ``bias`` zeros."""

    weight: Tensor | None
    bias: Tensor | None

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True, *,
                 device: DeviceLike = None, dtype: DTypeLike = None) -> None:
        super().__init__()
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.register_parameter("weight", cr.ones(self.normalized_shape, device=device,
                                                      dtype=dtype))
            if bias:
                self.register_parameter("bias", cr.zeros(self.normalized_shape, device=device,
                                               dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class GroupNorm(Module):
    """Normalise groups of channels; per-channel ``weight`` and ``bias``."""

    weight: Tensor | None
    bias: Tensor | None

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, *, device: DeviceLike = None,
                 dtype: DTypeLike = None) -> None:
        super().__init__()
        if num_channels % num_groups:
            raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups "
                             f"({num_groups})")
        self.num_groups, self.num_channels, self.eps, self.affine = (num_groups, num_channels,
                                                                     eps, affine)
        if affine:
            self.register_parameter("weight", cr.ones(num_channels, device=device, dtype=dtype))
            self.register_parameter("bias", cr.zeros(num_channels, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        return group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class RMSNorm(Module):
    """Scale by the root mean square over the last axes (``eps=None``: the dtype's epsilon)."""

    weight: Tensor | None

    def __init__(self, normalized_shape: int | Sequence[int], eps: float | None = None,
                 elementwise_affine: bool = True, *, device: DeviceLike = None,
                 dtype: DTypeLike = None) -> None:
        super().__init__()
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.register_parameter("weight", cr.ones(self.normalized_shape, device=device,
                                                      dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")
