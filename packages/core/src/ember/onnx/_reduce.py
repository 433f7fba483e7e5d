"""Reductions (axes as an attribute before opset 18, as an input from 18; ReduceSum from 13),
ArgMax/ArgMin, TopK, Softmax and LogSoftmax."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import ember as E
from ember import Tensor

from ._registry import Node, Run, op

M = R = E  # ember's tensor functions, by family: movement, reductions


def _axes(node: Node, ndim: int, axes: Any) -> tuple[int, ...] | None:
    """The reduced axes, or ``None`` for a no-op (noop_with_empty_axes with no axes)."""
    if axes is not None and np.asarray(axes).size:
        ax = [int(a) for a in np.asarray(axes).reshape(-1)]
    elif node.attrs.get("axes") is not None:
        ax = list(node.attrs["axes"])
    elif node.attrs.get("noop_with_empty_axes", 0):
        return None
    else:
        ax = list(range(ndim))
    for a in ax:
        if not -max(ndim, 1) <= a < max(ndim, 1):
            raise ValueError(f"{node.where()}: axis {a} is out of range for rank {ndim}")
    return tuple(sorted({a % max(ndim, 1) for a in ax}))


_REDUCE: dict[str, tuple[Callable[[Tensor, tuple[int, ...], bool], Tensor],
                         Callable[..., np.ndarray] | None]] = {
    "ReduceSum": (lambda t, d, k: R.sum(t, dim=d, keepdim=k), np.sum),
    "ReduceMean": (lambda t, d, k: R.mean(t, dim=d, keepdim=k), None),
    "ReduceMax": (lambda t, d, k: R.amax(t, dim=d, keepdim=k), np.max),
    "ReduceMin": (lambda t, d, k: R.amin(t, dim=d, keepdim=k), np.min),
    "ReduceProd": (lambda t, d, k: R.prod(t, dim=d, keepdim=k), np.prod),
    "ReduceL1": (lambda t, d, k: R.sum(E.abs(t), dim=d, keepdim=k), None),
    "ReduceL2": (lambda t, d, k: E.sqrt(R.sum(t * t, dim=d, keepdim=k)), None),
    "ReduceSumSquare": (lambda t, d, k: R.sum(t * t, dim=d, keepdim=k), None),
    "ReduceLogSumExp": (lambda t, d, k: E.logsumexp(t, dim=d, keepdim=k), None),
    "ReduceLogSum": (lambda t, d, k: E.log(R.sum(t, dim=d, keepdim=k)), None),
}

#: what ReduceMax and ReduceMin give over an empty set of elements (ONNX: -inf and +inf)
_EMPTY = {"ReduceMax": -np.inf, "ReduceMin": np.inf}


def _empty_reduction(node: Node, t: Tensor, ax: tuple[int, ...], keep: bool) -> Tensor:
    shape = [1 if i in ax else d for i, d in enumerate(t.shape) if keep or i not in ax]
    v = _EMPTY[node.op_type]
    if t.dtype.kind == "b":
        fill: float = float(v > 0)
    elif t.dtype.kind in "iu":
        info = np.iinfo(t.dtype.numpy_name)
        fill = float(info.max if v > 0 else info.min)
    else:
        fill = float(v)
    return E.full(shape, fill, dtype=t.dtype, device=t.device)


def _reduce(fn: Callable[[Tensor, tuple[int, ...], bool], Tensor]) -> Callable[..., Tensor]:
    def run(r: Run, node: Node, x: Any, axes: Any = None) -> Tensor:
        t = r.tensor(x)
        ax = _axes(node, t.ndim, r.host(axes) if axes is not None else None)
        if ax is None:
            return t
        keep = bool(node.attrs.get("keepdims", 1))
        if node.op_type in _EMPTY and any(t.shape[a] == 0 for a in ax):
            return _empty_reduction(node, t, ax, keep)
        return fn(t, ax, keep)
    return run


def _reduce_host(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def run(node: Node, x: np.ndarray, axes: Any = None) -> np.ndarray:
        ax = _axes(node, x.ndim, axes)
        if ax is None:
            return x
        if node.op_type in _EMPTY and any(x.shape[a] == 0 for a in ax):
            return _empty_host(node, x, ax)
        return np.asarray(fn(x, axis=ax, keepdims=bool(node.attrs.get("keepdims", 1)))).astype(
            x.dtype)
    return run


def _empty_host(node: Node, x: np.ndarray, ax: tuple[int, ...]) -> np.ndarray:
    keep = bool(node.attrs.get("keepdims", 1))
    shape = [1 if i in ax else d for i, d in enumerate(x.shape) if keep or i not in ax]
    v = _EMPTY[node.op_type]
    if x.dtype.kind == "b":
        return np.full(shape, v > 0)
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        return np.full(shape, info.max if v > 0 else info.min, x.dtype)
    return np.full(shape, v, x.dtype)


for _name, (_fn, _host) in _REDUCE.items():
    op(_name, host=_reduce_host(_host) if _host is not None else None, host_inputs=(1,))(
        _reduce(_fn))


def _arg(largest: bool) -> Callable[..., Tensor]:
    def run(r: Run, node: Node, x: Any) -> Tensor:
        t = r.tensor(x)
        a = node.attrs.get("axis", 0)
        a = a % max(t.ndim, 1)
        keep = bool(node.attrs.get("keepdims", 1))
        fn = R.argmax if largest else R.argmin
        if node.attrs.get("select_last_index", 0):
            flipped = fn(M.flip(t, a), dim=a, keepdim=keep)
            last: Tensor = (t.shape[a] - 1) - flipped
            return last
        return fn(t, dim=a, keepdim=keep)
    return run


op("ArgMax")(_arg(True))
op("ArgMin")(_arg(False))


@op("TopK", host_inputs=(1,), note="k as an attribute before opset 10, as an input from 10")
def topk(r: Run, node: Node, x: Any, k: Any = None) -> tuple[Tensor, Tensor]:
    t = r.tensor(x)
    a = node.attrs.get("axis", -1) % max(t.ndim, 1)
    kk = int(node.attrs["k"]) if node.opset < 10 else r.ints(k)[0]
    # Note: sorted=0 allows any order; ember's sorted order is one of them
    v, i = M.topk(t, kk, dim=a, largest=bool(node.attrs.get("largest", 1)), sorted=True)
    return v, i


def _coerced(node: Node, t: Tensor, fn: Any) -> Tensor:
    """Before opset 13 Softmax, LogSoftmax and Hardmax flatten the input to 2-D at ``axis``
    (default 1) and work along the second axis; from 13 they work along ``axis`` (default
    -1)."""
    if node.opset >= 13:
        return fn(t, node.attrs.get("axis", -1) % max(t.ndim, 1))  # type: ignore[no-any-return]
    a = node.attrs.get("axis", 1) % max(t.ndim, 1)
    rows = int(np.prod(t.shape[:a], dtype=np.int64))
    flat = t.reshape(rows, -1)
    return fn(flat, 1).reshape(t.shape)  # type: ignore[no-any-return]


@op("Softmax", note="opsets before 13: over the input flattened to 2-D at axis")
def softmax(r: Run, node: Node, x: Any) -> Tensor:
    return _coerced(node, r.tensor(x), lambda t, a: t.softmax(dim=a))


@op("LogSoftmax", note="opsets before 13: over the input flattened to 2-D at axis")
def log_softmax(r: Run, node: Node, x: Any) -> Tensor:
    return _coerced(node, r.tensor(x), lambda t, a: t.log_softmax(dim=a))


def _hardmax(t: Tensor, a: int) -> Tensor:
    if t.shape[a] == 0:
        return t
    first = R.argmax(t, dim=a, keepdim=True)
    shape = [1] * t.ndim
    shape[a] = t.shape[a]
    pos = E.arange(t.shape[a], device=t.device).reshape(shape)
    return E.eq(pos, first).to(t.dtype)


@op("Hardmax", note="opsets before 13: over the input flattened to 2-D at axis")
def hardmax(r: Run, node: Node, x: Any) -> Tensor:
    return _coerced(node, r.tensor(x), _hardmax)
