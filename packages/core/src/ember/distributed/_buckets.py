"""Gradient buckets: many small gradients all-reduced as a few large flat tensors."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from .._tensor import Tensor
from ._communicator import Communicator, Work

__all__ = ["GradientBuckets", "ReducedGradients"]

DEFAULT_BUCKET_MB = 25.0


def _key(t: Any) -> int:
    # as ember_train and the optimizers do: a parameter is found by its payload
    return id(getattr(t, "_data", t))


class ReducedGradients:
    """The all-reduced gradients, read like ``loss.backward()``'s `Gradients`:
    ``grads[p]``, ``grads.get(p)``, ``p in grads``, iteration over ``(tensor, gradient)``."""

    def __init__(self, pairs: Iterable[tuple[Tensor, Tensor]]) -> None:
        self._by_key = {_key(p): (p, g) for p, g in pairs}

    def __getitem__(self, t: Tensor) -> Tensor:
        found = self._by_key.get(_key(t))
        if found is None:
            raise KeyError("no reduced gradient for this tensor")
        return found[1]

    def get(self, t: Tensor, default: Tensor | None = None) -> Tensor | None:
        found = self._by_key.get(_key(t))
        return default if found is None else found[1]

    def __contains__(self, t: object) -> bool:
        return _key(t) in self._by_key

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        return iter(self._by_key.values())

    def items(self) -> Iterator[tuple[Tensor, Tensor]]:
        return iter(self._by_key.values())

    def __len__(self) -> int:
        return len(self._by_key)


class GradientBuckets:
    """Average gradients over the ranks of ``comm``, a bucket of ~``bucket_mb`` at a time.

    The parameters are split, in reverse order (the last layers' gradients are the first ones
    backward finishes), into buckets of one dtype and device and at most ``bucket_mb``
    megabytes (``EMBER_DIST_BUCKET_MB``, default 25); a parameter larger than that is a bucket
    alone.  `reduce` flattens each bucket into one tensor, starts its all-reduce and packs the
    next bucket while the previous ones are in flight, then unflattens the means.  Every rank
    must build its buckets from the same parameters in the same order.  A parameter without a
    gradient on a rank counts as zeros there, so every rank sends the same buckets.

    Examples
    --------
    >>> import ember
    >>> from ember.distributed import GradientBuckets, LocalCommunicator, ReducedGradients
    >>> w, b = ember.ones(2, 3), ember.zeros(3)
    >>> buckets = GradientBuckets([w, b], LocalCommunicator())
    >>> len(buckets.buckets)
    1
    >>> grads = ReducedGradients([(w, ember.full((2, 3), 0.5)), (b, ember.zeros(3))])
    >>> buckets.reduce(grads)[w].tolist()[0]
    [0.5, 0.5, 0.5]
    """

    def __init__(self, params: Sequence[Tensor], comm: Communicator,
                 bucket_mb: float | None = None) -> None:
        if bucket_mb is None:
            bucket_mb = float(os.environ.get("EMBER_DIST_BUCKET_MB", DEFAULT_BUCKET_MB))
        if bucket_mb <= 0:
            raise ValueError(f"bucket_mb must be positive, got {bucket_mb}")
        self.comm = comm
        self.bucket_bytes = int(bucket_mb * 2**20)
        self.params = list(params)
        self.buckets: list[list[Tensor]] = []
        open_by_kind: dict[tuple[str, str], tuple[list[Tensor], int]] = {}
        for p in reversed(self.params):
            kind = (str(p.dtype), str(_inner(p).device))
            size = math.prod(p.shape) * p.dtype.itemsize
            current = open_by_kind.get(kind)
            if current is None or (current[1] + size > self.bucket_bytes and current[0]):
                current = ([], 0)
                self.buckets.append(current[0])
            current[0].append(p)
            open_by_kind[kind] = (current[0], current[1] + size)

    def reduce(self, grads: Any) -> ReducedGradients:
        """The mean over ranks of ``grads`` (anything with ``get(param)``), per parameter."""
        import ember

        if self.comm.world_size == 1:
            return ReducedGradients((p, g) for p in self.params
                                    if (g := grads.get(p)) is not None)
        inflight: list[tuple[list[Tensor], Work]] = []
        for bucket in self.buckets:
            flat = []
            for p in bucket:
                g = grads.get(p)
                if g is None:
                    g = ember.zeros(p.shape, dtype=p.dtype, device=_inner(p).device)
                flat.append(g.reshape(-1))
            packed = flat[0] if len(flat) == 1 else ember.cat(flat)
            inflight.append((bucket, self.comm.all_reduce_async(packed, "mean")))
        pairs: list[tuple[Tensor, Tensor]] = []
        for bucket, work in inflight:
            mean = work.wait()
            offset = 0
            for p in bucket:
                n = math.prod(p.shape)
                pairs.append((p, mean[offset:offset + n].reshape(p.shape)))
                offset += n
        return ReducedGradients(pairs)


def _inner(t: Tensor) -> Tensor:
    """The tensor behind an autodiff parameter (gradients live on the inner device)."""
    value = getattr(t._data, "value", None)
    return value if isinstance(value, Tensor) else t
