"""``x[...] = v`` on autodiff tensors, as PyTorch: refused on a leaf that requires grad while
grad mode is on; allowed under ``no_grad`` (the tensor stays a trainable leaf); on a non-leaf
the gradient flows around the overwritten elements."""

from __future__ import annotations

import ember
import numpy as np
import pytest

DEV = "autodiff<cpu>"


def test_leaf_that_requires_grad_is_refused_with_grad_mode_on() -> None:
    w = ember.ones(3, device=DEV, requires_grad=True)
    y = (w * 2).sum()
    with pytest.raises(RuntimeError, match=r"leaf tensor that requires grad \(shape \(3,\).*"
                                           r"no_grad"):
        w[0] = 5.0
    np.testing.assert_array_equal(w.numpy(), [1, 1, 1])  # nothing changed
    np.testing.assert_array_equal(y.backward()[w].numpy(), [2, 2, 2])


def test_no_grad_update_keeps_a_trainable_leaf() -> None:
    w = ember.ones(3, device=DEV, requires_grad=True)
    with ember.no_grad():
        w[0] = 5.0
    assert w.requires_grad and w.is_leaf
    np.testing.assert_array_equal(((w * w).sum()).backward()[w].numpy(), [10, 2, 2])


def test_non_leaf_assignment_blocks_the_gradient_of_overwritten_elements() -> None:
    w = ember.tensor([1.0, 2.0, 3.0], device=DEV, requires_grad=True)
    x = w * 3.0
    x[1] = 0.0
    g = (x * x).sum().backward()[w].numpy()
    np.testing.assert_allclose(g, [18.0, 0.0, 54.0])  # d/dw (3w)^2 = 18w, none through x[1]
