"""What a graph capture needs from the core (``ember._capture``), checked without a GPU.

While a capture records, every in-place payload replacement is reported to it, optimizer state
tensors keep their identity, and host numbers that change every step are refused with a
message that names the fix.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ember
from ember import _capture


class _Notes:
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def note_replace(self, t: Any) -> None:
        self.seen.append(t)


def _model_and_grads(capturable: bool) -> tuple[Any, Any, Any]:
    model = ember.nn.Linear(4, 3, generator=ember.Generator(0)).to("autodiff<cpu>")
    opt = ember.optim.Adam(model.parameters(), lr=0.1, capturable=capturable)
    x = ember.tensor(np.arange(8, dtype=np.float32).reshape(2, 4), device="autodiff<cpu>")

    def grads() -> Any:
        return model(x).sum().backward()
    return model, opt, grads


def test_capturable_adam_reports_every_replacement_and_keeps_state_objects() -> None:
    model, opt, grads = _model_and_grads(capturable=True)
    opt.step(grads())  # the state exists before recording, as after a warm-up
    states = {id(p): dict(opt.state[id(p)]) for p in model.parameters()}
    notes = _Notes()
    with _capture.capturing(notes):
        opt.step(grads())
    seen = {id(t) for t in notes.seen}
    for p in model.parameters():
        assert id(p) in seen  # the parameter's new payload
        for key, old in states[id(p)].items():
            assert opt.state[id(p)][key] is old  # same object, new payload
            assert id(old) in seen
    step = opt.state[id(model.weight)]["step"]
    assert step.device == ember.device("cpu") and step.item() == 2.0


def test_host_step_count_is_refused_and_the_state_is_left_as_it_was() -> None:
    model, opt, grads = _model_and_grads(capturable=False)
    opt.step(grads())
    before = {id(p): dict(opt.state[id(p)]) for p in model.parameters()}
    g = grads()
    with _capture.capturing(_Notes()), pytest.raises(_capture.CaptureError,
                                                     match=r"'step'.*capturable=True"):
        opt.step(g)
    for p in model.parameters():
        assert opt.state[id(p)] == before[id(p)]


def test_setitem_is_reported_to_a_capture() -> None:
    t = ember.zeros(3)
    notes = _Notes()
    with _capture.capturing(notes):
        t[1] = 5.0
    assert notes.seen == [t] and t.tolist() == [0.0, 5.0, 0.0]
    assert not _capture.active()
