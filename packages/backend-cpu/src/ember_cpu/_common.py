"""Helpers shared by the kernel modules: silent floating-point errors and low-precision math."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import ml_dtypes
import numpy as np

__all__ = ["BF16", "F32", "LOW", "quiet", "wide", "widen"]

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
#: dtypes whose reductions and matmuls accumulate in float32 (as PyTorch does)
LOW = frozenset({F16, BF16})

Kernel = Callable[..., Any]
_P = ParamSpec("_P")
_R = TypeVar("_R")

# PyTorch never warns about inf/nan results; numpy does, through its error state.  Entering
# ``np.errstate`` costs ~3 µs, so set numpy's context variable directly where it exists.
try:
    from numpy._core._ufunc_config import (  # type: ignore[attr-defined]  # private names
        _extobj_contextvar,
        _make_extobj,
    )

    _QUIET = _make_extobj(all="ignore")
    _set, _reset = _extobj_contextvar.set, _extobj_contextvar.reset

    def quiet(fn: Callable[_P, _R]) -> Callable[_P, _R]:
        """``fn`` with numpy's floating-point warnings off."""

        @functools.wraps(fn)
        def kernel(*args: _P.args, **params: _P.kwargs) -> _R:
            token = _set(_QUIET)
            try:
                return fn(*args, **params)
            finally:
                _reset(token)

        return kernel

except ImportError:  # numpy < 2: the public (slower) way

    def quiet(fn: Callable[_P, _R]) -> Callable[_P, _R]:
        """``fn`` with numpy's floating-point warnings off."""
        return np.errstate(all="ignore")(fn)


def wide(x: np.ndarray) -> np.ndarray:
    """``x`` in float32 when it is float16 or bfloat16, else ``x`` itself."""
    return x.astype(F32) if x.dtype in LOW else x


def widen(fn: Kernel) -> Kernel:
    """A kernel computing ``fn`` in float32 for float16/bfloat16 inputs and casting back."""

    @functools.wraps(fn)
    def kernel(x: np.ndarray, *args: Any, **params: Any) -> Any:
        dt = x.dtype
        if dt in LOW:
            return np.asarray(fn(x.astype(F32), *(wide(a) for a in args), **params)).astype(dt)
        return np.asarray(fn(x, *args, **params))

    return kernel
