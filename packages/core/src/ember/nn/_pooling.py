"""Pooling functions built on the pooling primitives: ``max_pool1d``, ``adaptive_max_pool2d``."""

from __future__ import annotations

from collections.abc import Sequence

from .. import _dtype as dt, functional as F
from .._creation import tensor
from .._errors import ShapeError
from .._tensor import Tensor

__all__ = ["adaptive_max_pool2d", "max_pool1d"]

IntOrPair = int | Sequence[int]


def _one(v: IntOrPair, name: str) -> int:
    if isinstance(v, int):
        return v
    if len(v) != 1:
        raise ValueError(f"max_pool1d: {name} needs one value, got {v!r}")
    return int(v[0])


def max_pool1d(input: Tensor, kernel_size: IntOrPair, stride: IntOrPair | None = None,
               padding: IntOrPair = 0, dilation: IntOrPair = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """Maximum over windows of the last axis of ``input[N, C, L]`` (or ``[C, L]``).

    Runs as ``max_pool2d`` over a height of one; indices count positions along ``L``.

    Examples
    --------
    >>> import ember
    >>> import ember.nn.functional as F
    >>> F.max_pool1d(ember.tensor([[[1., 3., 2., 5., 4.]]]), 2).tolist()
    [[[3.0, 5.0]]]
    """
    if input.ndim not in (2, 3):
        raise ShapeError(f"max_pool1d: expected input [N, C, L] or [C, L], got {input.shape}")
    k = _one(kernel_size, "kernel_size")
    s = k if stride is None or (not isinstance(stride, int) and len(stride) == 0) else _one(
        stride, "stride")
    p, d = _one(padding, "padding"), _one(dilation, "dilation")
    if p > k // 2:
        raise ValueError(f"max_pool1d: padding ({p}) must be at most half of kernel_size ({k})")
    x = input.unsqueeze(-2) if input.ndim == 3 else input.unsqueeze(0).unsqueeze(-2)
    values, indices = F.max_pool2d(x, (1, k), (1, s), (0, p), (1, d), ceil_mode, True)
    values, indices = values.squeeze(-2), indices.squeeze(-2)
    if input.ndim == 2:
        values, indices = values.squeeze(0), indices.squeeze(0)
    return (values, indices) if return_indices else values


def _bounds(size: int, out: int) -> list[tuple[int, int]]:
    """PyTorch's adaptive windows: ``[floor(i * size / out), ceil((i + 1) * size / out))``."""
    return [(i * size // out, -(-(i + 1) * size // out)) for i in range(out)]


def adaptive_max_pool2d(input: Tensor, output_size: int | Sequence[int | None],
                        return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """Maximum over PyTorch's adaptive windows of ``input[N, C, H, W]`` (or ``[C, H, W]``).

    Indices are flat positions in ``H * W``, the first maximum in row-major order, as
    PyTorch's.  The gradient goes to that position only.

    Examples
    --------
    >>> import ember
    >>> import ember.nn.functional as F
    >>> F.adaptive_max_pool2d(ember.arange(9.).reshape(1, 1, 3, 3), 2).tolist()
    [[[[4.0, 5.0], [7.0, 8.0]]]]
    """
    if input.ndim not in (3, 4):
        raise ShapeError(f"adaptive_max_pool2d: expected input [N, C, H, W] or [C, H, W], got "
                         f"{input.shape}")
    h, w = input.shape[-2:]
    sizes = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
    if len(sizes) != 2:
        raise ValueError(f"adaptive_max_pool2d: output_size needs 2 values, got {output_size!r}")
    oh, ow = (h if sizes[0] is None else int(sizes[0])), (w if sizes[1] is None else int(sizes[1]))
    if oh <= 0 or ow <= 0 or h == 0 or w == 0:
        raise ValueError(f"adaptive_max_pool2d: output_size ({oh}, {ow}) and input size "
                         f"({h}, {w}) must be positive")
    rows, cols = _bounds(h, oh), _bounds(w, ow)
    kh = max(e - s for s, e in rows)
    kw = max(e - s for s, e in cols)
    # every window as kh * kw flat positions, row-major; a short window repeats its last
    # position, which changes neither the maximum nor the first position holding it
    table = [[min(r0 + i, r1 - 1) * w + min(c0 + j, c1 - 1) for i in range(kh) for j in range(kw)]
             for r0, r1 in rows for c0, c1 in cols]
    lead = input.shape[:-2]
    flat = input.reshape(*lead, h * w)
    windows = tensor(table, dtype=dt.int64, device=input.device)
    picked = flat.detach().index_select(-1, windows.reshape(-1)).reshape(
        *lead, oh * ow, kh * kw)
    first = picked.argmax(-1, keepdim=True)
    indices = windows.expand(*lead, oh * ow, kh * kw).gather(-1, first).squeeze(-1)
    values = flat.gather(-1, indices).reshape(*lead, oh, ow)
    indices = indices.reshape(*lead, oh, ow)
    return (values, indices) if return_indices else values
