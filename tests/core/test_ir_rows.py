"""Row programs of the kernel IR (`ember.backend.rows`): reductions over the row with a
prologue and an epilogue, checked against numpy in float64, and the composite ops' row
kernels (`ember.backend.row_kernels`) against their formulas in float64."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from ember.backend import ir, rows
from ember.backend.row_schedule import stages

NAN = np.nan


def _program(name: str, fn: Any, dtypes: Sequence[str], params: Mapping[str, Any] | None = None
             ) -> rows.RowProgram:
    rows.define(name, fn)
    return rows.expand(name, dtypes, params or {})


def _data(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    x = rng.standard_normal(shape).astype(np.float32)
    x[1, 3] = NAN  # nan in one row, an infinity in another
    x[2, 0] = -np.inf
    x[3, 5] = x[3, 1]  # a tie
    return x


def test_reductions_with_prologue_and_epilogue_match_numpy_float64() -> None:
    def fn(b: rows.RowBuilder, dt: Sequence[str], params: Mapping[str, Any]) -> list[Any]:
        x, w = b.elem(0, dt[0]), b.col(1, dt[1])
        pro = x * w + 1.0  # the prologue: what is reduced
        return [rows.sum_(pro), rows.prod(x), rows.amax(pro), rows.amin(x),
                rows.argmax(x), rows.argmin(pro), rows.mean(x), rows.var(x),
                rows.var(x, correction=0), x - rows.amax(x) * w]  # the last: an epilogue

    p = _program("test_reductions", fn, ["float32", "float32"])
    assert [len(s) for s in stages(p)] == [8, 1]  # var's sum of squares reads its mean
    rng = np.random.default_rng(0)
    x = _data(rng, (6, 9))
    w = rng.standard_normal(9).astype(np.float32)
    got = rows.evaluate(p, [x, w])
    xd, wd = x.astype(np.float64), w.astype(np.float64)
    pro = xd * wd + 1.0
    with np.errstate(invalid="ignore"):
        want = [pro.sum(1), xd.prod(1), pro.max(1), xd.min(1), xd.argmax(1), pro.argmin(1),
                xd.mean(1), xd.var(1, ddof=1), xd.var(1), xd - xd.max(1, keepdims=True) * wd]
    for k, (g, ref) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(g, ref, rtol=2e-5, atol=1e-5, err_msg=f"output {k}")
    assert got[4].dtype == np.int64 and got[5].dtype == np.int64
    assert got[4][1] == 3 and np.isnan(got[2][1]) and np.isnan(got[7][1])  # nan wins
    assert got[4][3] == int(np.argmax(xd[3]))  # the first of a tie


def test_integer_and_bool_reductions_follow_pytorch_dtypes() -> None:
    def fn(b: rows.RowBuilder, dt: Sequence[str], params: Mapping[str, Any]) -> list[Any]:
        x, m = b.elem(0, dt[0]), b.elem(1, dt[1])
        return [rows.sum_(x), rows.prod(x), rows.amax(x), rows.sum_(m), rows.amax(m),
                rows.argmin(x)]

    p = _program("test_int_reductions", fn, ["int8", "bool"])
    x = np.array([[100, 100, 3, -7], [-128, 5, 5, 0]], np.int8)
    m = np.array([[True, False, True, True], [False, False, False, False]])
    got = rows.evaluate(p, [x, m])
    assert [g.dtype.name for g in got] == ["int64", "int64", "int8", "int64", "bool", "int64"]
    np.testing.assert_array_equal(got[0], x.astype(np.int64).sum(1))  # no int8 wrap
    np.testing.assert_array_equal(got[1], x.astype(np.int64).prod(1))
    np.testing.assert_array_equal(got[2], [100, 5])
    np.testing.assert_array_equal(got[3], [3, 0])
    np.testing.assert_array_equal(got[4], [True, False])
    np.testing.assert_array_equal(got[5], [3, 0])


def test_bad_reductions_are_named() -> None:
    b = rows.RowBuilder()
    x = b.elem(0, "float32")
    with pytest.raises(ValueError, match="unknown reduction 'median'"):
        rows.reduce("median", x)
    with pytest.raises(TypeError, match="sum of a value that is the same along the row"):
        rows.sum_(rows.amax(x))
    with pytest.raises(TypeError, match="mean of int32"):
        rows.mean(b.elem(1, "int32"))
    with pytest.raises(NotImplementedError, match="no definition of row kernel 'nope'"):
        rows.expand("nope", ["float32"], {})


def _softmax64(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def _lse64(x: np.ndarray) -> np.ndarray:
    m = x.max(1)
    return m + np.log(np.exp(x - m[:, None]).sum(1))


def _row_kernel_cases(rng: np.random.Generator) -> list[tuple[str, list[np.ndarray],
                                                              dict[str, Any], list[Any]]]:
    """(kernel, float32 inputs, params, float64 expected outputs) for each built-in kernel."""
    x = rng.standard_normal((5, 12)).astype(np.float32) * 2
    g = rng.standard_normal((5, 12)).astype(np.float32)
    w = rng.standard_normal(12).astype(np.float32)
    bias = rng.standard_normal(12).astype(np.float32)
    t = np.array([3, -100, 0, 11, 7])
    xd, gd, wd, bd = (a.astype(np.float64) for a in (x, g, w, bias))
    y = _softmax64(xd)
    ly = np.log(y)
    mean = xd.mean(1)
    rstd = 1 / np.sqrt(xd.var(1) + 1e-5)
    xhat = (xd - mean[:, None]) * rstd[:, None]
    h = gd * wd
    ln_dx = rstd[:, None] * (h - h.mean(1, keepdims=True)
                             - xhat * (h * xhat).mean(1, keepdims=True))
    rr = 1 / np.sqrt((xd * xd).mean(1) + 1e-6)
    xs = xd * rr[:, None]
    rms_dx = rr[:, None] * (h - xs * (h * xs).mean(1, keepdims=True))
    s, lse = 0.2, _lse64(xd)
    valid = t != -100
    picked = np.where(valid, xd[np.arange(5), np.where(valid, t, 0)], 0)
    loss = np.where(valid, (1 - s) * (lse - picked) + s * (lse - xd.mean(1)), 0)
    onehot = np.zeros_like(xd)
    onehot[np.arange(5)[valid], t[valid]] = 1
    scale = rng.standard_normal(5)
    dz = np.where(valid[:, None], (y - (1 - s) * onehot - s / 12) * scale[:, None], 0)
    f32 = np.float32
    return [
        ("softmax", [x], {}, [y]),
        ("log_softmax", [x], {}, [ly]),
        ("softmax_backward", [y.astype(f32), g], {}, [y * (gd - (gd * y).sum(1, keepdims=True))]),
        ("log_softmax_backward", [ly.astype(f32), g], {}, [gd - y * gd.sum(1, keepdims=True)]),
        ("layer_norm", [x, w, bias], {"eps": 1e-5, "weight": True, "bias": True},
         [xhat * wd + bd, mean, rstd]),
        ("layer_norm", [x], {"eps": 1e-5, "weight": False, "bias": False}, [xhat, mean, rstd]),
        ("layer_norm_backward", [g, x, mean.astype(f32), rstd.astype(f32), w],
         {"weight": True}, [ln_dx]),
        ("rms_norm", [x, w], {"eps": 1e-6, "weight": True}, [xs * wd, rr]),
        ("rms_norm_backward", [g, x, rr.astype(f32), w], {"weight": True}, [rms_dx]),
        ("cross_entropy", [x, t], {"ignore_index": -100, "label_smoothing": s}, [loss, lse]),
        ("cross_entropy_backward", [x, t, lse.astype(f32), scale.astype(f32)],
         {"ignore_index": -100, "label_smoothing": s}, [dz]),
    ]


def test_row_kernels_match_their_formulas_in_float64() -> None:
    for name, ins, params, want in _row_kernel_cases(np.random.default_rng(1)):
        p = rows.expand(name, [a.dtype.name for a in ins], params)
        got = rows.evaluate(p, ins)
        assert len(got) == len(want), name
        for k, (a, ref) in enumerate(zip(got, want, strict=True)):
            assert a.dtype == np.float32, (name, k, a.dtype)
            np.testing.assert_allclose(a, ref, rtol=1e-4, atol=1e-5, err_msg=f"{name} {k}")


def test_cross_entropy_ignores_rows_whatever_their_logits() -> None:
    p = rows.expand("cross_entropy", ["float32", "int64"],
                    {"ignore_index": -1, "label_smoothing": 0.0})
    z = np.array([[NAN, 1.0, 2.0], [0.0, np.inf, 1.0]], np.float32)
    loss, _ = rows.evaluate(p, [z, np.array([-1, -1])])
    np.testing.assert_array_equal(loss, [0.0, 0.0])


def test_half_inputs_keep_float32_statistics() -> None:
    p = rows.expand("layer_norm", ["float16"], {"eps": 1e-5, "weight": False, "bias": False})
    assert [s for _, s in p.outputs] == ["float16", "float32", "float32"]
    assert all(v.dtype == "float32" for v, _ in p.outputs)  # computed in float32
    assert ir.compute_dtype("float16") == "float32"
