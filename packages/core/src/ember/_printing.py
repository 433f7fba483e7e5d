"""NumPy-style printing, summarised when large, with dtype and device."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ._tensor import Tensor

__all__ = ["format_tensor", "set_printoptions"]

_OPTIONS = {"threshold": 1000, "edgeitems": 3, "precision": 4, "linewidth": 88}


def set_printoptions(**options: int) -> None:
    """Change ``threshold``, ``edgeitems``, ``precision`` or ``linewidth`` of tensor printing."""
    unknown = set(options) - set(_OPTIONS)
    if unknown:
        raise ValueError(f"unknown print option(s): {', '.join(sorted(unknown))}")
    _OPTIONS.update(options)


def format_tensor(t: Tensor) -> str:
    arr = t.numpy()
    if arr.dtype.name == "bfloat16":
        arr = arr.astype(np.float32)
    body = np.array2string(
        arr, separator=", ", prefix="tensor(", threshold=_OPTIONS["threshold"],
        edgeitems=_OPTIONS["edgeitems"], precision=_OPTIONS["precision"],
        max_line_width=_OPTIONS["linewidth"], floatmode="maxprec")
    extra = f"shape={t.shape}, " if arr.size > _OPTIONS["threshold"] else ""
    return f"tensor({body}, {extra}dtype={t.dtype.name}, device='{t.device}')"
