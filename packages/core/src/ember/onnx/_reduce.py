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
}


def _reduce(fn: Callable[[Tensor, tuple[int, ...], bool], Tensor]) -> Callable[..., Tensor]:
    def run(r: Run, node: Node, x: Any, axes: Any = None) -> Tensor:
        t = r.tensor(x)
        ax = _axes(node, t.ndim, r.host(axes) if axes is not None else None)
        if ax is None:
            return t
        return fn(t, ax, bool(node.attrs.get("keepdims", 1)))
    return run


def _reduce_host(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def run(node: Node, x: np.ndarray, axes: Any = None) -> np.ndarray:
        ax = _axes(node, x.ndim, axes)
        if ax is None:
            return x
        return np.asarray(fn(x, axis=ax, keepdims=bool(node.attrs.get("keepdims", 1)))).astype(
            x.dtype)
    return run


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


@op("TopK", host_inputs=(1,))
def topk(r: Run, node: Node, x: Any, k: Any) -> tuple[Tensor, Tensor]:
    t = r.tensor(x)
    a = node.attrs.get("axis", -1) % max(t.ndim, 1)
    kk = r.ints(k)[0]
    v, i = M.topk(t, kk, dim=a, largest=bool(node.attrs.get("largest", 1)), sorted=True)
    return v, i


@op("Softmax")
def softmax(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    return t.softmax(dim=node.attrs.get("axis", -1))


@op("LogSoftmax")
def log_softmax(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    return t.log_softmax(dim=node.attrs.get("axis", -1))
