"""Random operators: RandomUniform(Like), RandomNormal(Like) and Bernoulli.

With a ``seed`` attribute the draw is numpy's legacy ``RandomState(seed)`` (``rand``,
``randn``, ``binomial``), as the ONNX reference evaluator draws it, so a seeded graph gives
the same numbers here, there, and on every call (as seeded Dropout does); without one the
draw comes from ember's default generator on the model's device (``ember.manual_seed``
governs it).  Values follow the operator's definition: uniform in ``[low, high)``, normal
with ``mean`` and ``scale``.  Random outputs carry no gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ember as E
from ember import Tensor

from ._dtypes import ember_dtype
from ._registry import Node, Run, op


def _dtype(node: Node, like: Tensor | None) -> Any:
    code = node.attrs.get("dtype")
    if code is not None and int(code) != 0:
        d = ember_dtype(int(code), node.where())
    elif like is not None:
        d = like.dtype
    else:
        d = E.float32
    return d


def _state(node: Node) -> np.random.RandomState | None:
    seed = node.attrs.get("seed")
    return None if seed is None else np.random.RandomState(int(seed))


def _uniform(r: Run, node: Node, shape: tuple[int, ...], dtype: Any) -> Tensor:
    lo, hi = float(node.attrs.get("low", 0.0)), float(node.attrs.get("high", 1.0))
    st = _state(node)
    if st is not None:
        u = r.tensor(st.rand(*shape).astype(np.float64))
    else:
        u = E.rand(shape, dtype=E.float32, device=r.device)
    return (u * (hi - lo) + lo).to(dtype) if (lo, hi) != (0.0, 1.0) else u.to(dtype)


def _normal(r: Run, node: Node, shape: tuple[int, ...], dtype: Any) -> Tensor:
    mean, scale = float(node.attrs.get("mean", 0.0)), float(node.attrs.get("scale", 1.0))
    st = _state(node)
    if st is not None:
        z = r.tensor(st.randn(*shape).astype(np.float64))
    else:
        z = E.randn(shape, dtype=E.float32, device=r.device)
    return (z * scale + mean).to(dtype) if (mean, scale) != (0.0, 1.0) else z.to(dtype)


@op("RandomUniform", note="low, high, dtype, shape; seeded draws as the ONNX reference")
def random_uniform(r: Run, node: Node) -> Tensor:
    return _uniform(r, node, tuple(int(s) for s in node.attrs["shape"]), _dtype(node, None))


@op("RandomUniformLike", note="low, high, dtype; seeded draws as the ONNX reference")
def random_uniform_like(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    return _uniform(r, node, tuple(t.shape), _dtype(node, t))


@op("RandomNormal", note="mean, scale, dtype, shape; seeded draws as the ONNX reference")
def random_normal(r: Run, node: Node) -> Tensor:
    return _normal(r, node, tuple(int(s) for s in node.attrs["shape"]), _dtype(node, None))


@op("RandomNormalLike", note="mean, scale, dtype; seeded draws as the ONNX reference")
def random_normal_like(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    return _normal(r, node, tuple(t.shape), _dtype(node, t))


@op("Bernoulli", note="dtype; seeded draws as the ONNX reference (numpy's binomial)")
def bernoulli(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    dtype = _dtype(node, t)
    st = _state(node)
    if st is not None:
        p = r.host(t).astype(np.float64)
        if np.any((p < 0) | (p > 1)) or np.any(np.isnan(p)):
            raise ValueError(f"{node.where()}: probabilities must lie in [0, 1]")
        return r.tensor(st.binomial(1, p)).to(dtype)
    return (E.rand(tuple(t.shape), dtype=E.float32, device=r.device) < t.float()).to(dtype)


@op("Multinomial", note="sample_size draws per row of unnormalized log-probabilities; dtype "
    "int32/int64; seeded draws from numpy's RandomState(seed)")
def multinomial(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    if t.ndim != 2:
        raise ValueError(f"{node.where()}: input {tuple(t.shape)} is not [batch, classes]")
    n = int(node.attrs.get("sample_size", 1))
    if n < 1:
        raise ValueError(f"{node.where()}: sample_size must be positive, got {n}")
    dtype = ember_dtype(int(node.attrs.get("dtype", 6)), node.where())
    if dtype not in (E.int32, E.int64):
        raise TypeError(f"{node.where()}: dtype must be int32 or int64, got {dtype.name}")
    probs = E.softmax(t.float(), dim=1)
    st = _state(node)
    if st is None:
        return E.multinomial(probs, n, replacement=True).to(dtype)
    p = r.host(probs).astype(np.float64)
    cum = np.cumsum(p, axis=1)
    u = st.rand(p.shape[0], n) * cum[:, -1:]
    idx = np.stack([np.searchsorted(cum[i], u[i], side="right") for i in range(p.shape[0])])
    return r.tensor(np.minimum(idx, p.shape[1] - 1)).to(dtype)
