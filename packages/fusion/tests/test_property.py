"""Random op programs give the same values fused as unfused (cpu is the oracle)."""

from __future__ import annotations

from typing import Any

import ember
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
    return getattr(a, kind)()  # type: ignore[no-any-return]


def _binary(kind: str, a: ember.Tensor, b: ember.Tensor) -> ember.Tensor:
    if kind == "div":
        return a / (b.abs() + 0.5)
    if kind == "where":
        return ember.where(a > b, a, b * 2.0)
    if kind == "gt":
        return (a > b).to(a.dtype)
    return getattr(ember, kind)(a, b)  # type: ignore[no-any-return]


def _reduce(kind: str, a: ember.Tensor, dim: int) -> ember.Tensor:
    if a.ndim == 0:
        return a
    dims: Any = None if dim >= a.ndim else dim
    if kind == "var":
        return a.var(dim=dims, keepdim=True, correction=0)
    return getattr(a, kind)(dim=dims, keepdim=True)  # type: ignore[no-any-return]


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


@settings(max_examples=220, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=st.lists(step, min_size=1, max_size=14),
       shapes=st.lists(st.sampled_from(SHAPES), min_size=1, max_size=3),
       keep=st.lists(st.integers(0, 99), max_size=3),
       dtype=st.sampled_from(["float32", "float64"]),
       device=st.sampled_from(["fusion<cpu>", "fusion<cpu,chunk=7,threads=2>",
                               "fusion<cpu,chunk=16,threads=1>"]),
       seed=st.integers(0, 2**16))
def test_random_programs_agree_fused_and_unfused(program: list[Step], shapes: list[Any],
                                                 keep: list[int], dtype: str, device: str,
                                                 seed: int) -> None:
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(rng.standard_normal(s), dtype=dtype) for s in shapes]
    want = run(program, arrays, keep, "cpu")
    got = run(program, arrays, keep, device)
    tol = 1e-4 if dtype == "float32" else 1e-10
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
