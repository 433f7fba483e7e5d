"""The numpy float64 oracle's side of a comparison: tolerance presets and `assert_close`."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _dtype as dt

__all__ = ["TOLERANCES", "assert_close", "host_float64"]

#: ``(rtol, atol)`` per result dtype.  Integer and bool results must match exactly.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-9, 1e-12),
    "float32": (2e-5, 2e-6),
    "float16": (4e-3, 2e-3),
    "bfloat16": (3e-2, 1.6e-2),
}


def host_float64(array: np.ndarray) -> np.ndarray:
    """The oracle's view of a host array: floats widened to float64, ints to int64."""
    if array.dtype.kind == "f" or array.dtype.name == "bfloat16":
        return array.astype(np.float64)
    if array.dtype.kind in "iu":
        return array.astype(np.int64)
    return array


def assert_close(actual: Any, expected: Any, dtype: dt.DType | None = None, *,
                 rtol: float | None = None, atol: float | None = None,
                 what: str = "result") -> None:
    """Check an ember tensor against a numpy float64 (or int64/bool) oracle value.

    The tensor's shape must equal the oracle's, its dtype must be ``dtype`` (when given), and
    its values must agree within the preset tolerance of that dtype: nan where the oracle has
    nan, infinities of the same sign, ``|a - e| <= atol + rtol * |e|`` elsewhere.  Integer and
    bool results must match exactly.

    Examples
    --------
    >>> import ember, numpy as np
    >>> assert_close(ember.tensor([1.0, 2.0]), np.array([1.0, 2.0]), ember.float32)
    """
    from .._tensor import Tensor

    if not isinstance(actual, Tensor):
        raise AssertionError(f"{what}: expected an ember.Tensor, got {type(actual).__name__}")
    exp = np.asarray(expected)
    if dtype is not None and actual.dtype is not dtype:
        raise AssertionError(f"{what}: dtype {actual.dtype.name}, expected {dtype.name}")
    if tuple(actual.shape) != exp.shape:
        raise AssertionError(f"{what}: shape {tuple(actual.shape)}, expected {exp.shape}")
    got = actual.numpy()
    if tuple(got.shape) != exp.shape:
        raise AssertionError(f"{what}: .numpy() has shape {got.shape}, tensor says {exp.shape}")
    kind = actual.dtype.kind
    if kind != "f":
        if kind == "b":
            ok = got.astype(bool) == exp.astype(bool)
        else:
            ok = got.astype(np.int64) == exp.astype(np.int64)
        _report(ok, got, exp, what, "exactly")
        return
    preset = TOLERANCES[actual.dtype.name]
    rt = preset[0] if rtol is None else rtol
    at = preset[1] if atol is None else atol
    g = got.astype(np.float64)
    e = exp.astype(np.float64)
    with np.errstate(invalid="ignore"):
        both_nan = np.isnan(g) & np.isnan(e)
        same_inf = np.isinf(e) & (g == e)
        finite = np.isfinite(e) & (np.abs(g - e) <= at + rt * np.abs(e))
    _report(both_nan | same_inf | finite, got, exp, what, f"within rtol={rt:g}, atol={at:g}")


def _report(ok: np.ndarray, got: np.ndarray, exp: np.ndarray, what: str, how: str) -> None:
    if bool(np.all(ok)):
        return
    bad = np.argwhere(~np.asarray(ok))
    first = tuple(int(i) for i in bad[0]) if bad.ndim == 2 and bad.shape[1] else ()
    g, e = got[first] if first else got, exp[first] if first else exp
    raise AssertionError(
        f"{what}: {len(bad)} of {max(exp.size, 1)} element(s) differ from the numpy oracle "
        f"({how}); first at index {first}: got {g!r}, expected {e!r}")
