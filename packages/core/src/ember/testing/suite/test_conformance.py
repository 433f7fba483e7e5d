"""Every registered case on every ``--ember-device`` (parametrized by ``ember.testing.plugin``)."""

from __future__ import annotations

import ember
from ember.testing import Case, check_grads


def test_case_matches_numpy_oracle(ember_device: str, ember_case: Case) -> None:
    ember_case.run(ember.device(ember_device))


def test_gradient_matches_finite_differences(ember_device: str, ember_grad_case: Case) -> None:
    check_grads(ember_grad_case, ember.device(ember_device))
