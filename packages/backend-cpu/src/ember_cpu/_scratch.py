"""Work buffers that kernels reuse from call to call (an im2col matrix, a padded input).

A fresh large array costs more than the copy that fills it on the development VM: its pages
are faulted in one by one (~2 µs a 4 KiB page, so ~4 ms for a ResNet stem's 7.4 MB im2col
matrix), and memory the allocator gives back returns to the host.  A kernel that needs a
temporary of the same shape on every call (a convolution of a fixed layer) takes it from here
instead.  Buffers are per thread (kernels run concurrently in the Fusion plugin's and the
DataLoader's threads), least recently used first out once they hold more than
`SCRATCH_BYTES`; a buffer never escapes the kernel call that took it.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

__all__ = ["SCRATCH_BYTES", "scratch"]

#: the most bytes of work buffers kept per thread (larger requests are not kept at all)
SCRATCH_BYTES = 64 << 20


class _Buffers(threading.local):
    def __init__(self) -> None:
        # insertion order is use order: the first entry is the least recently used
        self.held: dict[tuple[Any, ...], np.ndarray] = {}
        self.nbytes = 0


_BUFFERS = _Buffers()


def scratch(key: tuple[Any, ...], shape: tuple[int, ...], dtype: Any,
            zeroed: bool = False) -> tuple[np.ndarray, bool]:
    """A C-contiguous work buffer of ``shape`` and ``dtype`` for the caller named by ``key``,
    and whether it is fresh (zero-filled when ``zeroed``; otherwise its contents are what the
    last caller with the same ``key``, shape and dtype left there)."""
    dt = np.dtype(dtype)
    full = (key, shape, dt)
    local = _BUFFERS
    buf = local.held.pop(full, None)
    if buf is not None:
        local.held[full] = buf  # now the most recently used
        return buf, False
    buf = np.zeros(shape, dt) if zeroed else np.empty(shape, dt)
    if buf.nbytes > SCRATCH_BYTES:
        return buf, True
    while local.held and local.nbytes + buf.nbytes > SCRATCH_BYTES:
        old = local.held.pop(next(iter(local.held)))
        local.nbytes -= old.nbytes
    local.held[full] = buf
    local.nbytes += buf.nbytes
    return buf, True
