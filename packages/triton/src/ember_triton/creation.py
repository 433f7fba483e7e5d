"""Creation kernels: constants, ranges, casts and Philox random numbers."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from ember.backend import DType, numpy_dtype
from ember.ops import creation as cr

from ._array import DeviceArray, kind_of
from ._codegen import elementwise

if TYPE_CHECKING:
    from .backend import TritonBackend

__all__ = ["KERNELS"]


def _np_dtype(dtype: Any) -> np.dtype[Any]:
    """An ember dtype or a numpy one (kernels call each other with numpy dtypes)."""
    return numpy_dtype(dtype) if isinstance(dtype, DType) else np.dtype(dtype)


def full(be: TritonBackend, shape: tuple[int, ...] = (), value: Any = 0,
         dtype: Any = None) -> DeviceArray:
    nd = _np_dtype(dtype)
    return elementwise(be, "r = s0", [], nd, scalars=[be.scalar(value, nd)], shape=tuple(shape))


def _arange(be: TritonBackend, start: Any = 0, stop: Any = 0, step: Any = 1,
            dtype: Any = None) -> DeviceArray:
    nd = numpy_dtype(dtype)
    if kind_of(nd) == "f":
        n = max(math.ceil((stop - start) / step), 0)
        sc = [be.scalar(start, np.float64), be.scalar(step, np.float64)]
        body = "r = s0 + offs.to(tl.float64) * s1"
    else:
        # numpy's integer arange: ceil((stop - start) / step) values, spaced by the step as
        # the dtype rounds it
        n = max(math.ceil((stop - start) / step), 0)
        first = int(nd.type(start))
        delta = int(np.array(start + step).astype(nd)) - first
        sc = [be.scalar(first, np.int64), be.scalar(delta, np.int64)]
        body = "r = s0 + offs * s1"
    return elementwise(be, body, [], nd, scalars=sc, shape=(n,), widen=False)


_BITS = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}


def _random(be: TritonBackend, kind: str, shape: tuple[int, ...], nd: np.dtype[Any], seed: int,
            offset: int, **meta: Any) -> DeviceArray:
    out = be.empty(tuple(shape), nd)
    n = out.size
    if n:
        k = be.module("random")
        block = be.block_size(n)
        seed = int(seed) & ((1 << 63) - 1)
        if kind == "integers":
            be.launch(k.integers, (-(-n // block),), out, n, seed, int(offset), meta["low"],
                      meta["span"], BLOCK=block)
        else:
            be.launch(getattr(k, kind), (-(-n // block),), out, n, seed, int(offset),
                      BLOCK=block, **{k_: v for k_, v in meta.items()})
    return out


def _rand(be: TritonBackend, shape: tuple[int, ...] = (), dtype: Any = None, seed: int = 0,
          offset: int = 0) -> DeviceArray:
    nd = numpy_dtype(dtype)
    return _random(be, "uniform", shape, nd, seed, offset, BITS=_BITS[nd.name])


def _randn(be: TritonBackend, shape: tuple[int, ...] = (), dtype: Any = None, seed: int = 0,
           offset: int = 0) -> DeviceArray:
    nd = numpy_dtype(dtype)
    return _random(be, "normal", shape, nd, seed, offset, WIDE=nd.name == "float64")


def _randint(be: TritonBackend, low: int = 0, high: int = 1, shape: tuple[int, ...] = (),
             dtype: Any = None, seed: int = 0, offset: int = 0) -> DeviceArray:
    nd = numpy_dtype(dtype)
    store = nd if kind_of(nd) in "iu" else np.dtype(np.int64)
    out = _random(be, "integers", shape, store, seed, offset, low=int(low),
                  span=max(int(high) - int(low), 1))
    return out if store == nd else cast(be, out, dtype)


def cast(be: TritonBackend, x: DeviceArray, dtype: Any = None) -> DeviceArray:
    nd = _np_dtype(dtype)
    if nd == x.dtype:
        return x
    from .elementwise import cast_expression, run

    return run(be, cast_expression(nd), [x])


KERNELS: dict[Any, Any] = {
    cr.full: full,
    cr.arange: _arange,
    cr.rand: _rand,
    cr.randn: _randn,
    cr.randint: _randint,
    cr.cast: cast,
}
