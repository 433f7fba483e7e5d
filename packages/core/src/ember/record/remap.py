"""Key remapping: regex rules that rename the keys of a checkpoint saved by another framework.

Rules are ``(pattern, replacement)`` pairs applied in order with `re.sub`; a replacement of
``None`` drops the keys the pattern matches.

Examples
--------
>>> from ember.record import remap_keys
>>> remap_keys({"module.fc.gamma": 1, "module.num_batches": 2},
...            [(r"^module\\.", ""), (r"\\.gamma$", ".weight"), (r"num_batches", None)])
{'fc.weight': 1}
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TypeVar

from .._errors import RecordError

__all__ = ["HF_LAYER_NORM", "Rule", "remap_keys", "strip_prefix"]

V = TypeVar("V")
Rule = tuple[str, str | None]

#: Old Hugging Face / TensorFlow-ported checkpoints name LayerNorm parameters gamma and beta.
HF_LAYER_NORM: list[Rule] = [(r"\.gamma$", ".weight"), (r"\.beta$", ".bias")]


def strip_prefix(prefix: str) -> list[Rule]:
    """A rule removing ``prefix`` (``"module."`` of DataParallel checkpoints, ``"model."``)."""
    return [("^" + re.escape(prefix), "")]


def remap_keys(state: Mapping[str, V], rules: Sequence[Rule]) -> dict[str, V]:
    """``state`` with its keys renamed by ``rules``; two keys landing on one name is an error."""
    compiled = [(re.compile(pat), rep) for pat, rep in rules]
    out: dict[str, V] = {}
    origin: dict[str, str] = {}
    for key, value in state.items():
        new: str | None = key
        for pat, rep in compiled:
            if new is None:
                break
            if rep is None:
                if pat.search(new):
                    new = None
            else:
                new = pat.sub(rep, new)
        if new is None:
            continue
        if new in out:
            raise RecordError(f"key remapping sends both {origin[new]!r} and {key!r} to {new!r}")
        out[new] = value
        origin[new] = key
    return out
