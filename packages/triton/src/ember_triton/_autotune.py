"""Kernel selection: time each candidate once per shape bucket, keep the fastest, on disk.

Burn calls this "automatic kernel selection".  A `KernelSelector` belongs to one backend; for
a key (an op, dtypes and a shape bucket) it runs every candidate on the real operands, timed
by the memory layer's device timer (CUDA events through CuPy: no torch), and remembers the
winner in memory and in a JSON file per GPU model, so the next process starts tuned.

The file lives in ``$EMBER_CACHE_DIR/autotune/`` (default ``~/.cache/ember``), one per device
model and Triton version, and is replaced atomically (written to a temporary file, then
renamed), so a crash never leaves half a cache.  A cache file that does not parse is ignored
with a warning and rewritten.  ``EMBER_AUTOTUNE=0`` turns timing off: the first candidate
(the heuristic default) is used.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import threading
import warnings
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

__all__ = ["KernelSelector", "bucket", "cache_dir"]

#: bump when candidate names change meaning, so old choices are not reused
_FORMAT = 2
#: timing rounds over all candidates (interleaved, each round starting one candidate later;
#: each candidate keeps its best)
ROUNDS = 3
#: how much faster than the best favoured candidate another must time to be chosen instead
#: (`KernelSelector.choose`)
MARGIN = 0.05
#: a candidate whose first timing is at least ``HEAT_MIN_MS`` per call is first run for about
#: ``HEAT_MS`` untimed, so that every candidate is timed on a GPU at its sustained clock
HEAT_MIN_MS = 0.1
HEAT_MS = 1000.0


def bucket(n: int) -> int:
    """The shape bucket of an extent: the next power of two (``0`` stays ``0``)."""
    return 0 if n <= 0 else 1 << max(0, math.ceil(math.log2(n)))


def cache_dir() -> Path:
    root = os.environ.get("EMBER_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "ember")
    return Path(root) / "autotune"


class KernelSelector:
    """Chooses among candidates by timing them once per key.

    Parameters
    ----------
    device_id : names the device model in the cache file (``"NVIDIA H200 sm90"``); ``None``
        keeps choices in memory only.
    timer : ``timer(fn) -> milliseconds`` for one call of ``fn`` on the device (it warms up
        and repeats as it sees fit); ``None`` disables timing.

    Examples
    --------
    >>> costs = {"a": 2.0, "b": 1.0}
    >>> sel = KernelSelector(None, timer=lambda fn: costs[fn()])
    >>> sel.choose(("matmul", 64), {"a": lambda: "a", "b": lambda: "b"})
    'b'
    """

    def __init__(self, device_id: str | None, timer: Callable[[Callable[[], Any]], float] | None,
                 ) -> None:
        self.device_id = device_id
        self.timer = timer
        self.enabled = timer is not None and os.environ.get("EMBER_AUTOTUNE", "1") != "0"
        self._choices: dict[str, str] = {}
        self._known: dict[Any, str] = {}  # `_choices` by the keys themselves
        self._timings: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()
        self._path: Path | None = None
        if device_id is not None and self.enabled:
            # Note: importlib.metadata, not `import triton`: importing triton here would fix
            # its interpreter knob before the triton-interpret device can set it
            from importlib.metadata import version

            slug = "".join(c if c.isalnum() else "-" for c in device_id).strip("-")
            self._path = cache_dir() / f"{slug}-triton{version('triton')}-v{_FORMAT}.json"
            self._choices.update(self._read())

    @property
    def path(self) -> Path | None:
        """The cache file of this device, or ``None``."""
        return self._path

    def timings(self, key: Any) -> dict[str, float]:
        """Milliseconds per candidate measured for ``key`` in this process (empty if cached)."""
        return dict(self._timings.get(repr(key), {}))

    def known(self, key: Any) -> str | None:
        """The candidate chosen for ``key`` before (in this process or the disk cache), if
        any: a dictionary look-up by the key itself, for the per-call path."""
        name = self._known.get(key)
        if name is None:
            name = self._choices.get(repr(key))
            if name is not None:
                self._known[key] = name
        return name

    def choose(self, key: Any, candidates: Mapping[str, Callable[[], Any]],
               favoured: Collection[str] = ()) -> str:
        """The name of the fastest candidate for ``key``; times them all on first sight.

        Every candidate must compute the same result (they are run on the real operands, so
        whichever ran last has left a correct result behind).  A candidate outside
        ``favoured`` wins over the favoured ones only by more than ``MARGIN``: matmul favours
        a vendor library's candidates (``backend.vendor_gemm``: cuBLAS on CUDA), whose
        kernels hold their speed under sustained load better than a short timing shows for
        Triton's (the GPU's power limit; ``docs/triton.md``).  Big
        candidates are timed on a GPU heated by the first of them (`_heat`).
        """
        name = self.known(key)
        if name is not None and name in candidates:
            return name
        first = next(iter(candidates))
        if not self.enabled or len(candidates) == 1:
            return first
        assert self.timer is not None
        times: dict[str, float] = {}
        failed: set[str] = set()
        # rounds interleave the candidates, so that a clock that drifts while they are timed
        # (a GPU warming up under a long matmul) favours none of them; each keeps its best
        order = list(candidates.items())
        last: str | None = None
        self._heat(order[0][1])
        for r in range(ROUNDS):
            for cand, fn in order[r % len(order):] + order[:r % len(order)]:
                if cand in failed:
                    continue
                try:
                    t = self.timer(fn)
                except Exception as exc:  # a config the compiler refuses (out of shared memory)
                    failed.add(cand)
                    warnings.warn(f"kernel candidate {cand!r} for {key!r} failed and is "
                                  f"skipped: {type(exc).__name__}: {exc}", RuntimeWarning,
                                  stacklevel=2)
                else:
                    times[cand] = min(times.get(cand, t), t)
                    last = cand
        if not times:
            raise RuntimeError(f"every kernel candidate for {key!r} failed")
        best = min(times, key=lambda c: times[c] * (1.0 if c in favoured else 1.0 + MARGIN))
        if best != last:
            candidates[best]()  # leave the winner's result (identical, but computed by it)
        with self._lock:
            self._choices[repr(key)] = best
            self._timings[repr(key)] = times
            self._write()
        return best

    def _heat(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` for about ``HEAT_MS`` when one call takes ``HEAT_MIN_MS`` or more.  A GPU
        timed cool runs big matmuls 10-15% faster than under sustained load (where training
        runs), and not all kernels lose alike: a choice made cool was the wrong one hot
        (``docs/triton.md``, "Heat first")."""
        assert self.timer is not None
        try:
            per_call = self.timer(fn)
        except Exception:  # the rounds report a failing candidate
            return
        if per_call >= HEAT_MIN_MS:
            for _ in range(min(100_000, int(HEAT_MS / per_call))):
                fn()

    # -- the cache file ---------------------------------------------------------------------

    def _read(self) -> dict[str, str]:
        path = self._path
        if path is None or not path.exists():
            return {}
        try:
            data = json.loads(path.read_text())
            if not isinstance(data, dict) or not isinstance(data.get("choices"), dict):
                raise ValueError("no 'choices' table")
            return {str(k): str(v) for k, v in data["choices"].items()}
        except (OSError, ValueError) as exc:
            warnings.warn(f"ignoring the kernel-selection cache {path}: {exc}; it will be "
                          "rewritten", RuntimeWarning, stacklevel=3)
            return {}

    def _write(self) -> None:
        path = self._path
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            merged = {**self._read_quietly(), **self._choices}
            body = json.dumps({"device": self.device_id, "choices": merged}, indent=1,
                              sort_keys=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                f.write(body)
            os.replace(tmp, path)
        except OSError as exc:  # a read-only home must not break computing
            warnings.warn(f"could not write the kernel-selection cache {path}: {exc}",
                          RuntimeWarning, stacklevel=3)

    def _read_quietly(self) -> dict[str, str]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self._read()
