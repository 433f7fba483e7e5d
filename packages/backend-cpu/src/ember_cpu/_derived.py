"""Forms of a layer's weights that a kernel derives from them (Winograd's transformed
filters), kept from call to call and checked against the weights on every use.

A kernel cannot assume that an array it saw before still holds the same values: the same
array object can be written in place (``ember.compile`` writes a dying input's result into
its buffer; memory shared through DLPack can be written by its other owner).  So an entry
keeps a copy of the weights it was derived from, and each use compares the weights with that
copy, bit for bit, range by range (`Derived.stale`): a range that differs is derived again
(and its copy refreshed) before anything reads it.  Comparing reads the weights and the copy
once; Winograd's filter transform writes four times as much as it reads, and a compiled
comparison runs at memory speed.

Entries are per thread (kernels run concurrently in the Fusion plugin's and the DataLoader's
threads; a call's helper threads work on its caller's entry), keyed by the weights' identity,
shape, strides, address and the caller's tag, dropped when the weights are garbage
collected, and least recently used first out past `DERIVED_BYTES` a thread.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["DERIVED_BYTES", "Derived", "derived"]

#: the most bytes of derived weights (with their copies) kept per thread
DERIVED_BYTES = 64 << 20


class Derived:
    """``value`` (what a caller derives from ``weights``, laid out as it likes) and the copy
    of the weights it was derived from.  Until `done` is called after a first complete
    derivation, every range counts as stale."""

    __slots__ = ("__weakref__", "copy", "nbytes", "ready", "value")

    def __init__(self, source: np.ndarray, shape: tuple[int, ...], dtype: Any) -> None:
        self.copy = np.empty(source.shape, source.dtype)
        self.value = np.empty(shape, dtype)
        self.nbytes = self.copy.nbytes + self.value.nbytes
        self.ready = False

    def stale(self, source: np.ndarray, lo: int, hi: int) -> bool:
        """Whether rows ``lo:hi`` of ``source`` (the weights as the caller flattened them,
        C-contiguous) differ from the copy, bit for bit; if so the copy takes them, the
        caller must derive those rows again before reading them, and the whole entry counts
        as stale until `done` is called (a derivation that raised is not trusted)."""
        if self.ready and _same_bits(source[lo:hi], self.copy[lo:hi]):
            return False
        self.ready = False  # until the caller has derived them (and calls `done`)
        self.copy[lo:hi] = source[lo:hi]
        return True

    def done(self) -> None:
        """Every range has been derived once (a call went through without an error)."""
        self.ready = True


class _Held:
    """One thread's entries; insertion order is use order (the first is the least recently
    used)."""

    def __init__(self) -> None:
        self.entries: dict[tuple[Any, ...], tuple[weakref.ref[np.ndarray], Derived]] = {}
        self.nbytes = 0
        self.freed: list[int] = []  # bytes of entries dropped from other threads


_local = threading.local()


def _forget(held: _Held, key: tuple[Any, ...]) -> Callable[[Any], None]:
    def drop(_: Any) -> None:  # the weights were collected, maybe in another thread
        found = held.entries.pop(key, None)
        if found is not None:
            held.freed.append(found[1].nbytes)
    return drop


def derived(weights: np.ndarray, source: np.ndarray, tag: tuple[Any, ...],
            shape: tuple[int, ...], dtype: Any) -> Derived:
    """This thread's entry for ``weights`` (the array the kernel was given) under ``tag``,
    with a ``value`` of ``shape`` and ``dtype``; ``source`` is the weights as the caller
    compares them (C-contiguous, e.g. ``[O*C, 9]``).  A new entry is stale everywhere."""
    dt = np.dtype(dtype)
    key = (id(weights), weights.shape, weights.strides, weights.dtype,
           weights.__array_interface__["data"][0], tag, shape, dt)
    held = getattr(_local, "held", None)
    if held is None:
        held = _local.held = _Held()
    while held.freed:
        held.nbytes -= held.freed.pop()
    found = held.entries.pop(key, None)
    if found is not None and found[0]() is weights:
        held.entries[key] = found  # now the most recently used
        return found[1]
    if found is not None:  # another array under a reused id
        held.nbytes -= found[1].nbytes
    entry = Derived(source, shape, dt)
    if entry.nbytes > DERIVED_BYTES:
        return entry  # used once, kept nowhere
    while held.entries and held.nbytes + entry.nbytes > DERIVED_BYTES:
        old = held.entries.pop(next(iter(held.entries)))
        held.nbytes -= old[1].nbytes
    try:
        ref = weakref.ref(weights, _forget(held, key))
    except TypeError:  # an array type without weak references: nothing to key on safely
        return entry
    held.entries[key] = (ref, entry)
    held.nbytes += entry.nbytes
    return entry


@functools.cache
def _compare() -> Callable[..., bool]:
    import numba

    @numba.njit(cache=True, nogil=True)
    def same(a: Any, b: Any) -> bool:
        # no early exit: the loop vectorises (an exit per block ran 3-6x slower)
        diff = a.dtype.type(0)
        for i in range(a.size):
            diff |= a[i] ^ b[i]
        return bool(diff == 0)

    return same


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two C-contiguous arrays of one shape and dtype hold the same bits."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.size == 0:
        return True
    ints = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}.get(a.dtype.itemsize)
    if ints is None or not (a.flags.c_contiguous and b.flags.c_contiguous):
        return a.tobytes() == b.tobytes()
    return bool(_compare()(a.reshape(-1).view(ints), b.reshape(-1).view(ints)))
