"""The inspection API: counters of a fusion device, and ``EMBER_FUSION_LOG``."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import ember

from ._stream import LOG, FusionStats

if TYPE_CHECKING:
    from ._backend import FusionBackend

__all__ = ["reset_stats", "stats"]

if os.environ.get("EMBER_FUSION_LOG", "").strip() not in ("", "0"):
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("ember_fusion: %(message)s"))
    LOG.addHandler(_handler)
    LOG.setLevel(logging.DEBUG)


def _backend(device: str | ember.Device) -> FusionBackend:
    from ._backend import FusionBackend

    dev = ember.device(device)
    backend = dev.backend
    while not isinstance(backend, FusionBackend):
        if dev.inner is None:
            raise ValueError(f"device {ember.device(device)} has no fusion decorator")
        dev = dev.inner
        backend = dev.backend
    return backend


def stats(device: str | ember.Device) -> FusionStats:
    """A snapshot of the counters of the fusion decorator in ``device``'s stack.

    Examples
    --------
    >>> import ember, ember_fusion
    >>> ember_fusion.reset_stats("fusion<cpu>")
    >>> x = ember.ones(8, device="fusion<cpu>")
    >>> _ = ((x * 1.5 + 0.25).relu() * 0.5 - 1).numpy()
    >>> ember_fusion.stats("fusion<cpu>").kernels_launched
    1
    """
    return _backend(device).stats.snapshot()


def reset_stats(device: str | ember.Device) -> None:
    """Zero the counters (caches are kept)."""
    b = _backend(device)
    b.stats = FusionStats()
