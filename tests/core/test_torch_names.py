"""PyTorch's other tensor names (square, exp2, fmod, hypot, logaddexp, lerp, nansum, median,
quantile, mm, kron, cross, diagonal, diag, tile, rot90, searchsorted, isin, ...): values and
gradients against PyTorch on the CPU (float64, a test-only oracle), the method and function
forms, and the errors bad input gets."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ember

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(20262)
AD = "autodiff<cpu>"


def _close(got: Any, want: Any, what: str) -> None:
    g = got.numpy() if isinstance(got, ember.Tensor) else np.asarray(got)
    w = want.detach().numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    assert g.shape == w.shape, f"{what}: shape {g.shape} != {w.shape}"
    if w.dtype.kind in "biu":
        assert g.dtype.kind == w.dtype.kind and g.dtype.itemsize == w.dtype.itemsize, \
            f"{what}: dtype {g.dtype} != {w.dtype}"
        np.testing.assert_array_equal(g, w, err_msg=what)
    else:
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-7,
                                   atol=1e-10, err_msg=what)


def check(what: str, efn: Callable[..., Any], tfn: Callable[..., Any], *arrays: np.ndarray,
          grad: bool = True) -> None:
    """``efn`` on ``autodiff<cpu>`` against ``tfn`` in torch: the value and, with ``grad``,
    the gradient of ``sum(out * cotangent)`` for every float input."""
    floats = [grad and a.dtype.kind == "f" for a in arrays]
    es = [ember.tensor(a, device=AD, requires_grad=f) for a, f in zip(arrays, floats,
                                                                        strict=True)]
    ts = [torch.tensor(a, requires_grad=f) for a, f in zip(arrays, floats, strict=True)]
    eo, to = efn(*es), tfn(*ts)
    _close(eo, to, what)
    if not any(floats) or not eo.dtype.is_floating_point:
        return
    cot = RNG.standard_normal(tuple(to.shape))
    grads = (eo * ember.tensor(cot, device=AD)).sum().backward()
    (to * torch.tensor(cot)).sum().backward()
    for i, (e, t) in enumerate(zip(es, ts, strict=True)):
        if floats[i]:
            _close(grads[e], t.grad if t.grad is not None else torch.zeros_like(t),
                   f"{what}: gradient of input {i}")


def randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


def pos(*shape: int) -> np.ndarray:
    return RNG.uniform(0.2, 3.0, shape)


# -- elementwise ---------------------------------------------------------------------------------

UNARY: dict[str, tuple[Callable[[], np.ndarray], bool]] = {
    "square": (lambda: randn(3, 4), True),
    "exp2": (lambda: randn(3, 4) * 4, True),
    "log2": (lambda: pos(3, 4), True),
    "log10": (lambda: pos(3, 4), True),
    "frac": (lambda: randn(3, 4) * 5, True),
    "deg2rad": (lambda: randn(5) * 90, True),
    "rad2deg": (lambda: randn(5), True),
    "logit": (lambda: RNG.uniform(0.05, 0.95, (4, 3)), True),
    "absolute": (lambda: randn(3, 4), True),
    "negative": (lambda: randn(3, 4), True),
    "fix": (lambda: randn(3, 4) * 4, False),
    "sgn": (lambda: randn(3, 4), False),
    "isfinite": (lambda: np.array([1.0, np.nan, np.inf, -np.inf, 0.0]), False),
    "isposinf": (lambda: np.array([1.0, np.nan, np.inf, -np.inf, 0.0]), False),
    "isneginf": (lambda: np.array([1.0, np.nan, np.inf, -np.inf, 0.0]), False),
    "nan_to_num": (lambda: np.array([1.0, np.nan, np.inf, -np.inf, -2.5]), False),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("form", ["function", "method"])
def test_unary_composites_match_pytorch(name: str, form: str) -> None:
    make, grad = UNARY[name]
    if form == "function":
        check(name, getattr(ember, name), getattr(torch, name), make(), grad=grad)
    else:
        check(name, lambda x: getattr(x, name)(), lambda x: getattr(x, name)(), make(), grad=grad)


@pytest.mark.parametrize("values", [[-3, 0, 2, 7], [True, False]])
def test_square_of_integers_and_bools_is_integer_as_pytorch(values: list[Any]) -> None:
    a = np.array(values)
    check("square", ember.square, torch.square, a)
    assert ember.tensor(a).square().dtype is ember.int64


def test_exp2_log2_log10_of_integers_give_float32() -> None:
    for name in ("exp2", "log2", "log10"):
        x = ember.tensor([1, 2, 8])
        out = getattr(ember, name)(x)
        assert out.dtype is ember.float32, name
        _close(out, getattr(torch, name)(torch.tensor([1, 2, 8])), name)


BINARY: dict[str, tuple[Callable[[], tuple[np.ndarray, np.ndarray]], bool]] = {
    "hypot": (lambda: (randn(3, 4), randn(4)), True),
    "logaddexp": (lambda: (randn(3, 4) * 10, randn(3, 1) * 10), True),
    "xlogy": (lambda: (randn(3, 4), pos(3, 4)), True),
    "fmod": (lambda: (randn(3, 4) * 7, np.where(RNG.random((3, 4)) < 0.5, -1, 1) *
                      RNG.uniform(0.5, 2.0, (3, 4))), True),
    "float_power": (lambda: (pos(3, 4), randn(3, 4)), True),
    "subtract": (lambda: (randn(3, 4), randn(3, 4)), True),
    "floor_divide": (lambda: (randn(3, 4) * 7, pos(3, 4)), False),
    "true_divide": (lambda: (randn(3, 4), pos(3, 4)), True),
    "atan2": (lambda: (randn(3, 4), randn(3, 4)), True),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("form", ["function", "method"])
def test_binary_composites_match_pytorch(name: str, form: str) -> None:
    make, grad = BINARY[name]
    a, b = make()
    if form == "function":
        check(name, getattr(ember, name), getattr(torch, name), a, b, grad=grad)
    else:
        check(name, lambda x, y: getattr(x, name)(y), lambda x, y: getattr(x, name)(y), a, b,
              grad=grad)


def test_fmod_of_integers_keeps_the_sign_of_the_dividend_and_refuses_zero() -> None:
    a, b = np.array([-7, 7, -7, 7, 6, -6]), np.array([3, 3, -3, -3, 3, -3])
    check("fmod", ember.fmod, torch.fmod, a, b)
    check("remainder", lambda x, y: x.remainder(y), lambda x, y: x.remainder(y), a, b)
    with pytest.raises(ZeroDivisionError):
        ember.fmod(ember.tensor([1, 2]), ember.tensor([1, 0]))


def test_edge_values_of_hypot_logaddexp_xlogy_match_pytorch() -> None:
    inf, nan = math.inf, math.nan
    a = np.array([inf, -inf, inf, nan, 0.0, 1e300, 0.0, -inf, 3.0])
    b = np.array([nan, 2.0, inf, 1.0, 0.0, 1e300, nan, -inf, 4.0])
    for name in ("hypot", "logaddexp", "xlogy"):
        x, y = (a, b) if name != "xlogy" else (np.array([0.0, 0.0, 1.0, 0.0, 2.0]),
                                                np.array([0.0, nan, 0.0, 5.0, inf]))
        check(name, getattr(ember, name), getattr(torch, name), x, y, grad=False)


def test_logaddexp_gradient_at_a_tie_is_one_half_each() -> None:
    check("logaddexp", ember.logaddexp, torch.logaddexp, np.array([1.5, -2.0]),
          np.array([1.5, -2.0]))


@pytest.mark.parametrize("weight", [0.25, 0.75, 1.0, "tensor"])
def test_lerp_matches_pytorch(weight: Any) -> None:
    s, e = randn(3, 4), randn(3, 4)
    if weight == "tensor":
        check("lerp", ember.lerp, torch.lerp, s, e, RNG.uniform(-0.5, 1.5, (3, 4)))
    else:
        check("lerp", lambda x, y: x.lerp(y, weight), lambda x, y: x.lerp(y, weight), s, e)


def test_lerp_with_weight_one_gives_end_exactly() -> None:
    s, e = ember.tensor([1e8, -3.0]), ember.tensor([1.0, 7.0])
    assert ember.lerp(s, e, 1.0).tolist() == [1.0, 7.0]


def test_addcmul_addcdiv_heaviside_logit_eps_nan_to_num_arguments() -> None:
    x, a, b = randn(3, 4), randn(3, 4), pos(3, 4)
    check("addcmul", lambda x, a, b: x.addcmul(a, b, value=0.5),
          lambda x, a, b: x.addcmul(a, b, value=0.5), x, a, b)
    check("addcdiv", lambda x, a, b: ember.addcdiv(x, a, b, value=-2),
          lambda x, a, b: torch.addcdiv(x, a, b, value=-2), x, a, b)
    check("heaviside", ember.heaviside, torch.heaviside, np.array([-1.0, 0.0, 2.0, np.nan]),
          np.array([0.5, 0.5, 0.5, 0.5]), grad=False)
    check("logit", lambda t: t.logit(0.1), lambda t: t.logit(0.1),
          np.array([0.0, 0.05, 0.5, 0.97, 1.0]), grad=False)
    check("nan_to_num", lambda t: t.nan_to_num(1.0, 9.0, -9.0),
          lambda t: t.nan_to_num(1.0, 9.0, -9.0), np.array([np.nan, np.inf, -np.inf, 2.0]))
    x32 = ember.tensor([math.inf, -math.inf])
    assert ember.nan_to_num(x32).tolist() == [float(np.finfo(np.float32).max),
                                              float(np.finfo(np.float32).min)]
    with pytest.raises(ember.DTypeError, match="addcdiv"):
        ember.addcdiv(ember.tensor([1]), ember.tensor([1]), ember.tensor([2]))
    with pytest.raises(ember.DTypeError, match="frac"):
        ember.frac(ember.tensor([1, 2]))


COMPARISONS = ["eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"]


@pytest.mark.parametrize("name", COMPARISONS)
def test_comparison_and_logical_methods(name: str) -> None:
    a, b = RNG.integers(-2, 3, (3, 4)), RNG.integers(-2, 3, (3, 4))
    check(name, lambda x, y: getattr(x, name)(y), lambda x, y: getattr(x, name)(y), a, b)


@pytest.mark.parametrize("name", ["bitwise_and", "bitwise_or", "bitwise_xor"])
def test_bitwise_methods(name: str) -> None:
    a, b = RNG.integers(0, 64, (5,)), RNG.integers(0, 64, (5,))
    check(name, lambda x, y: getattr(x, name)(y), lambda x, y: getattr(x, name)(y), a, b)
    check("bitwise_not", lambda x: x.bitwise_not(), lambda x: x.bitwise_not(), a)


# -- reductions and statistics -------------------------------------------------------------------

def _with_nans(*shape: int) -> np.ndarray:
    a = randn(*shape)
    a[RNG.random(shape) < 0.3] = np.nan
    return a


@pytest.mark.parametrize("dim", [None, 0, 1, (0, 1)])
def test_nansum_nanmean_count_nonzero(dim: Any) -> None:
    a = _with_nans(4, 5)
    a[0] = np.nan  # a row of nans: nanmean gives nan there
    kw = {} if dim is None else {"dim": dim}
    check("nansum", lambda x: x.nansum(**kw), lambda x: x.nansum(**kw), a)
    check("nanmean", lambda x: ember.nanmean(x, **kw), lambda x: torch.nanmean(x, **kw), a,
          grad=False)
    # gradients where no slice is all nan (there PyTorch's gradient is nan, ember's 0)
    check("nanmean", lambda x: ember.nanmean(x, **kw), lambda x: torch.nanmean(x, **kw),
          a[1:], grad=dim in (None, 1))
    ints = RNG.integers(-1, 2, (4, 5))
    check("count_nonzero", lambda x: ember.count_nonzero(x, dim),
          lambda x: torch.count_nonzero(x, dim), ints)


@pytest.mark.parametrize("dim", [None, 0, 1, -1])
def test_median_matches_pytorch_values_and_picks_a_matching_index(dim: Any) -> None:
    a = randn(4, 6)
    if dim is None:
        check("median", ember.median, torch.median, a)
        check("median", ember.median, torch.median, a[:, :5])
        return
    check("median values", lambda x: x.median(dim).values, lambda x: x.median(dim).values, a)
    keep = ember.tensor(a).median(dim, keepdim=True)
    _close(keep.values, torch.tensor(a).median(dim, keepdim=True).values, "keepdim")
    _close(ember.tensor(a).gather(dim, keep.indices), keep.values.numpy(), "indices")


def test_median_of_values_with_nan_is_nan_as_pytorch() -> None:
    a = np.array([[1.0, np.nan, 3.0], [2.0, 0.0, 5.0]])
    check("median", ember.median, torch.median, a, grad=False)
    got, want = ember.tensor(a).median(1), torch.tensor(a).median(1)
    _close(got.values, want.values, "values")
    _close(got.indices, want.indices, "indices")


@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
@pytest.mark.parametrize("dim", [None, 1])
def test_quantile_matches_pytorch(interpolation: str, dim: Any) -> None:
    a = randn(3, 7)
    for q in (0.3, [0.0, 0.25, 0.5, 0.9, 1.0]):
        for keepdim in (False, True):
            qt = torch.tensor(q, dtype=torch.float64)

            def e(x: Any, q: Any = q, keepdim: bool = keepdim) -> Any:
                return ember.quantile(x, q, dim, keepdim, interpolation=interpolation)

            def t(x: Any, qt: Any = qt, keepdim: bool = keepdim) -> Any:
                return torch.quantile(x, qt, dim, keepdim, interpolation=interpolation)

            check(f"quantile {q} {keepdim}", e, t, a)


def test_quantile_and_median_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match=r"q must lie in \[0, 1\], got 1.5"):
        ember.quantile(ember.tensor([1.0, 2.0]), 1.5)
    with pytest.raises(ember.DTypeError, match="quantile"):
        ember.quantile(ember.tensor([1, 2]), 0.5)
    with pytest.raises(ember.ShapeError, match="empty axis"):
        ember.quantile(ember.zeros(0), 0.5)
    with pytest.raises(ember.ShapeError, match="axis 1 of size 0"):
        ember.median(ember.zeros(2, 0), 1)
    assert math.isnan(ember.median(ember.zeros(0)).item())


def test_aminmax_var_mean_std_mean() -> None:
    a = randn(3, 5)
    got, want = ember.tensor(a).aminmax(dim=1), torch.tensor(a).aminmax(dim=1)
    _close(got.min, want.min, "min")
    _close(got.max, want.max, "max")
    for name in ("var_mean", "std_mean"):
        g, w = getattr(ember, name)(ember.tensor(a), 0), getattr(torch, name)(torch.tensor(a), 0)
        _close(g[0], w[0], name)
        _close(g[1], w[1], name)


# -- matrices -------------------------------------------------------------------------------------

MATRIX: dict[str, tuple[Callable[..., Any], Callable[..., Any], list[tuple[int, ...]]]] = {
    "mm": (ember.mm, torch.mm, [(3, 4), (4, 2)]),
    "mv": (ember.mv, torch.mv, [(3, 4), (4,)]),
    "dot": (ember.dot, torch.dot, [(5,), (5,)]),
    "vdot": (ember.vdot, torch.vdot, [(5,), (5,)]),
    "inner": (ember.inner, torch.inner, [(2, 3, 4), (5, 4)]),  # a function only (see docs)
    "kron": (ember.kron, torch.kron, [(2, 3), (3, 1, 2)]),
    "cross": (lambda a, b: ember.cross(a, b, dim=1), lambda a, b: torch.cross(a, b, dim=1),
              [(4, 3, 2), (1, 3, 2)]),
    "trace": (ember.trace, torch.trace, [(4, 3)]),
    "diagonal": (lambda x: x.diagonal(1, 2, 0), lambda x: x.diagonal(1, 2, 0), [(4, 2, 5)]),
    "diagonal-below": (lambda x: ember.diagonal(x, -2), lambda x: torch.diagonal(x, -2),
                       [(5, 3)]),
    "diagonal-outside": (lambda x: ember.diagonal(x, 4), lambda x: torch.diagonal(x, 4),
                         [(3, 3)]),
    "diag-of-vector": (lambda x: x.diag(), lambda x: x.diag(), [(4,)]),
    "diag-above": (lambda x: ember.diag(x, 2), lambda x: torch.diag(x, 2), [(3,)]),
    "diag-below": (lambda x: ember.diag(x, -1), lambda x: torch.diag(x, -1), [(3,)]),
    "diag-of-matrix": (lambda x: ember.diag(x, -1), lambda x: torch.diag(x, -1), [(3, 4)]),
    "addmm": (lambda x, a, b: x.addmm(a, b, beta=0.5, alpha=2),
              lambda x, a, b: x.addmm(a, b, beta=0.5, alpha=2), [(4,), (3, 2), (2, 4)]),
    "addmv": (ember.addmv, torch.addmv, [(3,), (3, 2), (2,)]),
    "baddbmm": (lambda x, a, b: ember.baddbmm(x, a, b, alpha=-1),
                lambda x, a, b: torch.baddbmm(x, a, b, alpha=-1), [(2, 3, 4), (2, 3, 5),
                                                                      (2, 5, 4)]),
    "addbmm": (ember.addbmm, torch.addbmm, [(3, 4), (2, 3, 5), (2, 5, 4)]),
}


@pytest.mark.parametrize("name", sorted(MATRIX))
def test_matrix_composites_match_pytorch(name: str) -> None:
    efn, tfn, shapes = MATRIX[name]
    check(name, efn, tfn, *[randn(*s) for s in shapes])


def test_cross_without_dim_takes_the_first_axis_of_size_3_as_torch_cross() -> None:
    a, b = randn(3, 3, 2), randn(3, 3, 2)
    assert torch.cross(torch.tensor(a), torch.tensor(b), dim=0).shape == (3, 3, 2)
    check("cross", ember.cross, lambda x, y: torch.cross(x, y, dim=0), a, b)


def test_diag_and_diagonal_of_integers_and_empty_results() -> None:
    check("diag", ember.diag, torch.diag, np.arange(3))
    check("diag", lambda x: ember.diag(x, 1), lambda x: torch.diag(x, 1), np.arange(0))
    check("trace", ember.trace, torch.trace, np.arange(12).reshape(3, 4))


def test_addmm_with_beta_zero_ignores_nan_in_the_input() -> None:
    x = np.full((2, 2), np.nan)
    check("addmm", lambda x, a, b: ember.addmm(x, a, b, beta=0),
          lambda x, a, b: torch.addmm(x, a, b, beta=0), x, randn(2, 3), randn(3, 2), grad=False)


def test_matrix_shape_errors_name_op_and_shapes() -> None:
    with pytest.raises(ember.ShapeError, match=r"mm: the first operand must be 2-D, got shape "
                                                r"\(3,\)"):
        ember.mm(ember.zeros(3), ember.zeros(3, 2))
    with pytest.raises(ember.ShapeError, match="dot: the vectors have 3 and 4 elements"):
        ember.dot(ember.zeros(3), ember.zeros(4))
    with pytest.raises(ember.ShapeError, match=r"cross: axis 0 must have size 3"):
        ember.cross(ember.zeros(4, 3), ember.zeros(4, 3), dim=0)
    with pytest.raises(ember.ShapeError, match="cross: no axis of size 3"):
        ember.cross(ember.zeros(2), ember.zeros(2))
    with pytest.raises(ember.ShapeError, match="diag: expected a 1-D or 2-D tensor"):
        ember.diag(ember.zeros(2, 2, 2))


# -- shapes, selection, search -------------------------------------------------------------------

SHAPES: dict[str, tuple[Callable[..., Any], Callable[..., Any], list[tuple[int, ...]]]] = {
    "hstack": (lambda a, b: ember.hstack([a, b]), lambda a, b: torch.hstack([a, b]),
               [(2, 3), (2, 1)]),
    "hstack-1d": (lambda a, b: ember.hstack([a, b]), lambda a, b: torch.hstack([a, b]),
                  [(3,), (2,)]),
    "vstack": (lambda a, b: ember.vstack([a, b]), lambda a, b: torch.vstack([a, b]),
               [(3,), (2, 3)]),
    "dstack": (lambda a, b: ember.dstack([a, b]), lambda a, b: torch.dstack([a, b]),
               [(2, 3), (2, 3, 2)]),
    "column_stack": (lambda a, b: ember.column_stack([a, b]),
                     lambda a, b: torch.column_stack([a, b]), [(3,), (3, 2)]),
    "tile": (lambda x: x.tile(2, 1, 3), lambda x: x.tile(2, 1, 3), [(2, 3)]),
    "tile-short": (lambda x: ember.tile(x, (2,)), lambda x: torch.tile(x, (2,)), [(2, 3)]),
    "fliplr": (ember.fliplr, torch.fliplr, [(2, 3, 2)]),
    "flipud": (lambda x: x.flipud(), lambda x: x.flipud(), [(4, 3)]),
    "unbind": (lambda x: ember.stack(list(x.unbind(1)[::-1]), 0),
               lambda x: torch.stack(list(x.unbind(1)[::-1]), 0), [(2, 3, 2)]),
    "select": (lambda x: x.select(1, -1), lambda x: x.select(1, -1), [(2, 3, 2)]),
    "concat": (lambda a, b: ember.concat([a, b], 1), lambda a, b: torch.concat([a, b], 1),
               [(2, 3), (2, 1)]),
    "clone": (ember.clone, torch.clone, [(2, 3)]),
    "t": (ember.t, torch.t, [(2, 3)]),
}
for _k in (-3, -1, 0, 1, 2, 5):
    SHAPES[f"rot90-{_k}"] = (lambda x, k=_k: ember.rot90(x, k, (1, 2)),
                             lambda x, k=_k: torch.rot90(x, k, (1, 2)), [(2, 3, 4)])


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_shape_composites_match_pytorch(name: str) -> None:
    efn, tfn, shapes = SHAPES[name]
    check(name, efn, tfn, *[randn(*s) for s in shapes])


def test_take_take_along_dim_masked_select_argwhere() -> None:
    a = randn(3, 4)
    idx = np.array([[0, -1], [5, 11]])
    check("take", lambda x, i: x.take(i), lambda x, i: x.take(i), a, idx)
    order = np.argsort(a, axis=1)
    check("take_along_dim", lambda x, i: ember.take_along_dim(x, i, 1),
          lambda x, i: torch.take_along_dim(x, i, 1), a, order)
    check("take_along_dim-broadcast", lambda x, i: ember.take_along_dim(x, i, 0),
          lambda x, i: torch.take_along_dim(x, i, 0), randn(3, 1, 2), np.array([[[2], [0]]]))
    check("take_along_dim-flat", lambda x, i: x.take_along_dim(i),
          lambda x, i: x.take_along_dim(i), a, np.array([3, 0, 7]))
    mask = RNG.random((4,)) < 0.5
    check("masked_select", ember.masked_select, torch.masked_select, a, mask)
    check("argwhere", ember.argwhere, torch.argwhere, RNG.integers(0, 2, (3, 4)))
    with pytest.raises(IndexError, match="12"):
        ember.take(ember.tensor(a), ember.tensor([12]))
    with pytest.raises(IndexError, match="select: index 3 is out of range for axis 1 of size 3"):
        ember.select(ember.zeros(2, 3), 1, 3)


@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_and_bucketize_match_pytorch(right: bool) -> None:
    seq = np.sort(RNG.integers(0, 6, 8).astype(np.float64))
    vals = np.array([[-1.0, 0.0, 2.0, 2.5], [5.0, 6.0, np.nan, 3.0]])
    check("searchsorted", lambda s, v: ember.searchsorted(s, v, right=right),
          lambda s, v: torch.searchsorted(s, v, right=right), seq, vals)
    check("bucketize", lambda v, s: ember.bucketize(v, s, right=right),
          lambda v, s: torch.bucketize(v, s, right=right), vals, seq)
    rows = np.sort(randn(2, 5), axis=1)
    check("searchsorted-rows", lambda s, v: ember.searchsorted(s, v, side="right" if right
                                                              else "left"),
          lambda s, v: torch.searchsorted(s, v, side="right" if right else "left"), rows,
          randn(2, 3))
    got = ember.searchsorted(ember.tensor(seq), 2.0, out_int32=True)
    assert got.dtype is ember.int32 and got.ndim == 0


def test_isin_equal_new_and_sizes() -> None:
    e, t = RNG.integers(0, 6, (3, 4)), np.array([1, 4])
    check("isin", ember.isin, torch.isin, e, t)
    check("isin invert", lambda a, b: ember.isin(a, b, invert=True),
          lambda a, b: torch.isin(a, b, invert=True), e, t)
    x = ember.tensor([[1.0, 2.0]], dtype=ember.float64)
    assert x.equal(ember.tensor([[1.0, 2.0]], dtype=ember.float64))
    assert not x.equal(ember.tensor([1.0, 2.0], dtype=ember.float64))
    assert not ember.equal(x, x + 1)
    z = x.new_zeros(2, 3)
    assert z.shape == (2, 3) and z.dtype is ember.float64 and z.device is x.device
    assert x.new_ones((2,)).tolist() == [1.0, 1.0]
    assert x.new_full((1, 2), 7).tolist() == [[7.0, 7.0]]
    assert x.new_tensor([3]).dtype is ember.float64
    assert x.new_empty(4, dtype=ember.int32).dtype is ember.int32
    assert (x.nelement(), x.ndimension(), x.element_size()) == (2, 2, 8)
    assert ember.numel(x) == 2 and ember.is_tensor(x) and not ember.is_tensor(1.0)


def test_logspace_matches_pytorch() -> None:
    _close(ember.logspace(-2, 3, 6, dtype=ember.float64),
           torch.logspace(-2, 3, 6, dtype=torch.float64), "logspace")
    _close(ember.logspace(0, 3, 4, base=2.0), torch.logspace(0, 3, 4, base=2.0), "logspace")
