"""Capture and restore every random stream a training run draws from.

Exact resume needs the state of each stream: ember `Generator`s (the default one, those the model
holds for dropout, those data loaders shuffle with), numpy's legacy global state and `Generator`s,
and Python's `random`.  States are plain JSON (ints and lists), so they live in the learner's
JSON state next to the epoch counter.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any, cast

import numpy as np

__all__ = ["RandomStreams", "find_generators"]


def _is_ember_generator(x: Any) -> bool:
    import ember

    return isinstance(x, ember.Generator)


def _is_stream(x: Any) -> bool:
    return _is_ember_generator(x) or isinstance(x, np.random.Generator | np.random.RandomState
                                                | random.Random)


def find_generators(obj: Any, *, depth: int = 3) -> list[Any]:
    """Random streams held by ``obj`` or its attributes (a model's modules, a loader's sampler).

    Walks ``vars()`` of objects, lists, tuples and dict values up to ``depth`` levels, plus
    ``obj.modules()`` when ``obj`` is a module; each stream is returned once, in a stable order.
    """
    found: dict[int, Any] = {}
    seen: set[int] = set()

    def walk(x: Any, d: int) -> None:
        if id(x) in seen or d < 0 or isinstance(x, str | bytes | int | float | np.ndarray):
            return
        seen.add(id(x))
        if _is_stream(x):
            found.setdefault(id(x), x)
            return
        if isinstance(x, dict):
            children: Iterable[Any] = list(x.values())
        elif isinstance(x, list | tuple):
            children = x
        elif hasattr(x, "__dict__") and not isinstance(x, type):
            children = list(vars(x).values())
        else:
            return
        for c in children:
            walk(c, d - 1)

    modules = getattr(obj, "modules", None)
    roots = list(modules()) if callable(modules) else [obj]
    for root in roots:
        walk(root, depth)
    return list(found.values())


def _state_of(stream: Any) -> dict[str, Any]:
    if _is_ember_generator(stream):
        return {"kind": "ember", **stream.get_state()}
    if isinstance(stream, np.random.Generator):
        return {"kind": "numpy", "state": stream.bit_generator.state}
    if isinstance(stream, np.random.RandomState):
        # the legacy tuple: numpy's global RandomState and any on MT19937 give it
        name, keys, pos, has_gauss, gauss = cast("tuple[str, np.ndarray, int, int, float]",
                                                 stream.get_state())
        return {"kind": "numpy-legacy", "state": [name, keys.tolist(), pos, has_gauss, gauss]}
    if isinstance(stream, random.Random):
        version, internal, gauss = stream.getstate()
        return {"kind": "python", "state": [version, list(internal), gauss]}
    raise TypeError(f"not a random stream: {type(stream).__name__}")


def _set_state(stream: Any, state: dict[str, Any]) -> None:
    kind = state["kind"]
    if kind == "ember":
        stream.set_state(state)
    elif kind == "numpy":
        stream.bit_generator.state = state["state"]
    elif kind == "numpy-legacy":
        name, keys, pos, has_gauss, gauss = state["state"]
        stream.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    elif kind == "python":
        version, internal, gauss = state["state"]
        stream.setstate((version, tuple(internal), gauss))
    else:
        raise ValueError(f"unknown random stream kind {kind!r}")


class RandomStreams:
    """A named set of random streams whose states are saved and restored together.

    The process-wide streams (``ember.default_generator``, ``numpy.random``'s global state,
    Python's ``random``) are always included.

    Examples
    --------
    >>> import ember
    >>> g = ember.Generator(7)
    >>> streams = RandomStreams({"dropout": g})
    >>> saved = streams.state()
    >>> a = ember.rand(2, generator=g).tolist()
    >>> streams.restore(saved)
    >>> ember.rand(2, generator=g).tolist() == a
    True
    """

    def __init__(self, streams: dict[str, Any] | None = None) -> None:
        import ember

        self.streams: dict[str, Any] = {
            "ember.default": ember.default_generator,
            "numpy.global": np.random.mtrand._rand,
            "python.random": random._inst,  # the module's Random
        }
        for name, s in (streams or {}).items():
            self.add(name, s)

    def add(self, name: str, stream: Any) -> None:
        if not _is_stream(stream):
            raise TypeError(f"{name}: not a random stream ({type(stream).__name__})")
        if any(s is stream for s in self.streams.values()):
            return
        self.streams[name] = stream

    def state(self, names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        keys = self.streams if names is None else names
        return {k: _state_of(self.streams[k]) for k in keys}

    def restore(self, state: dict[str, dict[str, Any]], *, strict: bool = True) -> None:
        missing = set(self.streams) - set(state)
        if strict and missing:
            raise KeyError(f"checkpoint lacks the state of random streams {sorted(missing)}")
        unknown = set(state) - set(self.streams)
        if strict and unknown:
            raise KeyError(f"checkpoint has random streams this run lacks: {sorted(unknown)}")
        for k, v in state.items():
            if k in self.streams:
                _set_state(self.streams[k], v)
