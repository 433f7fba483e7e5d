"""Gradient checks: an autodiff device's VJP against central differences of the oracle.

The finite differences are taken on the numpy float64 oracle, not on the device, so they are
exact to ~1e-8 and cost no device time; the device only runs one forward and one backward.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _dtype as dt
from ._case import Case, all_cases, rng_for
from ._compare import assert_close

if TYPE_CHECKING:
    from .._device import Device

__all__ = ["check_grads", "check_grads_compiled", "grad_cases"]


def grad_cases() -> list[Case]:
    """Cases with differentiable inputs, in float64 (finite differences need the precision)."""
    return [c for c in all_cases()
            if c.grad and c.fn is not None and c.out is dt.float64
            and all(c.args[i].ember_dtype() is dt.float64 for i in c.grad)]


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, tuple) else value


def check_grads(case: Case, device: Device, *, eps: float = 1e-6, rtol: float = 1e-5,
                atol: float = 1e-7) -> None:
    """Compare ``grads[x]`` of ``sum(fn(*inputs) * cotangent)`` with central differences.

    ``device`` must be an autodiff device (its tensors have ``backward``).  Only the inputs at
    ``case.grad`` are perturbed; for ops with several outputs the first one is differentiated.
    """
    import ember

    hosts = [np.array(a.host(), order="C") for a in case.args]  # writable, own memory
    cot = _cotangent(case, hosts)
    tensors = _tensors(case, hosts, device)
    assert case.fn is not None
    out = _first(case.fn(*tensors))
    loss = (out * ember.tensor(cot, dtype=out.dtype, device=device)).sum()
    grads = loss.backward()
    for i in case.grad:
        assert_close(grads[tensors[i]], _numeric(case, hosts, cot, i, eps), dt.float64,
                     rtol=rtol, atol=atol, what=f"{case.id}: gradient of input {i}")


def check_grads_compiled(case: Case, fresh: Case, device: Device, *, eps: float = 1e-6,
                         rtol: float = 1e-5, atol: float = 1e-7) -> Any:
    """`check_grads` with the forward and backward inside one `ember.compile`d function:
    traced on ``case``'s inputs, replayed on ``fresh``'s (the same case, other values), each
    against central differences at its own inputs.  Returns the compiled function."""
    import ember

    assert case.fn is not None
    fn, grad = case.fn, case.grad

    def forward_backward(cot: Any, *tensors: Any) -> Any:
        out = _first(fn(*tensors))
        grads = (out * cot).sum().backward()
        return tuple(grads[tensors[i]] for i in grad)

    cf = ember.compile(forward_backward)
    for c, salt in ((case, ""), (fresh, "/fresh")):
        hosts = [np.array(a.host(), order="C") for a in c.args]
        cot = _cotangent(c, hosts, salt)
        got = cf(ember.tensor(cot, dtype=dt.float64, device=device), *_tensors(c, hosts, device))
        for g, i in zip(got, grad, strict=True):
            assert_close(g, _numeric(c, hosts, cot, i, eps), dt.float64, rtol=rtol, atol=atol,
                         what=f"{c.id}: gradient of input {i}")
    return cf


def _cotangent(case: Case, hosts: list[np.ndarray], salt: str = "") -> np.ndarray:
    with np.errstate(all="ignore"):
        ref = np.asarray(_first(case.oracle(*hosts)), dtype=np.float64)  # type: ignore[misc]
    return rng_for(case.id + "/cotangent" + salt).standard_normal(ref.shape)


def _tensors(case: Case, hosts: list[np.ndarray], device: Device) -> list[Any]:
    import ember

    return [ember.tensor(h, dtype=a.ember_dtype(), device=device, requires_grad=i in case.grad)
            for i, (a, h) in enumerate(zip(case.args, hosts, strict=True))]


def _numeric(case: Case, hosts: list[np.ndarray], cot: np.ndarray, i: int,
             eps: float) -> np.ndarray:
    """Central differences of ``sum(oracle(*hosts) * cot)`` with respect to input ``i``."""
    numeric = np.zeros(hosts[i].shape, dtype=np.float64)
    for j in range(numeric.size):
        plus = [h.copy() for h in hosts]
        minus = [h.copy() for h in hosts]
        plus[i].flat[j] += eps
        minus[i].flat[j] -= eps
        with np.errstate(all="ignore"):
            fp = np.sum(np.asarray(_first(case.oracle(*plus))) * cot)  # type: ignore[misc]
            fm = np.sum(np.asarray(_first(case.oracle(*minus))) * cot)  # type: ignore[misc]
        numeric.flat[j] = (fp - fm) / (2 * eps)
    return numeric
