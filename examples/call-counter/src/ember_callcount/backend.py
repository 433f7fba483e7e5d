"""`CountingBackend`: the ``count<inner>`` device.

A decorator is a device wrapping an inner device.  This one keeps no state per tensor: the
payload of a ``count<...>`` tensor is simply the inner device's tensor, so `wrap` and `unwrap`
are one line each, and `dispatch` counts the op and hands it on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from ember.backend import Decorator, Device, Tensor
from ember.ops import Op

__all__ = ["CountingBackend"]


class CountingBackend(Decorator):
    """Counts the ops run through it, by name, in ``calls``.

    Parameters
    ----------
    inner : the device that computes (``cpu``, ``fusion<cpu>``, ...).
    composites : ``true`` (the default) lets a composite op (``softmax``, ``linear``, ...) run as
        one op where the inner device has a kernel for it, as it would without this decorator;
        ``false`` makes every composite decompose into the primitives that are counted.

    Examples
    --------
    >>> import ember
    >>> d = ember.device("count<cpu>")
    >>> x = ember.ones(3, device=d)
    >>> float((x * 2).sum())
    6.0
    >>> d.backend.calls["mul"], d.backend.calls["sum"]
    (1, 1)
    """

    def __init__(self, inner: Device, composites: bool | str = True) -> None:
        super().__init__(inner)
        self.name = "count"
        self.composites = str(composites).lower() not in ("false", "0", "no")
        self.calls: Counter[str] = Counter()

    # -- a count<...> tensor is the inner tensor under this device's name -------------------

    def wrap(self, inner: Tensor) -> Tensor:
        # from_payload: the public constructor (no copy; the payload here is the inner tensor)
        return self.tensor_type.from_payload(inner, self.device, inner.dtype)

    def unwrap(self, tensor: Tensor) -> Tensor:
        inner: Tensor = tensor.payload
        return inner

    # -- ops ------------------------------------------------------------------------------------

    def implements(self, op: Op) -> bool:
        """Whether composite ``op`` runs as one op here: where the inner device runs it so."""
        return self.composites and self.inner.implements(op)

    def dispatch(self, op: Op, args: Sequence[Tensor], params: dict[str, Any]) -> Any:
        self.calls[op.name] += 1
        # the inner device checks shapes and runs the kernel; its results come back wrapped
        # (`Decorator.dispatch`: unwrap each argument, dispatch, wrap each result)
        return super().dispatch(op, args, params)

    def reset(self) -> Counter[str]:
        """The counts so far, and start again from zero."""
        calls, self.calls = self.calls, Counter()
        return calls
