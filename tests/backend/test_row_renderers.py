"""The row renderers (cpu: numba, `ember_cpu._rows`; Triton: `ember_triton._rows_source`) give
what the numpy reference of each row program gives (`ember.backend.rows.evaluate`, itself
checked against float64 formulas in tests/core/test_ir_rows.py): every built-in row kernel,
and every reduction kind on rows holding nan, infinities and ties, in float32 and float64,
on rows that fit one Triton block and rows that are walked in chunks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

import ember
from ember.backend import rows


def _every_reduction(b: rows.RowBuilder, dt: Sequence[str],
                     params: Mapping[str, Any]) -> list[Any]:
    x, w = b.elem(0, dt[0]), b.col(1, dt[1])
    y = x * w
    return [rows.sum_(y), rows.amax(y), rows.amin(x), rows.argmax(y), rows.argmin(x),
            rows.var(x), x - rows.amax(x) + rows.mean(y)]


rows.define("test_every_reduction", _every_reduction, op=False)


def _cases(n: int, dtype: Any) -> list[tuple[str, list[np.ndarray], dict[str, Any]]]:
    rng = np.random.default_rng(n)
    m = 7
    x = (rng.standard_normal((m, n)) * 3).astype(dtype)
    x[1, n // 2] = np.nan
    x[2, 0] = -np.inf
    x[3, 1] = np.inf
    x[4, n - 1] = x[4, 0] = 40.0  # a tie for the maximum
    g = rng.standard_normal((m, n)).astype(dtype)
    w = rng.standard_normal(n).astype(dtype)
    stat = rng.random(m).astype(dtype) + 0.5
    t = rng.integers(0, n, m)
    t[5] = -100
    ce = {"ignore_index": -100, "label_smoothing": 0.1}
    return [
        ("test_every_reduction", [x, w], {}),
        ("softmax", [x], {}), ("log_softmax", [x], {}),
        ("softmax_backward", [x, g], {}), ("log_softmax_backward", [x, g], {}),
        ("layer_norm", [x, w, w], {"eps": 1e-5, "weight": True, "bias": True}),
        ("layer_norm_backward", [g, x, stat, stat, w], {"weight": True}),
        ("rms_norm", [x], {"eps": 1e-5, "weight": False}),
        ("rms_norm_backward", [g, x, stat], {"weight": False}),
        ("cross_entropy", [x, t], ce), ("cross_entropy_backward", [x, t, stat, stat], ce),
    ]


def _check(got: Sequence[np.ndarray], want: Sequence[np.ndarray], what: str) -> None:
    assert len(got) == len(want), what
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a.dtype == b.dtype, (what, k, a.dtype, b.dtype)
        tol = 2e-5 if a.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=f"{what} output {k}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numba_rows_match_the_reference(dtype: Any) -> None:
    from ember_cpu import _rows

    # numba compiles each program for ~0.5 s: float64 on the reductions and the softmax only
    cases = _cases(37, dtype) if dtype == np.float32 else _cases(37, dtype)[:3]
    for name, ins, params in cases:
        p = rows.expand(name, [a.dtype.name for a in ins], params)
        got = _rows.run(p, ins, wait=True)
        assert got is not None
        _check(got, rows.evaluate(p, ins), name)


@pytest.mark.parametrize(("n", "dtype"), [(37, np.float32), (37, np.float64),
                                          (150, np.float32)])
def test_triton_rows_match_the_reference(n: int, dtype: Any,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        d = ember.device("triton-interpret")
    except (ValueError, ember.DeviceUnavailableError) as exc:  # pragma: no cover
        pytest.skip(f"triton-interpret: {exc}")
    from ember_triton import _rows_source, rows as triton_rows

    be = d.backend
    # rows of 150 are walked in chunks of 32: the looped kernels
    monkeypatch.setitem(triton_rows.MAX_BLOCK, "interpret", 64 if n > 64 else 1 << 12)
    for name, ins, params in _cases(n, dtype):
        p = rows.expand(name, [a.dtype.name for a in ins], params)
        outs = _rows_source.run(be, p, [ember.tensor(a, device=d)._data for a in ins])
        got = [be.to_numpy(o, None) for o in outs]
        _check(got, rows.evaluate(p, ins), f"{name} n={n}")


@pytest.mark.parametrize(("n", "dtype", "lanes"), [(37, np.float32, 1), (150, np.float64, 16)])
def test_opencl_rows_match_the_reference(n: int, dtype: Any, lanes: int,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """One work-item a row (what PoCL runs), and lanes combined by a local-memory tree."""
    try:
        d = ember.device("opencl:0")
    except (ValueError, ember.DeviceUnavailableError) as exc:  # pragma: no cover
        pytest.skip(f"opencl:0: {exc}")
    if not d.supports(ember.float64) and dtype == np.float64:  # pragma: no cover - PoCL has it
        pytest.skip("opencl:0 has no float64")
    from ember_opencl import rows as cl_rows

    monkeypatch.setattr(cl_rows, "LANES_OVERRIDE", lanes)
    be = d.backend
    # PoCL compiles each kernel for ~0.5 s: the lanes' tree on the reductions' program only
    cases = _cases(n, dtype) if lanes == 1 else _cases(n, dtype)[:1]
    for name, ins, params in cases:
        p = rows.expand(name, [a.dtype.name for a in ins], params)
        outs = cl_rows.run(be.runtime, p, [ember.tensor(a, device=d)._data for a in ins])
        got = [be.to_numpy(o, ember.int64 if o.dtype == np.int64 else getattr(ember, o.dtype.name))
               for o in outs]
        _check(got, rows.evaluate(p, ins), f"{name} n={n}")


@pytest.mark.parametrize("stack", ["cpu", "autodiff<cpu>"])
def test_a_program_runs_as_ember_ops_where_no_renderer_adopts_it(stack: str) -> None:
    """`rows.call`'s path on a device without a row renderer (wgpu, third-party backends):
    one ember op per node, differentiable through Autodiff."""
    x0 = np.random.default_rng(3).standard_normal((4, 9))
    x = ember.tensor(x0, dtype=ember.float32, device=stack, requires_grad="autodiff" in stack)
    p = rows.expand("log_softmax", ["float32"], {})
    (y,) = rows.as_ember_ops(p, [x])
    want = x0 - x0.max(1, keepdims=True)
    want = want - np.log(np.exp(want).sum(1, keepdims=True))
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-6)
    if "autodiff" in stack:
        g = (y * ember.tensor(x0, dtype=ember.float32, device=stack)).sum().backward()[x]
        sm = np.exp(want)
        np.testing.assert_allclose(g.numpy(), x0 - sm * x0.sum(1, keepdims=True),
                                   rtol=1e-4, atol=1e-5)
