"""`Upsample` (and PyTorch's fixed-mode `UpsamplingNearest2d`, `UpsamplingBilinear2d`): the
module form of `ember.functional.interpolate`."""

from __future__ import annotations

from collections.abc import Sequence

from .. import functional as F
from .._tensor import Tensor
from .module import Module

__all__ = ["Upsample", "UpsamplingBilinear2d", "UpsamplingNearest2d"]

_MODES = ("nearest", "linear", "bilinear")


class Upsample(Module):
    """Resize the spatial axes of ``[N, C, ...]`` to ``size`` or by ``scale_factor``.

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> nn.Upsample(scale_factor=2)(ember.tensor([[[1., 2.]]])).tolist()
    [[[1.0, 1.0, 2.0, 2.0]]]
    """

    def __init__(self, size: int | Sequence[int] | None = None,
                 scale_factor: float | Sequence[float] | None = None, mode: str = "nearest",
                 align_corners: bool | None = None,
                 recompute_scale_factor: bool | None = None) -> None:
        super().__init__()
        if mode not in _MODES:
            raise ValueError(f"Upsample: mode must be one of {_MODES}, got {mode!r}")
        if (size is None) == (scale_factor is None):
            raise ValueError("Upsample: give exactly one of size and scale_factor, got "
                             f"size={size!r}, scale_factor={scale_factor!r}")
        if align_corners is not None and mode == "nearest":
            raise ValueError("Upsample: align_corners only applies to the linear modes")
        self.name = type(self).__name__
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners = align_corners
        # Note: the output size is always floor(input * scale_factor) and the sampling grid
        # follows it, which is PyTorch's recompute_scale_factor=True; the flag is kept for
        # signature compatibility
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, input: Tensor) -> Tensor:
        return F.interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners)

    def extra_repr(self) -> str:
        what = (f"scale_factor={self.scale_factor!r}" if self.scale_factor is not None
                else f"size={self.size!r}")
        return f"{what}, mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    def __init__(self, size: int | Sequence[int] | None = None,
                 scale_factor: float | Sequence[float] | None = None) -> None:
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    def __init__(self, size: int | Sequence[int] | None = None,
                 scale_factor: float | Sequence[float] | None = None) -> None:
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)
