"""Every registered case on every ``--ember-device`` (parametrized by ``ember.testing.plugin``);
with ``--ember-compile``, each through ``ember.compile`` (trace, then replay on fresh inputs)."""

from __future__ import annotations

import pytest

import ember
from ember._trace import TraceBreak
from ember.testing import Case, check_grads
from ember.testing._compiled import fresh_case, run_compiled, untraceable_reason
from ember.testing._grad import check_grads_compiled


def test_case_matches_numpy_oracle(ember_device: str, ember_case: Case,
                                   ember_compile: bool) -> None:
    device = ember.device(ember_device)
    if not ember_compile:
        ember_case.run(device)
        return
    _compiled(ember_case, lambda: run_compiled(ember_case, device))


def test_gradient_matches_finite_differences(ember_device: str, ember_grad_case: Case,
                                             ember_compile: bool) -> None:
    device = ember.device(ember_device)
    if not ember_compile:
        check_grads(ember_grad_case, device)
        return
    _compiled(ember_grad_case,
              lambda: check_grads_compiled(ember_grad_case, fresh_case(ember_grad_case), device))


def _compiled(case: Case, run: object) -> None:
    """Run ``run()``; a trace break passes as a declared skip only where it was declared."""
    reason = untraceable_reason(case)
    try:
        run()  # type: ignore[operator]  # a zero-argument callable
    except TraceBreak as e:
        if reason is None:
            raise AssertionError(f"{case.id}: the trace broke, and the case is not declared "
                                 f"untraceable (ember.testing._compiled.UNTRACEABLE): {e}") from e
        pytest.skip(f"declared untraceable: {reason}")
    if reason is not None:
        raise AssertionError(f"{case.id} is declared untraceable ({reason}) but traced and "
                             "replayed: remove it from ember.testing._compiled.UNTRACEABLE")
