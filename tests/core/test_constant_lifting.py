"""A tensor of an inner device of a decorator stack combines with a tensor of the stack as a
constant (no gradient); tensors of different hardware never mix.  Gradients are checked
against PyTorch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import ember

# (stack, the inner devices a constant may come from)
STACKS = [
    ("autodiff<cpu>", ["cpu"]),
    ("autodiff<fusion<cpu>>", ["cpu", "fusion<cpu>"]),
    ("fusion<cpu>", ["cpu"]),
    ("autodiff<opencl:0>", ["opencl:0"]),
    ("autodiff<triton-interpret>", ["triton-interpret"]),
]
PAIRS = [(stack, inner) for stack, inners in STACKS for inner in inners]

X = np.array([[0.5, -1.25, 2.0], [1.5, 0.75, -0.5]])
C = np.array([[2.0, 0.5, -1.0], [3.0, -2.0, 0.25]])

# f(x, c) with x the stack's tensor (requires grad) and c the inner device's constant
CASES: dict[str, Callable[[Any, Any], Any]] = {
    "x * c": lambda x, c: x * c,
    "c * x": lambda x, c: c * x,
    "c - x": lambda x, c: c - x,
    "x / c": lambda x, c: x / c,
    "c ** 2 / x": lambda x, c: c ** 2 / x,
    "maximum(c, x)": lambda x, c: (ember if isinstance(x, ember.Tensor) else torch).maximum(c, x),
    "where(c > 0, x, c)": lambda x, c: (ember if isinstance(x, ember.Tensor) else
                                        torch).where(c > 0, x, c),
    "x @ c.T": lambda x, c: x @ c.T,
    "c.T @ x": lambda x, c: c.T @ x,
    "cat([c, x])": lambda x, c: (ember.cat if isinstance(x, ember.Tensor) else
                                 torch.cat)([c, x * x]),
}


def _device(name: str) -> Any:
    try:
        return ember.device(name)
    except (ember.DeviceUnavailableError, ValueError) as exc:
        pytest.skip(f"{name} is not available here: {exc}")


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize(("stack", "inner"), PAIRS)
def test_an_inner_device_tensor_is_a_constant_of_the_stack(stack: str, inner: str,
                                                          case: str) -> None:
    dev, idev = _device(stack), _device(inner)
    f = CASES[case]
    autodiff = stack.startswith("autodiff")
    x = ember.tensor(X, dtype=ember.float64, device=dev, requires_grad=autodiff)
    c = ember.tensor(C, dtype=ember.float64, device=idev)
    tx = torch.tensor(X, requires_grad=True)
    tc = torch.tensor(C)
    out, tout = f(x, c), f(tx, tc)
    assert out.device is dev
    cot = np.linspace(-1.0, 1.0, tout.numel()).reshape(tuple(tout.shape))
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-12)
    if not autodiff:
        return
    grads = (out * ember.tensor(cot, device=dev)).sum().backward()
    (tout * torch.tensor(cot)).sum().backward()
    assert tx.grad is not None
    np.testing.assert_allclose(grads[x].numpy(), tx.grad.numpy(), rtol=1e-12)
    with pytest.raises(KeyError, match=rf"no gradient: the tensor is on device {inner}"):
        grads[c]  # the constant has none


def test_a_constant_that_reaches_the_loss_only_through_itself_gives_the_stack_no_gradient(
        ) -> None:
    w = ember.ones(3, device="autodiff<cpu>", requires_grad=True)
    mask = ember.tensor([True, False, True])  # cpu
    loss = ember.where(mask, w * 3.0, ember.tensor([5.0, 5.0, 5.0])).sum()
    assert loss.item() == 11.0
    assert loss.backward()[w].tolist() == [3.0, 0.0, 3.0]


@pytest.mark.parametrize(("a", "b"), [("autodiff<cpu>", "opencl:0"),
                                      ("autodiff<cpu>", "fusion<cpu>"),
                                      ("fusion<cpu>", "autodiff<cpu>"),
                                      ("autodiff<fusion<cpu>>", "autodiff<cpu>"),
                                      ("cpu", "opencl:0")])
def test_tensors_of_other_devices_still_do_not_mix(a: str, b: str) -> None:
    x, y = ember.ones(3, device=_device(a)), ember.ones(3, device=_device(b))
    for f in (lambda: x * y, lambda: y + x, lambda: ember.cat([x, y]),
              lambda: ember.ones(3, 3, device=x.device) @ y.reshape(3, 1)):
        with pytest.raises(ember.DeviceMismatchError, match=r"tensors are on different devices"
                           ) as info:
            f()
        assert a in str(info.value) and b in str(info.value)
