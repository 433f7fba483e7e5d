"""Every primitive runs on every dtype its category admits, with the dtype its rule gives."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from ember import _dtype as dt
from ember import ops
from ember._host import numpy_dtype

from ember_cpu import CpuBackend

K = CpuBackend().kernels
FLOATS = dt.FLOAT_DTYPES
NUMBERS = tuple(d for d in dt.ALL_DTYPES if d is not dt.bool_)
INTS = (*dt.INT_DTYPES, dt.bool_)
CATEGORY = {"any": dt.ALL_DTYPES, "float": FLOATS, "number": NUMBERS, "int": INTS}


def sample(d: dt.DType, shape: tuple[int, ...] = (2, 3)) -> np.ndarray:
    n = int(np.prod(shape))
    if d is dt.bool_:
        return (np.arange(n) % 2 == 0).reshape(shape)
    vals = np.arange(1, n + 1, dtype=np.float64).reshape(shape) * (0.25 if d.kind == "f" else 1)
    return vals.astype(numpy_dtype(d))


IDX = np.array([[0, 1, 0], [1, 0, 1]], np.int64)
# (inputs builder, params) per op; the builder takes the dtype under test
CASES: dict[str, tuple[Any, dict[str, Any]]] = {
    "clamp": (lambda d: [sample(d)], {"min": 1, "max": 3}),
    "where": (lambda d: [sample(dt.bool_), sample(d), sample(d)[::-1]], {}),
    "sum": (lambda d: [sample(d)], {"dims": (1,), "keepdim": False}),
    "prod": (lambda d: [sample(d)], {"dims": (0, 1), "keepdim": True}),
    "mean": (lambda d: [sample(d)], {"dims": (0, 1), "keepdim": False}),
    "max": (lambda d: [sample(d)], {"dims": (0,), "keepdim": False}),
    "min": (lambda d: [sample(d)], {"dims": (0, 1), "keepdim": False}),
    "var": (lambda d: [sample(d)], {"dims": (1,), "keepdim": False, "correction": 1}),
    "any": (lambda d: [sample(d)], {"dims": (0, 1), "keepdim": False}),
    "all": (lambda d: [sample(d)], {"dims": (1,), "keepdim": True}),
    "argmax": (lambda d: [sample(d)], {"dim": None, "keepdim": False}),
    "argmin": (lambda d: [sample(d)], {"dim": 1, "keepdim": True}),
    "cumsum": (lambda d: [sample(d)], {"dim": 1}),
    "cumprod": (lambda d: [sample(d)], {"dim": 0}),
    "reshape": (lambda d: [sample(d)], {"shape": (3, 2)}),
    "permute": (lambda d: [sample(d)], {"dims": (1, 0)}),
    "expand": (lambda d: [sample(d, (1, 3))], {"shape": (4, 3)}),
    "slice": (lambda d: [sample(d)], {"starts": (1, 2), "stops": (-1, -1), "steps": (-1, -2)}),
    "pad": (lambda d: [sample(d)], {"pad": ((1, 0), (0, 2)), "value": 0}),
    "flip": (lambda d: [sample(d)], {"dims": (0, 1)}),
    "cat": (lambda d: [sample(d), sample(d)], {"dim": 1}),
    "gather": (lambda d: [sample(d), IDX], {"dim": 0}),
    "scatter_add": (lambda d: [sample(d), IDX, sample(d)], {"dim": 0}),
    "scatter": (lambda d: [sample(d), IDX, sample(d)], {"dim": 1}),
    "index_select": (lambda d: [sample(d), np.array([2, 0], np.int64)], {"dim": 1}),
    "masked_fill": (lambda d: [sample(d), sample(dt.bool_)], {"value": 1}),
    "tril": (lambda d: [sample(d)], {"k": 0}),
    "triu": (lambda d: [sample(d)], {"k": 1}),
    "contiguous": (lambda d: [sample(d).T], {}),
    "nonzero": (lambda d: [sample(d)], {}),
    "sort": (lambda d: [sample(d)], {"dim": 1, "descending": True, "stable": True}),
    "topk": (lambda d: [sample(d)], {"k": 2, "dim": 1, "largest": False}),
    "matmul": (lambda d: [sample(d), sample(d, (3, 2))], {}),
    "conv1d": (lambda d: [sample(d, (1, 2, 5)), sample(d, (2, 2, 3))],
               {"stride": (1,), "padding": (1,), "dilation": (1,), "groups": 1}),
    "conv2d": (lambda d: [sample(d, (1, 2, 4, 4)), sample(d, (2, 1, 2, 2))],
               {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 2}),
    "conv_transpose1d": (lambda d: [sample(d, (1, 2, 5)), sample(d, (2, 3, 3))],
                         {"stride": (2,), "padding": (1,), "output_padding": (1,),
                          "dilation": (1,), "groups": 1}),
    "conv_transpose2d": (lambda d: [sample(d, (1, 2, 3, 3)), sample(d, (2, 1, 2, 2))],
                         {"stride": (2, 2), "padding": (0, 0), "output_padding": (0, 0),
                          "dilation": (1, 1), "groups": 2}),
    "max_pool2d": (lambda d: [sample(d, (1, 1, 4, 4))],
                   {"kernel_size": (2, 2), "stride": (2, 2), "padding": (1, 1),
                    "dilation": (1, 1), "ceil_mode": True}),
    "avg_pool2d": (lambda d: [sample(d, (1, 1, 4, 4))],
                   {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1),
                    "ceil_mode": False, "count_include_pad": False}),
    "adaptive_avg_pool2d": (lambda d: [sample(d, (1, 1, 5, 4))], {"output_size": (2, 3)}),
    "embedding": (lambda d: [sample(d, (4, 3)), np.array([[3, 0], [1, 1]], np.int64)], {}),
    "interpolate": (lambda d: [sample(d, (1, 1, 2, 3))],
                    {"size": (4, 5), "mode": "bilinear", "align_corners": False}),
}


class Typed:
    """What a dtype rule reads from a tensor: its dtype (core reads the slot, ``_dtype``)."""

    def __init__(self, dtype: dt.DType) -> None:
        self._dtype = dtype


def _case(op: ops.Op, d: dt.DType) -> tuple[list[np.ndarray], dict[str, Any]]:
    if op.name in CASES:
        build, params = CASES[op.name]
        return build(d), params
    if op.group == "elementwise":
        return [sample(d)] * op.arity, {}
    raise AssertionError(f"no sample for {op.name}")


NON_CREATION = [op for op in ops.primitives() if op.group != "creation"]
PAIRS = [(op, d) for op in NON_CREATION for d in CATEGORY[op.dtypes]]


@pytest.mark.parametrize(("op", "d"), PAIRS, ids=[f"{o.name}-{d.name}" for o, d in PAIRS])
def test_kernel_returns_the_dtype_of_its_rule(op: ops.Op, d: dt.DType) -> None:
    args, params = _case(op, d)
    out = K[op](*args, **params)
    want = op.result_rule([Typed(d)] * len(args), params)
    outs, wants = (out, want) if op.outputs == 2 else ((out,), (want,))
    for o, w in zip(outs, wants, strict=True):
        assert isinstance(o, (np.ndarray, np.generic))
        assert o.dtype == numpy_dtype(w), (op.name, d.name, o.dtype)


def test_every_primitive_has_a_kernel() -> None:
    assert [op.name for op in ops.primitives() if op not in K] == []


@pytest.mark.parametrize("d", dt.ALL_DTYPES, ids=lambda d: d.name)
def test_creation_kernels_give_the_dtype_asked_for(d: dt.DType) -> None:
    nd = numpy_dtype(d)
    assert K[ops.full](shape=(2, 2), value=1, dtype=d).dtype == nd
    assert K[ops.randint](low=0, high=2, shape=(3,), dtype=d, seed=1, offset=0).dtype == nd
    assert K[ops.cast](sample(dt.float32), dtype=d).dtype == nd
    if d is not dt.bool_:
        assert K[ops.arange](start=0, stop=5, step=2, dtype=d).tolist() == [0, 2, 4]
    if d.kind == "f":
        assert K[ops.rand](shape=(3,), dtype=d, seed=1, offset=0).dtype == nd
        assert K[ops.randn](shape=(3,), dtype=d, seed=1, offset=0).dtype == nd


@pytest.mark.parametrize("d", FLOATS, ids=lambda d: d.name)
def test_float_kernels_are_silent_on_inf_and_nan(d: dt.DType) -> None:
    x = np.array([0.0, -1.0, np.inf, -np.inf, np.nan, 6e4]).astype(numpy_dtype(d))
    for name in ("exp", "log", "sqrt", "rsqrt", "asin", "reciprocal", "sigmoid", "erf", "cosh"):
        K[ops.registry[name]](x)  # filterwarnings=error turns a numpy warning into a failure
    for name in ("div", "floordiv", "remainder", "pow", "atan2"):
        K[ops.registry[name]](x, x[::-1].copy())
    assert np.isnan(K[ops.div](x[:1], x[:1])).all()


@pytest.mark.parametrize("d", FLOATS, ids=lambda d: d.name)
def test_comparisons_and_extremes_are_silent_on_nan(d: dt.DType) -> None:
    x = np.array([np.nan, np.inf, -np.inf, 1.0, 0.0]).astype(numpy_dtype(d))
    y = x[::-1].copy()
    for name in ("lt", "le", "gt", "ge", "eq", "ne", "maximum", "minimum"):
        out = K[ops.registry[name]](x, y)
        assert out.shape == (5,)
    assert np.isnan(K[ops.maximum](x, y)[0].astype(np.float32))
