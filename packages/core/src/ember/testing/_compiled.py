"""The compiled mode of the suite (``--ember-compile``): every case through `ember.compile`.

Each op case's call is compiled and made twice: once on the case's inputs (the trace, which
runs eagerly and must already be right) and once on *fresh* inputs of the same shapes and
dtypes (the replay), compared with the oracle on those fresh inputs.  Fresh inputs are the
case rebuilt with another seed (`fresh_cases`: the case modules run again with
``ember.testing._case.SALT`` set), so they keep the case's domain (positive, distinct,
in-range indices) while every value changes: a replay that baked a traced value in fails.
Made cases compile their ``make(device)``; checks compile the check itself.

A case whose op cannot be recorded (its output shape depends on values, it reads a value on
the host) must raise `ember._trace.TraceBreak` at the trace and be listed in `UNTRACEABLE`
with the reason; it is then reported as a declared skip.  An undeclared break fails, and so
does a declared case that traces after all (the list must not rot).
"""

from __future__ import annotations

import fnmatch
import importlib
import pkgutil
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _case
from ._case import Case

if TYPE_CHECKING:
    from .._device import Device

__all__ = ["UNTRACEABLE", "fresh_cases", "run_compiled", "untraceable_reason"]

#: case-id patterns (fnmatch) that cannot be traced, and why: checked to break, then skipped
UNTRACEABLE: dict[str, str] = {
    # limits of tracing itself: the output shape or a Python value depends on tensor values
    "nonzero-*": "the output shape is the number of non-zero elements (a value)",
    "getitem-bool-mask-*": "a boolean mask selects a number of elements that depends on the "
                           "mask's values (indexing goes through nonzero)",
    "masked_select-*": "as getitem-bool-mask-*",
    "one_hot-inferred-*": "without num_classes, one_hot reads max(x) + 1 on the host to size "
                          "its output",
    "unique-*": "the output size is the number of distinct values",
    "bincount-*": "the output size is max(x) + 1, read on the host (after a check that no "
                  "value is negative)",
    "repeat_interleave-tensor-*": "the output size is the sum of the repeats, read on the host",
    "allclose-python-bool": "allclose returns a Python bool: a host read",
    "error-bincount-names-values-and-shapes": "the negative-value check reads min(x) on the "
                                              "host",
    # checks that assert on values inside the check itself: a host read in any trace
    "rand-*": "a statistics check that reads the numbers on the host (random ops under "
              "compile: tests/compile/test_guards.py)",
    "randn-*": "as rand-*",
    "randint-*": "as rand-*",
    "random-like": "as rand-*",
    "manual_seed-reproducible": "as rand-*",
    "generator-state-resumes": "as rand-*",
    "dropout-statistics-*": "as rand-*",
    "multinomial-chi-square": "as rand-* (multinomial also checks its weights on the host)",
    "randperm-permutation": "as rand-*",
    "bernoulli-means": "as rand-* (bernoulli also checks its probabilities on the host)",
    "setitem-rebinds-and-keeps-host-copies": "the check compares host copies taken before "
                                             "and after the assignment",
    "error-two-devices-names-both": "after the errors, the check reads a sum on the host",
    "error-index-*": "index values are checked on the host or at the next sync, and a trace "
                     "skips those checks (a recording cannot depend on values)",
    "error-mask-shape-names-both-shapes": "a boolean mask goes through nonzero",
    "error-embedding-one-hot-out-of-range": "as error-index-*",
    "error-loss-target-out-of-range": "as error-index-*",
    "error-integer-division-by-zero": "divisors are checked on the host or at the next sync, "
                                      "which a trace skips",
    "error-empty-reductions-with-identity": "the check reads the results on the host",
}

_FRESH: dict[str, Case] = {}


def fresh_cases() -> dict[str, Case]:
    """Every case rebuilt with other random inputs (same ids, shapes and dtypes)."""
    if _FRESH:
        return _FRESH
    from . import cases

    _case.all_cases()  # the registry holds the originals first
    saved = dict(_case._REGISTRY)
    _case._REGISTRY.clear()
    _case.SALT[0] = "/fresh"
    try:
        for info in pkgutil.iter_modules(cases.__path__):
            if not info.name.startswith("_"):
                importlib.reload(importlib.import_module(f"{cases.__name__}.{info.name}"))
        _FRESH.update(_case._REGISTRY)
    finally:
        _case.SALT[0] = ""
        _case._REGISTRY.clear()
        _case._REGISTRY.update(saved)
    return _FRESH


def untraceable_reason(case: Case) -> str | None:
    for pattern, reason in UNTRACEABLE.items():
        if fnmatch.fnmatchcase(case.id, pattern):
            return reason
    return None


def fresh_case(case: Case) -> Case:
    """``case`` with fresh inputs of the same shapes, dtypes and layouts."""
    fresh = fresh_cases().get(case.id)
    if fresh is None:
        raise AssertionError(f"{case.id}: rebuilding the cases with another seed lost it")
    for a, b in zip(case.args, fresh.args, strict=True):
        if (a.value.shape, a.value.dtype, a.view, a.expand, a.dtype) != (
                b.value.shape, b.value.dtype, b.view, b.expand, b.dtype):
            raise AssertionError(f"{case.id}: fresh inputs differ in shape, dtype or layout")
    return fresh


def same_inputs(case: Case, fresh: Case) -> bool:
    return all(np.array_equal(a.value, b.value, equal_nan=True)
               for a, b in zip(case.args, fresh.args, strict=True))


def run_compiled(case: Case, device: Device) -> Any:
    """Trace ``case`` on its inputs, replay it on fresh ones; both against the oracle.

    Returns the compiled function (its ``stats`` say what happened).  Raises TraceBreak when
    the trace breaks (the caller decides whether that was declared).
    """
    import ember

    if case.check is not None:
        cf = ember.compile(case.check)
        cf(device)
        cf(device)
        _replayed(case, cf)
        return cf
    if case.make is not None:
        cf = ember.compile(case.make)
        expected = case.expected()
        for _ in range(2):
            got = cf(device)
            case.check_device(got, device)
            case.compare(got, expected)
        _replayed(case, cf)
        return cf
    assert case.fn is not None
    cf = ember.compile(case.fn)
    got = cf(*case.inputs(device))
    case.compare(got, case.expected())
    fresh = fresh_case(case)
    got = cf(*fresh.inputs(device))
    _replayed(case, cf)
    fresh.compare(got, fresh.expected())
    return cf


def _replayed(case: Case, cf: Any) -> None:
    s = cf.stats
    if (s.traces, s.replays) != (1, 1):
        raise AssertionError(f"{case.id}: the second call should replay the trace; got "
                             f"{s.traces} trace(s) ({'; '.join(s.reasons)}) and "
                             f"{s.replays} replay(s)")
