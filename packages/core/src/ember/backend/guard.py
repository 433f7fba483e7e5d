"""Guards for kernels that index memory from their params or from index values.

`Backend.dispatch` runs each op's shape rule before any kernel; a kernel table is public too
(``device.backend.kernels[op](...)``: a custom op, a plugin, a test), so a backend wraps the
entries whose kernels compute addresses from params (convolutions, pools, interpolation, pad,
slice) or read index tensors (gather, index_select, embedding, scatter) with `guard_kernels`:
the op's rule runs on every call, and index tensors are checked to lie in ``[-size, size)``
on the host before the launch, raising PyTorch's ``IndexError``.

The index check reads the index tensor back (one transfer and a sync; above `READ_WHOLE`
elements, its minimum and maximum reduced on the device).  It is skipped while a graph
capture records (`Backend.recording`: no sync is allowed there); the kernels themselves mask
every index outside ``[-size, size)`` (a read gives 0, a write is dropped), so no index value
ever reaches memory outside a buffer, checked or not.

>>> import ember
>>> from ember import ops
>>> ops.gather in GUARDED_OPS, INDEXED[ops.embedding]
(True, (0, 1, None))
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from .. import ops
from .._capture import active as _capturing
from .._dtype import int64
from .._plugins import extra_kernels
from ..ops import check_shapes

if TYPE_CHECKING:
    from .._backend import Backend, Kernel
    from ..ops import Op

__all__ = ["GUARDED_OPS", "INDEXED", "READ_WHOLE", "guard_kernels", "guarded",
           "install_kernels"]

NN, CO, MV, RD = ops.nn, ops.composite, ops.movement, ops.reduction

#: ops whose kernels compute addresses from params (windows, paddings, offsets, sizes)
GUARDED_OPS: Final[frozenset[Op]] = frozenset({
    NN.conv1d, NN.conv2d, NN.conv_transpose1d, NN.conv_transpose2d, NN.max_pool2d,
    NN.avg_pool2d, NN.adaptive_avg_pool2d, NN.interpolate, NN.embedding,
    CO.max_pool2d_values, CO.max_pool2d_backward, CO.conv2d_weight_grad, CO.fused_conv2d,
    MV.pad, MV.slice, MV.gather, MV.index_select, MV.scatter, MV.scatter_add,
})

#: ops that read an index tensor: ``op -> (position of the indexed input, of the index, the
#: param naming the indexed axis or None for axis 0)``
INDEXED: Final[dict[Op, tuple[int, int, str | None]]] = {
    MV.gather: (0, 1, "dim"),
    MV.index_select: (0, 1, "dim"),
    MV.scatter: (0, 1, "dim"),
    MV.scatter_add: (0, 1, "dim"),
    NN.embedding: (0, 1, None),
}


def _binder(op: Op, kernel: Callable[..., Any]) -> Callable[..., tuple[Sequence[Any],
                                                                        dict[str, Any]]]:
    """Splits a direct call's arguments into the payloads and the params by name, defaults
    filled in (dispatch passes params by keyword; a direct caller may pass them by position)."""
    try:
        sig: inspect.Signature | None = inspect.signature(kernel)
    except (TypeError, ValueError):  # a builtin without a signature: keywords only
        sig = None
    n = op.arity

    def split(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Sequence[Any],
                                                                        dict[str, Any]]:
        if len(args) == n and all(p in kwargs for p in op.params):  # the common case
            return args, kwargs
        if sig is None:
            return args[:n], kwargs
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        values = list(bound.arguments.values())
        params = {k: v for k, v in bound.arguments.items() if k in op.params}
        return values[:n], params

    return split


#: index tensors up to this many elements are read back whole (one transfer); larger ones
#: are reduced to their minimum and maximum on the device first
READ_WHOLE: Final = 1 << 16


def _index_range(backend: Backend, index: Any) -> tuple[int, int] | None:
    """The smallest and largest value of an index payload, read back from the device."""
    shape = tuple(index.shape)
    n = 1
    for d in shape:
        n *= d
    if n == 0:
        return None
    if n <= READ_WHOLE:
        values = backend.to_numpy(index, int64)
        return int(values.min()), int(values.max())
    kernels, every = backend.kernels, tuple(range(len(shape)))
    lo = backend.to_numpy(kernels[RD.min](index, dims=every, keepdim=False), int64)
    hi = backend.to_numpy(kernels[RD.max](index, dims=every, keepdim=False), int64)
    return int(lo), int(hi)


def guarded(op: Op, kernel: Kernel, backend: Backend | None = None) -> Kernel:
    """``kernel`` that runs ``op``'s shape rule first (a `ShapeError` naming the op), and, for
    an op of `INDEXED` with ``backend`` given, refuses index values outside ``[-size, size)``
    with an ``IndexError`` before the launch (not while a graph capture records).

    >>> import numpy as np
    >>> from ember import ops
    >>> k = guarded(ops.pad, lambda x, pad: np.pad(x, pad))
    >>> try:
    ...     k(np.ones((2,)), pad=((-3, 0),))
    ... except ValueError as exc:
    ...     print(str(exc)[:40])
    pad: pad=((-3, 0),) crops axis 0 of size
    """
    split = _binder(op, kernel)
    where = INDEXED.get(op) if backend is not None else None

    @functools.wraps(kernel)
    def run(*args: Any, **kwargs: Any) -> Any:
        payloads, params = split(args, kwargs)
        check_shapes(op, [p.shape for p in payloads], params)
        if where is not None and not _capturing() and not backend.recording():  # type: ignore[union-attr]  # where implies backend
            x, index = payloads[where[0]], payloads[where[1]]
            span = _index_range(backend, index)  # type: ignore[arg-type]  # not None here
            if span is not None:
                axis = 0 if where[2] is None else params[where[2]] % max(len(x.shape), 1)
                size = x.shape[axis] if x.shape else 1
                for v in span:
                    if not -size <= v < size:
                        raise IndexError(f"{op.name}: index {v} is out of bounds for dimension "
                                         f"{axis} with size {size}")
        return kernel(*args, **kwargs)

    run.__ember_guarded__ = op  # type: ignore[attr-defined]  # marks the wrapper
    return run


def guard_kernels(backend: Backend, only: Iterable[Op] = GUARDED_OPS) -> None:
    """Wrap ``backend.kernels``' entries for the ops of ``only`` (default `GUARDED_OPS`) with
    `guarded`, in place; a backend calls this once its table is complete.  Entries wrapped
    already are left as they are."""
    table = backend.kernels
    for op in only:
        kernel = table.get(op)
        if kernel is not None and getattr(kernel, "__ember_guarded__", None) is not op:
            table[op] = guarded(op, kernel, backend)


def install_kernels(backend: Backend, tables: Iterable[Mapping[Any, Kernel]]) -> None:
    """Fill ``backend.kernels`` from ``tables`` in order (a later table's entry wins), then
    with the kernels other plugins registered for ``backend.name``
    (`ember.backend.extra_kernels`), and guard it (`guard_kernels`): how a device backend's
    ``__init__`` builds its table."""
    table: dict[Any, Kernel] = {}
    for t in tables:
        table.update(t)
    table.update(extra_kernels(backend.name))  # custom ops other plugins provide
    backend.kernels = table
    guard_kernels(backend)  # direct calls of the table check params and index values too
