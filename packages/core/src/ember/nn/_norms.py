"""Functional `batch_norm`, `group_norm` and `normalize` (layer_norm and rms_norm live in
ember.functional)."""

from __future__ import annotations

from .. import _dtype as dt
from .._tensor import Tensor
from ..amp._state import AUTOCAST, autocast_inputs, setting
from ._values import lower, rebind

__all__ = ["batch_norm", "group_norm", "normalize"]


def _channel_shape(x: Tensor) -> tuple[int, ...]:
    return (1, x.shape[1], *([1] * (x.ndim - 2)))


def batch_norm(x: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None,
               training: bool = False, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise each channel (axis 1) by batch statistics or by the running ones.

    In training mode the running statistics, when given, are updated *in place* as PyTorch does
    (``running = (1 - momentum) * running + momentum * batch``, unbiased batch variance): the
    buffers keep their identity and get new values, computed outside any autodiff tape.

    Examples
    --------
    >>> import ember
    >>> import ember.nn.functional as F
    >>> x = ember.tensor([[1.], [3.]])
    >>> [round(v, 4) for v in F.batch_norm(x, None, None, training=True).reshape(-1).tolist()]
    [-1.0, 1.0]
    """
    if x.ndim < 2:
        raise ValueError(f"batch_norm needs input of at least 2 axes [N, C, ...], got {x.shape}")
    if AUTOCAST and x._dtype in (dt.float16, dt.bfloat16) and setting(x._device) is not None:
        # `ember.autocast` leaves batch_norm off its lists, as PyTorch: its kernel takes a half
        # input with float32 statistics and weights, computes in float32 and returns the
        # input's dtype; the decomposition does the same
        return batch_norm(x.to(dtype=dt.float32), running_mean, running_var, weight, bias,
                          training, momentum, eps).to(dtype=x.dtype)
    shape = _channel_shape(x)
    dims = (0, *range(2, x.ndim))
    if training:
        n = x.numel() // x.shape[1]
        if n <= 1:
            raise ValueError(f"batch_norm in training needs more than one value per channel, "
                             f"got input {x.shape}")
        mean = x.mean(dim=dims, keepdim=True)
        centred = x - mean
        var = (centred * centred).mean(dim=dims, keepdim=True)
        out = centred * (var + eps).rsqrt()
        if running_mean is not None and running_var is not None:
            m, v = lower(mean).reshape(-1), lower(var).reshape(-1)
            rebind(running_mean, lower(running_mean) * (1 - momentum)
                   + m.to(dtype=running_mean.dtype) * momentum)
            rebind(running_var, lower(running_var) * (1 - momentum)
                   + (v * (n / (n - 1))).to(dtype=running_var.dtype) * momentum)
    else:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm in eval mode needs running_mean and running_var")
        out = (x - running_mean.reshape(shape)) * (running_var.reshape(shape) + eps).rsqrt()
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


def group_norm(x: Tensor, num_groups: int, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalise over groups of channels (and all spatial positions), then scale per channel."""
    if AUTOCAST:  # `ember.autocast`: float32 (ember.amp._policy)
        x, weight, bias = autocast_inputs("group_norm", (x, weight, bias))
    n, c = x.shape[0], x.shape[1]
    if c % num_groups:
        raise ValueError(f"group_norm: {c} channels are not divisible into {num_groups} groups")
    g = x.reshape(n, num_groups, -1)
    mean = g.mean(dim=-1, keepdim=True)
    centred = g - mean
    var = (centred * centred).mean(dim=-1, keepdim=True)
    out = (centred * (var + eps).rsqrt()).reshape(x.shape)
    shape = _channel_shape(x)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


def normalize(x: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """``x / max(||x||_p, eps)`` along ``dim``, as ``torch.nn.functional.normalize``.

    Examples
    --------
    >>> import ember
    >>> import ember.nn.functional as F
    >>> F.normalize(ember.tensor([[3.0, 4.0]], dtype=ember.float64)).tolist()
    [[0.6, 0.8]]
    """
    from .._linalg import vector_norm

    return x / vector_norm(x, p, dim, keepdim=True).clamp(min=eps)
