"""Random op programs for property tests of fusion compilers (needs ``hypothesis``).

A program is a list of steps (unary, binary and keepdim-reduction ops on a pool of tensors);
`run` executes it on a device and returns the values it keeps.  The CPU compiler's tests and
the Triton and OpenCL compilers' tests all draw programs from `step`.  `chain` is the 7-op
elementwise chain whose kernel count every compiler's tests assert, `chain_oracle` its value.

Examples
--------
>>> import numpy as np
>>> from ember_fusion.testing import run
>>> run([("u", "neg", 0, 0, 0)], [np.ones(2)], [], "fusion<cpu>")[0].tolist()
[-1.0, -1.0]
"""

from __future__ import annotations

from typing import Any

import ember
import numpy as np
from hypothesis import strategies as st

__all__ = ["BINARY", "REDUCE", "SHAPES", "UNARY", "Step", "chain", "chain_oracle", "run", "step"]

# every pair of these broadcasts to (13, 6), and so do keepdim reductions of them
SHAPES = [(13, 6), (13, 1), (1, 6), (6,), ()]
UNARY = ["neg", "abs", "exp", "tanh", "sigmoid", "relu", "sqrt", "square", "view", "cast"]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "where", "gt"]
REDUCE = ["sum", "mean", "amax", "amin", "var"]


def _unary(kind: str, a: ember.Tensor) -> ember.Tensor:
    if kind == "exp":
        return a.clamp(-20, 20).exp()
    if kind == "sqrt":
        return a.abs().sqrt()
    if kind == "square":
        return a * a
    if kind == "relu":
        return a.relu()
    if kind == "view":  # two lazy reshapes: a view step between fused groups
        return a.unsqueeze(0).squeeze(0)
    if kind == "cast":
        other = ember.float32 if a.dtype is ember.float64 else ember.float64
        return a.to(other).to(a.dtype)
    return getattr(a, kind)()  # type: ignore[no-any-return]  # getattr is untyped


def _binary(kind: str, a: ember.Tensor, b: ember.Tensor) -> ember.Tensor:
    if kind == "div":
        return a / (b.abs() + 0.5)
    if kind == "where":
        return ember.where(a > b, a, b * 2.0)
    if kind == "gt":
        return (a > b).to(a.dtype)
    return getattr(ember, kind)(a, b)  # type: ignore[no-any-return]  # getattr is untyped


def _reduce(kind: str, a: ember.Tensor, dim: int) -> ember.Tensor:
    if a.ndim == 0:
        return a
    dims: Any = None if dim >= a.ndim else dim
    if kind == "var":
        return a.var(dim=dims, keepdim=True, correction=0)
    return getattr(a, kind)(dim=dims, keepdim=True)  # type: ignore[no-any-return]  # getattr is untyped


Step = tuple[str, str, int, int, int]
step = st.one_of(
    st.tuples(st.just("u"), st.sampled_from(UNARY), st.integers(0, 99), st.just(0), st.just(0)),
    st.tuples(st.just("b"), st.sampled_from(BINARY), st.integers(0, 99), st.integers(0, 99),
              st.just(0)),
    st.tuples(st.just("r"), st.sampled_from(REDUCE), st.integers(0, 99), st.just(0),
              st.integers(0, 2)),
)


def run(program: list[Step], arrays: list[np.ndarray], keep: list[int],
        device: str) -> list[np.ndarray]:
    pool = [ember.tensor(a, device=device) for a in arrays]
    for group, kind, i, j, dim in program:
        a, b = pool[i % len(pool)], pool[j % len(pool)]
        if group == "u":
            pool.append(_unary(kind, a))
        elif group == "b":
            pool.append(_binary(kind, a, b))
        else:
            pool.append(_reduce(kind, a, dim))
    held = [pool[-1]] + [pool[k % len(pool)] for k in keep]
    del pool  # only `held` survives: everything else may stay unmaterialised
    return [t.numpy() for t in held]


def chain(x: ember.Tensor) -> ember.Tensor:
    """The 7-op chain ``v = relu(x*1.5+0.25)*0.5-1; v*sigmoid(v)`` (one kernel when fused)."""
    v = (x * 1.5 + 0.25).relu() * 0.5 - 1
    return v * v.sigmoid()


def chain_oracle(a: np.ndarray) -> np.ndarray:
    """`chain` in numpy float64."""
    a = a.astype(np.float64)
    v = np.maximum(a * 1.5 + 0.25, 0) * 0.5 - 1
    return v / (1 + np.exp(-v))  # type: ignore[no-any-return]  # numpy ufuncs are untyped here
