"""Creation kernels: constants, ranges, casts and counter-based random numbers."""

from __future__ import annotations

from typing import Any

import numpy as np
from ember.backend import numpy_dtype
from ember.ops import creation as cr

from ._common import BF16, F16, F32, F64, quiet

__all__ = ["KERNELS", "generator"]


def _full(shape: tuple[int, ...] = (), value: Any = 0, dtype: Any = None) -> np.ndarray:
    out = np.empty(shape, dtype=numpy_dtype(dtype))
    out.fill(value)  # np.full adds ~2 µs of Python around the same fill
    return out


def _arange(start: Any = 0, stop: Any = 0, step: Any = 1, dtype: Any = None) -> np.ndarray:
    nd = numpy_dtype(dtype)
    if nd.kind == "f":
        # PyTorch's rule: n = ceil((stop - start) / step) values start + i * step
        n = max(int(np.ceil((stop - start) / step)), 0)
        values: np.ndarray = start + np.arange(n, dtype=F64) * step
        return values.astype(nd)
    return np.arange(start, stop, step, dtype=nd)


def generator(seed: int, offset: int) -> np.random.Generator:
    """The numpy generator for one random op: Philox keyed by ``seed`` at counter ``offset``.

    The offset sits in the counter's top word, so the streams of two ops never overlap.
    """
    return np.random.Generator(np.random.Philox(key=seed, counter=[0, 0, 0, offset]))


# mantissa bits (with the implicit one) of the half types: uniform draws on a grid this fine
# are exact in the type and stay below 1 after the cast
_BITS = {F16: 11, BF16: 8}


def _rand(shape: tuple[int, ...] = (), dtype: Any = None, seed: int = 0,
          offset: int = 0) -> np.ndarray:
    nd = numpy_dtype(dtype)
    g = generator(seed, offset)
    if nd in (F32, F64):
        return g.random(shape, dtype=nd)
    bits = _BITS[nd]
    return (g.integers(0, 1 << bits, size=shape, dtype=np.int32) * (1.0 / (1 << bits))).astype(nd)


def _randn(shape: tuple[int, ...] = (), dtype: Any = None, seed: int = 0,
           offset: int = 0) -> np.ndarray:
    nd = numpy_dtype(dtype)
    g = generator(seed, offset)
    if nd in (F32, F64):
        return g.standard_normal(shape, dtype=nd)
    return g.standard_normal(shape, dtype=F32).astype(nd)


def _randint(low: int = 0, high: int = 1, shape: tuple[int, ...] = (), dtype: Any = None,
             seed: int = 0, offset: int = 0) -> np.ndarray:
    nd = numpy_dtype(dtype)
    g = generator(seed, offset)
    if nd.kind in "iub":
        return g.integers(low, high, size=shape, dtype=nd)
    return g.integers(low, high, size=shape, dtype=np.int64).astype(nd)


def _cast(x: np.ndarray, dtype: Any = None) -> np.ndarray:
    nd = numpy_dtype(dtype)
    if nd.kind == "b" and x.dtype == BF16:
        nonzero: np.ndarray = x.astype(F32) != 0
        return nonzero
    return np.asarray(x.astype(nd))


KERNELS: dict[Any, Any] = {
    cr.full: _full,
    cr.arange: _arange,
    cr.rand: _rand,
    cr.randn: _randn,
    cr.randint: _randint,
    cr.cast: quiet(_cast),
}
