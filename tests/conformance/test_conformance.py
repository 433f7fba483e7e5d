"""The conformance suite on the devices given: ``pytest tests/conformance --ember-device=cpu``.

The cases live in ``ember.testing`` (so third parties run the very same ones with
``pytest --pyargs ember.testing.suite --ember-device=foo``); the ``ember`` pytest plugin
parametrizes these two tests over every (device, case) pair.
"""

from __future__ import annotations

from ember.testing.suite.test_conformance import (
    test_case_matches_numpy_oracle as test_case_matches_numpy_oracle,
    test_gradient_matches_finite_differences as test_gradient_matches_finite_differences,
)

__all__ = ["test_case_matches_numpy_oracle", "test_gradient_matches_finite_differences"]
