"""Explicit, seedable random generators.

A `Generator` is a seed plus a counter.  Every random op takes the next ``(seed, offset)`` pair,
and backends derive their numbers from that pair alone (counter-based, as Philox is), so the same
seed gives the same numbers on the same backend, in any thread, and a saved state resumes
exactly.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from ._trace import TRACE, HostInt

__all__ = ["Generator", "default_generator", "manual_seed", "seed"]


class Generator:
    """A counter-based random stream.

    Examples
    --------
    >>> import ember
    >>> g = ember.Generator(0)
    >>> a = ember.rand(3, generator=g)
    >>> b = ember.rand(3, generator=ember.Generator(0))
    >>> a.tolist() == b.tolist()
    True
    """

    __slots__ = ("_lock", "_offset", "_seed")

    def __init__(self, seed: int | None = None) -> None:
        self._lock = threading.Lock()
        self._seed = _fresh_seed() if seed is None else int(seed)
        self._offset = 0

    def manual_seed(self, seed: int) -> Generator:
        """Restart the stream from ``seed``."""
        with self._lock:
            self._seed, self._offset = int(seed), 0
        return self

    def initial_seed(self) -> int:
        return self._seed

    @property
    def offset(self) -> int:
        """How many random ops have drawn from this generator."""
        return self._offset

    def next_key(self) -> tuple[int, int]:
        """The ``(seed, offset)`` pair for one random op; advances the counter."""
        with self._lock:
            key = (self._seed, self._offset)
            self._offset += 1
        if TRACE:  # ember.compile is recording: a replay draws the next numbers, not these
            return HostInt(key[0], self.initial_seed), HostInt(key[1], self._take, advances=True)
        return key

    def _take(self) -> int:
        with self._lock:
            offset = self._offset
            self._offset += 1
        return offset

    def get_state(self) -> dict[str, int]:
        return {"seed": self._seed, "offset": self._offset}

    def set_state(self, state: dict[str, Any]) -> None:
        with self._lock:
            self._seed, self._offset = int(state["seed"]), int(state["offset"])

    def __repr__(self) -> str:
        return f"Generator(seed={self._seed}, offset={self._offset})"


def _fresh_seed() -> int:
    return int.from_bytes(os.urandom(8), "little") >> 1


default_generator = Generator()


def manual_seed(seed: int) -> Generator:
    """Seed the default generator (what random functions use without ``generator=``)."""
    return default_generator.manual_seed(seed)


def seed() -> int:
    """Reseed the default generator non-deterministically and return the seed."""
    s = _fresh_seed()
    default_generator.manual_seed(s)
    return s
