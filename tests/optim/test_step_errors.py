"""A PyTorch habit meets an error that shows ember's form: ``opt.step()`` with no gradients
and ``p.grad`` name ``opt.step(loss.backward())``; nothing changes."""

from __future__ import annotations

import pytest

import ember
from ember import optim


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "Adamax", "NAdam", "RMSprop"])
def test_step_without_gradients_shows_the_ember_form_and_changes_nothing(name: str) -> None:
    w = ember.tensor([1.0, 2.0], device="autodiff<cpu>", requires_grad=True)
    opt = getattr(optim, name)([w], lr=0.1)
    with pytest.raises(TypeError, match=rf"^{name}.step\(\) needs the gradients: .*"
                                        r"`opt.step\(loss.backward\(\)\)`"):
        opt.step()
    assert w.tolist() == [1.0, 2.0] and not opt.state


def test_grad_attribute_shows_the_ember_form() -> None:
    w = ember.tensor([1.0], device="autodiff<cpu>", requires_grad=True)
    with pytest.raises(AttributeError, match=r"no \.grad: .*`grads = loss.backward\(\)`.*"
                                             r"`opt.step\(grads\)`"):
        w.grad  # noqa: B018  # the attribute access is what raises
