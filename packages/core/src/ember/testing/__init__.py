"""ember's conformance suite: an op registry with a numpy float64 oracle, as a pytest plugin.

Run it against a device with one command::

    python -m ember.testing --device cpu
    pytest --pyargs ember.testing.suite --ember-device=cpu

Backends declare the cases they cannot pass with the ``ember_conformance_skips`` hook.
"""

from __future__ import annotations

from ._case import (
           Arg as Arg,
           Case as Case,
           all_cases as all_cases,
           register as register,
           rng_for as rng_for,
           sample as sample,
)
from ._compare import TOLERANCES as TOLERANCES, assert_close as assert_close
from ._fixtures import (
    check as check,
    check_unavailable as check_unavailable,
    device_or_skip as device_or_skip,
)
from ._grad import check_grads as check_grads
from ._reference import adam_step as adam_step

__all__ = ["TOLERANCES", "Arg", "Case", "adam_step", "all_cases", "assert_close", "check",
           "check_grads", "check_unavailable", "device_or_skip", "register", "rng_for", "sample"]
