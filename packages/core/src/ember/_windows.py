"""Padding modes and sliding windows: ``pad`` (reflect, replicate, circular), ``Tensor.unfold``
and im2col (``nn.functional.unfold``).

Each is a gather of the input by an index computed on the host from shapes alone
(`index_select` along one axis at a time), so every backend runs them and Autodiff
differentiates them (the index's transpose scatters the gradient back: where windows overlap
or a pad repeats an element, the contributions add up).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from . import _dtype as dt
from ._apply import normalize_dim
from ._errors import ShapeError

if TYPE_CHECKING:
    from ._tensor import Tensor

__all__ = ["im2col", "pad_modes", "unfold"]

IntPair = int | Sequence[int]


def _index(values: Sequence[int], like: Tensor) -> Tensor:
    from ._creation import tensor

    return tensor(list(values), dtype=dt.int64, device=like.device)


def _source(mode: str, j: int, n: int) -> int:
    """The input position that padded position ``j`` (may be < 0 or >= n) copies."""
    if mode == "reflect":
        period = 2 * (n - 1)
        j = abs(j) % period if period else 0
        return period - j if j >= n else j
    if mode == "replicate":
        return min(max(j, 0), n - 1)
    return j % n  # circular


def pad_modes(x: Tensor, widths: Sequence[tuple[int, int]], mode: str) -> Tensor:
    """``x`` padded by ``widths`` (``(before, after)`` per axis, negative crops) in ``mode``:
    ``reflect`` (mirror without the edge), ``replicate`` (repeat the edge) or ``circular``
    (wrap around)."""
    from ._manipulation import index_select

    for d, ((lo, hi), n) in enumerate(zip(widths, x.shape, strict=True)):
        if lo == 0 and hi == 0:
            continue
        # negative widths crop first, then the rest pads the cropped axis (as PyTorch)
        start, n = max(-lo, 0), n - max(-lo, 0) - max(-hi, 0)
        lo, hi = max(lo, 0), max(hi, 0)
        if mode == "reflect" and (lo >= n or hi >= n):
            raise ShapeError(f"pad: reflect padding {(lo, hi)} must be smaller than the input "
                             f"size {n} at dimension {d} of input {x.shape}")
        if mode == "circular" and (lo > n or hi > n):
            raise ShapeError(f"pad: circular padding {(lo, hi)} wraps around more than once "
                             f"for size {n} at dimension {d} of input {x.shape}")
        if n < 0:
            raise ShapeError(f"pad: cropping {widths[d]} removes more than the size "
                             f"{x.shape[d]} of dimension {d} of input {x.shape}")
        if n == 0 and (lo > 0 or hi > 0):
            raise ShapeError(f"pad: {mode} padding of dimension {d} of input {x.shape}, "
                             "which is empty")
        idx = [start + _source(mode, j, n) for j in range(-lo, n + hi)]
        x = index_select(x, d, _index(idx, x))
    return x


def unfold(x: Tensor, dimension: int, size: int, step: int) -> Tensor:
    """Every window of ``size`` elements along ``dimension``, ``step`` apart
    (``Tensor.unfold``): that axis becomes the number of windows and a new last axis of
    ``size`` holds each window.

    Examples
    --------
    >>> import ember
    >>> ember.arange(5).unfold(0, 2, 2).tolist()
    [[0, 1], [2, 3]]
    """
    from ._manipulation import index_select, movedim, reshape

    if x.ndim == 0:
        normalize_dim(dimension, 1)
        if size > 1:
            raise ShapeError(f"unfold: size {size} is larger than a 0-d tensor (1 element)")
        return reshape(x, 1)
    d = normalize_dim(dimension, x.ndim)
    n = x.shape[d]
    if size < 0 or size > n:
        raise ShapeError(f"unfold: maximum size for dimension {d} of {x.shape} is {n}, "
                         f"but size is {size}")
    if step <= 0:
        raise ValueError(f"unfold: step must be positive, got {step}")
    windows = (n - size) // step + 1
    idx = [w * step + k for w in range(windows) for k in range(size)]
    picked = index_select(x, d, _index(idx, x))
    out = reshape(picked, *x.shape[:d], windows, size, *x.shape[d + 1:])
    return movedim(out, d + 1, -1)


def _pair(v: IntPair, name: str) -> tuple[int, int]:
    out = (int(v), int(v)) if isinstance(v, int) else tuple(int(i) for i in v)
    if len(out) != 2:
        raise ValueError(f"unfold: {name} needs 1 or 2 values, got {v!r}")
    return out[0], out[1]


def im2col(x: Tensor, kernel_size: IntPair, dilation: IntPair = 1, padding: IntPair = 0,
           stride: IntPair = 1) -> Tensor:
    """Sliding local blocks of ``x[N, C, H, W]`` as columns ``[N, C * kH * kW, L]``
    (``torch.nn.functional.unfold``); a ``[C, H, W]`` input gives ``[C * kH * kW, L]``.

    Examples
    --------
    >>> import ember
    >>> import ember.nn.functional as F
    >>> F.unfold(ember.ones(1, 2, 3, 3), kernel_size=2).shape
    (1, 8, 4)
    """
    from ._manipulation import pad, reshape, stack

    if x.ndim not in (3, 4):
        raise ShapeError(f"unfold: expected a 3-D or 4-D input [(N,) C, H, W], got {x.shape}")
    batched = x.ndim == 4
    if not batched:
        x = reshape(x, 1, *x.shape)
    (kh, kw), (dh, dw) = _pair(kernel_size, "kernel_size"), _pair(dilation, "dilation")
    (ph, pw), (sh, sw) = _pair(padding, "padding"), _pair(stride, "stride")
    if min(kh, kw, dh, dw, sh, sw) <= 0 or min(ph, pw) < 0:
        raise ValueError(f"unfold: kernel_size {(kh, kw)}, dilation {(dh, dw)} and stride "
                         f"{(sh, sw)} must be positive and padding {(ph, pw)} non-negative")
    n, c, h, w = x.shape
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"unfold: input {tuple(x.shape[2:])} padded by {(ph, pw)} is smaller "
                         f"than the kernel {(kh, kw)} with dilation {(dh, dw)}")
    if ph or pw:
        x = pad(x, (pw, pw, ph, ph))
    # one strided slice per kernel offset: [N, C, OH, OW] each, stacked as [N, C, kH*kW, ...]
    blocks = [x[:, :, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
              for i in range(kh) for j in range(kw)]
    out = reshape(stack(blocks, 2), n, c * kh * kw, oh * ow)
    return out if batched else reshape(out, c * kh * kw, oh * ow)
