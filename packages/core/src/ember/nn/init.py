"""Parameter initialisation, with PyTorch's names, formulas and defaults.

Each ``*_`` function gives the tensor a new value *in place* (its payload is rebound, so the
parameter object stays the same) and returns it.  Every random one takes a ``generator``.

Examples
--------
>>> import ember
>>> from ember.nn import init
>>> w = init.kaiming_uniform_(ember.empty(4, 3), a=5 ** 0.5, generator=ember.Generator(0))
>>> bool((w.abs() <= 3 ** -0.5).all())
True
"""

from __future__ import annotations

import math

from .. import _creation as cr
from .._random import Generator
from .._tensor import Tensor
from ._values import lower, rebind

__all__ = [
    "calculate_gain", "constant_", "eye_", "kaiming_normal_", "kaiming_uniform_", "normal_",
    "ones_", "orthogonal_", "trunc_normal_", "uniform_", "xavier_normal_", "xavier_uniform_",
    "zeros_",
]


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for a nonlinearity (PyTorch's table)."""
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d", "sigmoid")
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"unsupported nonlinearity {nonlinearity!r}")


def fan_in_and_fan_out(t: Tensor) -> tuple[int, int]:
    """``(fan_in, fan_out)`` of a weight ``[out, in, *kernel]`` (PyTorch's rule)."""
    if t.ndim < 2:
        raise ValueError(f"fan in and fan out need a tensor of at least 2 axes, got {t.shape}")
    receptive = math.prod(t.shape[2:])
    return t.shape[1] * receptive, t.shape[0] * receptive


def _fan(t: Tensor, mode: str) -> int:
    fan_in, fan_out = fan_in_and_fan_out(t)
    if mode == "fan_in":
        return fan_in
    if mode == "fan_out":
        return fan_out
    raise ValueError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}")


def uniform_(t: Tensor, a: float = 0.0, b: float = 1.0,
             generator: Generator | None = None) -> Tensor:
    """Fill with samples of ``U(a, b)``."""
    base = lower(t)
    r = cr.rand(t.shape, generator=generator, dtype=t.dtype, device=base.device)
    rebind(t, r * (b - a) + a)
    return t


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0,
            generator: Generator | None = None) -> Tensor:
    """Fill with samples of ``N(mean, std²)``."""
    base = lower(t)
    r = cr.randn(t.shape, generator=generator, dtype=t.dtype, device=base.device)
    rebind(t, r * std + mean)
    return t


def trunc_normal_(t: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0,
                  b: float = 2.0, generator: Generator | None = None) -> Tensor:
    """Fill with ``N(mean, std²)`` truncated to ``[a, b]`` (inverse-CDF sampling, as PyTorch)."""
    def cdf(x: float) -> float:
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    lo, hi = cdf((a - mean) / std), cdf((b - mean) / std)
    base = lower(t)
    u = cr.rand(t.shape, generator=generator, dtype=t.dtype, device=base.device)
    u = u * (2 * hi - 2 * lo) + (2 * lo - 1)
    u = u.clamp(-1 + 1e-7, 1 - 1e-7)
    val = _erfinv(u) * (std * math.sqrt(2.0)) + mean
    rebind(t, val.clamp(a, b))
    return t


def _erfinv(y: Tensor) -> Tensor:
    """Inverse error function: Giles' approximation refined by two Newton steps."""
    w = -((1.0 - y) * (1.0 + y)).log()
    from .._elementwise import where

    ws = w - 2.5
    p1 = ws * 0.0 + 2.81022636e-08
    for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
              -0.00417768164, 0.246640727, 1.50140941):
        p1 = ws * p1 + c
    wl = w.sqrt() - 3.0
    p2 = wl * 0.0 - 0.000200214257
    for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
              0.00943887047, 1.00167406, 2.83297682):
        p2 = wl * p2 + c
    x = where(w < 5.0, p1, p2) * y
    two_over_sqrt_pi = 2.0 / math.sqrt(math.pi)
    for _ in range(2):
        x = x - (x.erf() - y) / ((-(x * x)).exp() * two_over_sqrt_pi)
    return x


def constant_(t: Tensor, value: float) -> Tensor:
    """Fill with ``value``."""
    base = lower(t)
    rebind(t, cr.full(t.shape, value, dtype=t.dtype, device=base.device))
    return t


def zeros_(t: Tensor) -> Tensor:
    return constant_(t, 0)


def ones_(t: Tensor) -> Tensor:
    return constant_(t, 1)


def eye_(t: Tensor) -> Tensor:
    """The identity matrix (2-D tensors)."""
    if t.ndim != 2:
        raise ValueError(f"eye_ needs a 2-D tensor, got {t.shape}")
    base = lower(t)
    rebind(t, cr.eye(t.shape[0], t.shape[1], dtype=t.dtype, device=base.device))
    return t


def xavier_uniform_(t: Tensor, gain: float = 1.0, generator: Generator | None = None) -> Tensor:
    """Glorot uniform: ``U(-b, b)`` with ``b = gain * sqrt(6 / (fan_in + fan_out))``."""
    fan_in, fan_out = fan_in_and_fan_out(t)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -bound, bound, generator)


def xavier_normal_(t: Tensor, gain: float = 1.0, generator: Generator | None = None) -> Tensor:
    """Glorot normal: ``N(0, std²)`` with ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    fan_in, fan_out = fan_in_and_fan_out(t)
    return normal_(t, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


def kaiming_uniform_(t: Tensor, a: float = 0.0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu",
                     generator: Generator | None = None) -> Tensor:
    """He uniform: ``U(-b, b)`` with ``b = gain * sqrt(3 / fan)``.

    ``Linear`` and ``Conv*`` use ``a=sqrt(5)``, which makes ``b = 1 / sqrt(fan_in)``.
    """
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(t, mode))
    bound = math.sqrt(3.0) * std
    return uniform_(t, -bound, bound, generator)


def kaiming_normal_(t: Tensor, a: float = 0.0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu",
                    generator: Generator | None = None) -> Tensor:
    """He normal: ``N(0, std²)`` with ``std = gain / sqrt(fan)``."""
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(t, mode))
    return normal_(t, 0.0, std, generator)


def orthogonal_(t: Tensor, gain: float = 1.0, generator: Generator | None = None) -> Tensor:
    """A (semi-)orthogonal matrix from the QR decomposition of a normal sample, as PyTorch.

    The decomposition is Gram-Schmidt on ember ops (the sign convention of PyTorch's
    ``q * sign(diag(r))``: ``r`` has a positive diagonal).
    """
    if t.ndim < 2:
        raise ValueError(f"orthogonal_ needs at least 2 axes, got {t.shape}")
    rows = t.shape[0]
    cols = t.numel() // rows
    base = lower(t)
    flat = cr.randn((rows, cols), generator=generator, dtype=t.dtype, device=base.device)
    if rows < cols:
        flat = flat.T
    q_cols: list[Tensor] = []
    for j in range(flat.shape[1]):
        v = flat[:, j]
        for q in q_cols:
            v = v - (q * v).sum() * q
        for q in q_cols:  # a second pass keeps float32 columns orthogonal
            v = v - (q * v).sum() * q
        q_cols.append(v / (v * v).sum().sqrt())
    from .._manipulation import stack

    q_mat = stack(q_cols, dim=1)
    if rows < cols:
        q_mat = q_mat.T
    rebind(t, (q_mat * gain).reshape(t.shape))
    return t
