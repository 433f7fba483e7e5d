"""Gradient checks by central finite differences in float64.

Examples
--------
>>> import numpy as np
>>> from ember_autodiff.testing import check_grads
>>> check_grads(lambda x: (x * x).sum(), [np.array([1.0, 2.0])])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import ember
import numpy as np
from ember.backend import Tensor

__all__ = ["check_grads", "numerical_grads"]


def _leaves(args: Sequence[Any], device: ember.Device) -> list[Any]:
    out: list[Any] = []
    for a in args:
        if isinstance(a, np.generic):
            a = np.asarray(a)
        if isinstance(a, np.ndarray):
            floating = a.dtype.kind == "f"
            t = ember.tensor(a.astype(np.float64) if floating else a, device=device)
            out.append(t.requires_grad_(True) if floating else t)
        elif isinstance(a, Tensor):
            t = ember.tensor(a.numpy(), device=device)
            out.append(t.requires_grad_(True) if t.is_floating_point() else t)
        else:
            out.append(a)
    return out


def _scalar(out: Any, weights: list[np.ndarray]) -> Any:
    """Project the output(s) on fixed random weights: one scalar whose gradient checks all."""
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    total = None
    for i, o in enumerate(outs):
        if not o.is_floating_point():
            continue
        w = ember.tensor(weights[i], device=o.device)
        term = (o * w).sum()
        total = term if total is None else total + term
    if total is None:
        raise ValueError("check_grads: the function returned no floating-point output")
    return total


def _weights(out: Any, seed: int) -> list[np.ndarray]:
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.5, 1.5, o.shape) * rng.choice([-1.0, 1.0], o.shape) for o in outs]


def numerical_grads(fn: Callable[..., Any], args: Sequence[Any], weights: list[np.ndarray],
                    device: ember.Device, eps: float) -> list[np.ndarray | None]:
    """Central differences of ``sum(fn(*args) * weights)`` for every floating array in args."""
    base = [np.array(a, dtype=np.float64) if isinstance(a, (np.ndarray, np.generic)) and
            np.asarray(a).dtype.kind == "f" else a for a in args]

    def value(vals: list[Any]) -> float:
        with ember.no_grad():
            return float(_scalar(fn(*_leaves(vals, device)), weights).item())

    grads: list[np.ndarray | None] = []
    for i, a in enumerate(base):
        if not (isinstance(a, np.ndarray) and a.dtype.kind == "f"):
            grads.append(None)
            continue
        g = np.zeros_like(a)
        flat = g.reshape(-1)
        for j in range(a.size):
            hi, lo = a.copy(), a.copy()
            hi.reshape(-1)[j] += eps
            lo.reshape(-1)[j] -= eps
            flat[j] = (value([*base[:i], hi, *base[i + 1:]]) -
                       value([*base[:i], lo, *base[i + 1:]])) / (2 * eps)
        grads.append(g)
    return grads


def check_grads(fn: Callable[..., Any], args: Sequence[Any], *, eps: float = 1e-6,
                atol: float = 1e-5, rtol: float = 1e-4, device: str = "autodiff<cpu>",
                seed: int = 0) -> None:
    """Check ``fn``'s gradients against central finite differences in float64.

    Parameters
    ----------
    fn : takes tensors (one per entry of ``args``) and returns a tensor or a tuple of them.
    args : numpy arrays (floating ones are differentiated, in float64; integer ones are passed
        as constant tensors, e.g. indices), ember tensors, or other values passed unchanged.
    eps, atol, rtol : step of the differences and the tolerances of the comparison.
    device : an autodiff device string.

    Raises
    ------
    AssertionError naming the argument and the largest mismatch.
    """
    dev = ember.device(device)
    leaves = _leaves(args, dev)
    out = fn(*leaves)
    weights = _weights(out, seed)
    grads = _scalar(out, weights).backward()
    expected = numerical_grads(fn, [a.numpy() if isinstance(a, Tensor) else a for a in args],
                               weights, dev, eps)
    for i, (leaf, want) in enumerate(zip(leaves, expected, strict=True)):
        if want is None:
            continue
        got = grads[leaf].numpy() if leaf in grads else np.zeros_like(want)
        if got.shape != want.shape or not np.allclose(got, want, atol=atol, rtol=rtol):
            err = np.abs(got - want).max() if got.shape == want.shape else "shape"
            raise AssertionError(
                f"gradient of argument {i} (shape {want.shape}) differs from finite "
                f"differences (max abs error {err}):\nautodiff:\n{got}\nnumerical:\n{want}")
