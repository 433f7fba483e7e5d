"""numpy returns its interned ``np.False_`` / ``np.True_`` for every 0-d comparison, so two
different 0-d bool tensors of one trace would share one payload object; the tracer maps
payloads to slots by ``id``, and a replay read one value for the other (a silent wrong answer)
until `Backend.dispatch` made such results 0-d arrays while tracing.  ``pow(2.0, x)``'s
gradient for a 0-d ``x`` goes through such a mask (conformance case exp2-scalar-float64 under
``--ember-compile`` on autodiff<cpu> fails the same way)."""

from __future__ import annotations

import ember


def test_two_zero_d_comparisons_stay_apart_in_replays() -> None:
    def f(x: ember.Tensor) -> ember.Tensor:
        const_false = ember.full((), 2.0, dtype=ember.float64) == 0
        return ember.logical_and(const_false, x >= 0)

    compiled = ember.compile(f)
    for v in (-4.5, 1.0, 2.0):  # the trace, then two replays
        x = ember.full((), v, dtype=ember.float64)
        assert compiled(x).item() is False, v
