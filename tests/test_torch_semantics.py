"""PyTorch's semantics at the edges (issue 43): one lambda written against the torch API runs
unchanged on ``torch`` and on ``ember`` (``autodiff<cpu>`` tensors); values, dtypes and input
gradients must agree, and bad input must raise what PyTorch raises."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ember

torch = pytest.importorskip("torch")

AD = "autodiff<cpu>"
RNG = np.random.default_rng(43)


def _ember(a: np.ndarray, grad: bool) -> Any:
    return ember.tensor(a, device=AD, requires_grad=grad)


def _torch(a: np.ndarray, grad: bool) -> Any:
    return torch.tensor(a, requires_grad=grad)


def _np(t: Any) -> np.ndarray:
    return np.asarray(t.detach().numpy() if hasattr(t, "detach") else t.numpy())


def same(fn: Callable[..., Any], *arrays: np.ndarray, grad: bool = True,
         rtol: float = 1e-7, atol: float = 1e-10) -> None:
    """``fn(lib, *tensors)`` with lib = torch and lib = ember: equal values and dtypes, and
    (``grad``) equal gradients of ``sum(out * cotangent)`` for every float input."""
    floats = [grad and a.dtype.kind == "f" for a in arrays]
    ts = [_torch(a, f) for a, f in zip(arrays, floats, strict=True)]
    es = [_ember(a, f) for a, f in zip(arrays, floats, strict=True)]
    with warnings.catch_warnings():  # torch's own ("degrees of freedom is <= 0", ...)
        warnings.simplefilter("ignore", UserWarning)
        to = fn(torch, *ts)
    eo = fn(ember, *es)
    assert str(to.dtype).removeprefix("torch.") == eo.dtype.name
    assert tuple(to.shape) == tuple(eo.shape)
    np.testing.assert_allclose(_np(eo), _np(to), rtol=rtol, atol=atol, equal_nan=True)
    if not any(floats):
        return
    cot = RNG.standard_normal(tuple(to.shape))
    tg = torch.autograd.grad((to * torch.tensor(cot)).sum(),
                             [t for t, f in zip(ts, floats, strict=True) if f],
                             allow_unused=True)
    grads = (eo * ember.tensor(cot)).sum().backward()
    for t, e, want in zip([t for t, f in zip(ts, floats, strict=True) if f],
                          [e for e, f in zip(es, floats, strict=True) if f], tg, strict=True):
        if want is None:  # an input the output does not depend on
            assert e not in grads
            continue
        assert tuple(t.shape) == tuple(grads[e].shape)
        np.testing.assert_allclose(grads[e].numpy(), want.numpy(), rtol=rtol, atol=atol,
                                   equal_nan=True)


def raises_like_torch(fn: Callable[[Any], Any], exc: type[BaseException], match: str) -> None:
    """``fn(lib)`` raises ``exc`` (whose message matches) in torch and in ember alike."""
    with pytest.raises(exc, match=match):
        fn(torch)
    with pytest.raises(exc, match=match):
        fn(ember)


def x34() -> np.ndarray:
    return RNG.standard_normal((3, 4))


# -- dim spelled axis, 0-d tensors ---------------------------------------------------------------

@pytest.mark.parametrize("name", ["sum", "mean", "var", "std", "amax", "amin", "prod", "any",
                                  "all"])
def test_axis_spells_dim(name: str) -> None:
    same(lambda lib, x: getattr(x, name)(axis=1), x34(), grad=name not in ("any", "all"))
    same(lambda lib, x: getattr(lib, name)(x, axis=0, keepdim=True), x34(),
         grad=name not in ("any", "all"))


def test_axis_spells_dim_of_max_min_argmax() -> None:
    same(lambda lib, x: x.max(axis=1).values, x34())
    same(lambda lib, x: x.min(axis=0).indices, x34(), grad=False)
    same(lambda lib, x: x.argmax(axis=1), x34(), grad=False)


@pytest.mark.parametrize("fn", [
    lambda lib, x: x.sum(0), lambda lib, x: x.sum(-1), lambda lib, x: x.prod(0),
    lambda lib, x: x.mean(-1, keepdim=True), lambda lib, x: x.softmax(0),
    lambda lib, x: x.log_softmax(-1), lambda lib, x: lib.nn.functional.softmax(x, dim=0),
    lambda lib, x: x.squeeze(0), lambda lib, x: x.squeeze(-1), lambda lib, x: x.amax(0),
    lambda lib, x: x.flip(0), lambda lib, x: x.cumsum(0),
], ids=["sum0", "sum-1", "prod0", "mean-keepdim", "softmax", "log_softmax", "F.softmax",
        "squeeze0", "squeeze-1", "amax", "flip", "cumsum"])
def test_zero_dim_tensors_take_dim_0_and_minus_1(fn: Callable[..., Any]) -> None:
    same(fn, np.asarray(1.7))


def test_zero_dim_dim_1_is_out_of_range() -> None:
    raises_like_torch(lambda lib: lib.tensor(1.0).sum(1), IndexError, "range")


# -- the missing functions -----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["asinh", "acosh", "atanh", "arcsinh", "arccosh", "arctanh"])
def test_inverse_hyperbolic_functions(name: str) -> None:
    if "cosh" in name:
        x = np.array([1.5, 2.0, 10.0, 1e10, 3e30])
    elif "tanh" in name:
        x = np.array([-0.999, -0.5, -1e-8, 0.0, 0.3, 0.9])
    else:
        x = np.array([-1e30, -3.0, -1e-9, 0.0, 0.5, 2.0, 1e9])
    same(lambda lib, t: getattr(lib, name)(t), x, rtol=1e-13)
    same(lambda lib, t: getattr(t, name)(), x.astype(np.float32), rtol=1e-6)
    same(lambda lib, t: getattr(lib, name)(t), np.array([1, 2]), grad=False, rtol=1e-6)


def test_inverse_hyperbolic_edges() -> None:
    edges = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -1.0, 0.5, 2.0])
    for name in ("asinh", "acosh", "atanh"):
        same(lambda lib, t, n=name: getattr(lib, n)(t), edges, grad=False)
        assert (np.signbit(getattr(ember, name)(ember.tensor(edges)).numpy()[3])
                == np.signbit(getattr(torch, name)(torch.tensor(edges)).numpy()[3]))


def test_copysign() -> None:
    a, b = np.array([1.0, -2.0, 0.0, 3.0, -0.5]), np.array([-1.0, 2.0, -3.0, -0.0, 0.0])
    same(lambda lib, x, y: lib.copysign(x, y), a, b)
    same(lambda lib, x, y: x.copysign(y), a, b)
    same(lambda lib, x: lib.copysign(x, -1.0), a)
    same(lambda lib, x: lib.copysign(x, 2), np.array([1, -2, 3]), grad=False)


@pytest.mark.parametrize("mode", ["trunc", "floor", None])
def test_div_rounding_mode(mode: str | None) -> None:
    a = np.array([7.0, -7.0, 7.5, -7.5, 1.0, 0.0])
    b = np.array([2.0, 2.0, -2.0, -2.0, 0.1, 3.0])
    same(lambda lib, x, y: lib.div(x, y, rounding_mode=mode), a, b)
    same(lambda lib, x, y: x.div(y, rounding_mode=mode), a, b)
    ia, ib = np.array([7, -7, 7, -7, 0, 9]), np.array([2, 2, -2, -2, 5, 3])
    same(lambda lib, x, y: lib.div(x, y, rounding_mode=mode), ia, ib, grad=False)
    same(lambda lib, x: lib.div(x, 2, rounding_mode=mode), ia, grad=False)


def test_div_rounding_mode_errors() -> None:
    raises_like_torch(lambda lib: lib.div(lib.tensor([1.0]), 2, rounding_mode="up"),
                      RuntimeError, "rounding_mode")
    raises_like_torch(lambda lib: lib.div(lib.tensor([1]), lib.tensor([0]),
                                          rounding_mode="trunc"),
                      RuntimeError, "ZeroDivisionError")


def test_roll_without_dims_rolls_the_flattened_tensor() -> None:
    same(lambda lib, x: x.roll(5), x34())
    same(lambda lib, x: lib.roll(x, -2), x34())
    same(lambda lib, x: lib.roll(x, (1, -1), (0, 1)), x34())


def test_nested_tuple_indices_index_as_lists() -> None:
    same(lambda lib, x: x[((0,),)], x34())
    same(lambda lib, x: x[((2, 0),)], x34())
    same(lambda lib, x: x[((1,), slice(None, 2))], x34())


@pytest.mark.parametrize("name", ["selu", "softsign", "logsigmoid", "hardsigmoid", "relu6",
                                  "hardswish", "relu", "elu"])
def test_activations_at_their_kinks(name: str) -> None:
    x = np.array([-40.0, -6.0, -3.0, -1.0, -1e-3, 0.0, 1e-3, 0.5, 3.0, 6.0, 8.0, 40.0])
    same(lambda lib, t: getattr(lib.nn.functional, name)(t), x)


def test_activations_pass_nan_and_inf_as_torch() -> None:
    x = np.array([np.nan, np.inf, -np.inf])
    for name in ("selu", "softsign", "logsigmoid", "hardsigmoid", "relu6", "relu"):
        same(lambda lib, t, n=name: getattr(lib.nn.functional, n)(t), x, grad=False)


def test_softmin_function_and_module() -> None:
    same(lambda lib, x: lib.nn.functional.softmin(x, dim=1), x34())
    same(lambda lib, x: lib.nn.Softmin(dim=0)(x), x34())


@pytest.mark.parametrize("variant", ["plain", "masks", "bias_kv-zero_attn", "separate",
                                     "per-head", "unbatched"])
def test_multi_head_attention_forward(variant: str) -> None:
    length, n, e, h, s = 3, 2, 8, 2, 4
    q, k, v = (RNG.standard_normal(shape) for shape in ((length, n, e), (s, n, e), (s, n, e)))
    w, b = RNG.standard_normal((3 * e, e)) * 0.3, RNG.standard_normal(3 * e) * 0.1
    ow, ob = RNG.standard_normal((e, e)) * 0.3, RNG.standard_normal(e) * 0.1
    bk, bv = RNG.standard_normal((1, 1, e)), RNG.standard_normal((1, 1, e))
    am = RNG.standard_normal((length, s))
    kpm = np.array([[False, False, True, False], [False, False, False, False]])
    if variant == "unbatched":
        q, k, v, kpm = q[:, 0], k[:, 0], v[:, 0], kpm[0]

    def fn(lib: Any, q: Any, k: Any, v: Any, w: Any, b: Any, ow: Any, ob: Any, bk: Any,
           bv: Any, am: Any) -> Any:
        kw: dict[str, Any] = {"training": False}
        if variant in ("masks", "bias_kv-zero_attn", "unbatched"):
            kw["attn_mask"] = am
            kw["key_padding_mask"] = lib.tensor(kpm)
        if variant == "separate":
            kw.update(use_separate_proj_weight=True, q_proj_weight=w[:e],
                      k_proj_weight=w[e:2 * e], v_proj_weight=w[2 * e:])
        if variant == "per-head":
            kw["average_attn_weights"] = False
        extra = variant == "bias_kv-zero_attn"
        out, weights = lib.nn.functional.multi_head_attention_forward(
            q, k, v, e, h, None if variant == "separate" else w, b, bk if extra else None,
            bv if extra else None, extra, 0.0, ow, ob, **kw)
        return out.sum() + (weights * weights).sum()  # both outputs reach the gradient

    same(fn, q, k, v, w, b, ow, ob, bk, bv, am)


# -- autograd.grad -------------------------------------------------------------------------------

def test_autograd_grad_of_chosen_inputs_with_create_graph() -> None:
    a = np.array([0.5, -1.0, 2.0])

    def second(lib: Any, x: Any, y: Any) -> Any:
        z = (x ** 3 * y).sum()
        gx, gy = lib.autograd.grad(z, [x, y], create_graph=True)
        (hxx,) = lib.autograd.grad(gx.sum(), x, create_graph=True)
        return gx * 2 + gy + hxx  # first and second derivatives, still differentiable

    same(second, a, np.array([1.5, 0.5, -2.0]))


def test_autograd_grad_outputs_and_several_outputs() -> None:
    def fn(lib: Any, x: Any) -> Any:
        u, w = x * 2, x.sin()
        gu = lib.tensor([1.0, 2.0, 3.0], dtype=x.dtype)
        gw = lib.tensor([0.5, 0.5, -1.0], dtype=x.dtype)
        (g,) = lib.autograd.grad([u, w], [x], grad_outputs=[gu, gw], create_graph=True)
        return g

    same(fn, np.array([0.1, 0.2, 0.3]))


def test_autograd_grad_unused_inputs() -> None:
    for lib in (torch, ember):
        dev = {} if lib is torch else {"device": AD}
        x = lib.tensor([1.0, 2.0], requires_grad=True, **dev)
        y = lib.tensor([3.0], requires_grad=True, **dev)
        with pytest.raises(RuntimeError, match="allow_unused=True"):
            lib.autograd.grad((x * 2).sum(), [x, y])
        gx, gy = lib.autograd.grad((x * 2).sum(), [x, y], allow_unused=True)
        assert gy is None and gx.tolist() == [2.0, 2.0]
        gx, gy = lib.autograd.grad((x * 2).sum(), [x, y], materialize_grads=True)
        assert gy.tolist() == [0.0]
        with pytest.raises(RuntimeError, match="scalar outputs"):
            lib.autograd.grad(x * 2, x)


def test_autograd_grad_frees_the_graph_unless_retained() -> None:
    x = ember.tensor([1.0, 2.0], device=AD, requires_grad=True)
    y = (x * x).sum()
    assert ember.autograd.grad(y, x, retain_graph=True)[0].tolist() == [2.0, 4.0]
    assert ember.autograd.grad(y, x)[0].tolist() == [2.0, 4.0]
    with pytest.raises(RuntimeError, match="retain_graph"):
        ember.autograd.grad(y, x)


# -- gradients that differed ---------------------------------------------------------------------

def test_relu_gradient_at_zero_is_zero() -> None:
    same(lambda lib, x: lib.relu(x), np.array([-1.0, 0.0, -0.0, 2.0]))
    same(lambda lib, x: lib.nn.ReLU()(x), np.array([0.0, 1.0]))


@pytest.mark.parametrize("fn", [
    lambda lib, x: 0.0 ** x, lambda lib, x: x ** 0, lambda lib, x: x ** 0.0,
    lambda lib, x: lib.pow(x, x), lambda lib, x: x ** 2.0, lambda lib, x: x ** 0.5,
    lambda lib, x: lib.pow(x, x.detach() * 0.0 + 3.0),
], ids=["0**x", "x**0", "x**0.0", "x**x", "x**2", "x**0.5", "x**tensor3"])
def test_pow_gradient_at_a_zero_base(fn: Callable[..., Any]) -> None:
    same(fn, np.array([0.0, 0.0, 1.0, 2.0]))


def test_pow_gradient_in_both_inputs_at_zero() -> None:
    same(lambda lib, x, y: x ** y, np.array([0.0, 0.0, 0.0, 2.0]), np.array([0.0, 2.0, 0.5, 0.0]))


@pytest.mark.parametrize("name", ["sign", "floor", "ceil", "round", "trunc"])
def test_piecewise_constant_ops_have_zero_gradients(name: str) -> None:
    same(lambda lib, x: getattr(x, name)(), np.array([-1.5, 0.0, 0.4, 2.5]))
    same(lambda lib, x: getattr(x, name)().sum() * x.sum(), np.array([-1.5, 0.0, 0.4]))


@pytest.mark.parametrize("fn", [
    lambda lib, x: x.mean(0), lambda lib, x: x.var(0), lambda lib, x: x.std(0),
    lambda lib, x: x.mean(), lambda lib, x: x.var(1),
], ids=["mean0", "var0", "std0", "mean", "var1"])
def test_empty_reduction_backward_has_the_empty_shape(fn: Callable[..., Any]) -> None:
    same(fn, np.zeros((0, 3)))


def test_var_without_degrees_of_freedom_has_nan_gradients() -> None:
    same(lambda lib, x: x.var(), np.array([2.0]))
    same(lambda lib, x: x.var(correction=2), np.array([2.0]))


# -- errors and dtypes ---------------------------------------------------------------------------

def test_flip_refuses_a_repeated_dim() -> None:
    raises_like_torch(lambda lib: lib.ones(2, 3).flip((0, 0)), RuntimeError,
                      "dim 0 appears multiple times")
    raises_like_torch(lambda lib: lib.ones(2, 3).sum((1, -1)), RuntimeError,
                      "appears multiple times")


def test_integers_to_negative_powers_are_refused() -> None:
    msg = "Integers to negative integer powers are not allowed"
    raises_like_torch(lambda lib: lib.tensor([1, 2]) ** -2, RuntimeError, msg)
    # a tensor of exponents is not checked (PyTorch reads no values): integer results
    same(lambda lib, x, y: x ** y, np.array([1, 2, -1, 3]), np.array([-2, -1, -3, 2]))
    same(lambda lib, x: 2 ** x, np.array([-1, 0, 3]))
    same(lambda lib, x: x ** 2, np.array([1, -2, 3]), grad=False)
    same(lambda lib, x: x ** -2, np.array([1.0, 2.0]))


def test_roll_refuses_misaligned_shifts_and_dims() -> None:
    raises_like_torch(lambda lib: lib.ones(2, 3).roll((1, 1), (0,)), RuntimeError,
                      "shifts and dimensions must align")
    raises_like_torch(lambda lib: lib.ones(2, 3).roll((1, 1)), RuntimeError, "must align")


def test_maximum_and_minimum_of_bools_are_bool() -> None:
    a, b = np.array([True, False, True, False]), np.array([False, False, True, True])
    same(lambda lib, x, y: lib.maximum(x, y), a, b)
    same(lambda lib, x, y: lib.minimum(x, y), a, b)
    same(lambda lib, x, y: x.maximum(y), a, b)


def test_shape_errors_are_runtime_errors_and_still_value_errors() -> None:
    raises_like_torch(lambda lib: lib.ones(2, 3) + lib.ones(3, 2), RuntimeError,
                      "size|broadcast")
    with pytest.raises(ValueError, match=r"\(2, 3\)"):  # what ember code caught so far
        ember.ones(2, 3) + ember.ones(3, 2)
    assert issubclass(ember.ShapeError, RuntimeError) and issubclass(ember.ShapeError,
                                                                     ValueError)
    assert issubclass(ember.DTypeError, RuntimeError) and issubclass(ember.DTypeError,
                                                                     TypeError)
    raises_like_torch(lambda lib: lib.ones(2, 3).sum(5), IndexError, "range")


def test_dim_errors_name_the_op() -> None:
    for fn, op in ((lambda: ember.ones(2, 3).sum(5), "sum"),
                   (lambda: ember.ones(2, 3).softmax(-3), "softmax"),
                   (lambda: ember.cumsum(ember.ones(2, 3), 2), "cumsum"),
                   (lambda: ember.ones(2).unsqueeze(5), "unsqueeze"),
                   (lambda: ember.ones(2, 3).transpose(0, 4), "transpose")):
        with pytest.raises(IndexError, match=rf"^{op}: dim -?\d is out of range for a tensor"):
            fn()


def test_negative_dimensions_are_refused() -> None:
    for make in (lambda lib: lib.zeros(-1, 3), lambda lib: lib.empty(-1),
                 lambda lib: lib.full((2, -2), 1.0), lambda lib: lib.ones(-1)):
        with pytest.raises(RuntimeError, match="negative"):
            make(torch)
        with pytest.raises(RuntimeError, match=r"Trying to create tensor with negative "
                                               r"dimension -[12]: \["):
            make(ember)


@pytest.mark.parametrize(("data", "dtype"), [(-1, "uint8"), ([-255, 3], "uint8"),
                                             (300, "uint8"), ([1, -256], "uint8"),
                                             (-129, "int8"), ([127, -128], "int8"),
                                             ([1.5, 2.9], "uint8"), (-1.5, "uint8"),
                                             (2 ** 31, "int32"), (float("nan"), "int32")])
def test_integer_overflow_on_creation_follows_torch(data: Any, dtype: str) -> None:
    try:
        want = torch.tensor(data, dtype=getattr(torch, dtype))
    except RuntimeError as exc:
        assert "without overflow" in str(exc)
        with pytest.raises(RuntimeError, match=f"cannot be converted to type {dtype} without "
                                               "overflow"):
            ember.tensor(data, dtype=getattr(ember, dtype))
        return
    got = ember.tensor(data, dtype=getattr(ember, dtype))
    assert got.tolist() == want.tolist()


def test_backward_on_a_plain_tensor_says_where_it_exists() -> None:
    with pytest.raises(AttributeError, match=r"autodiff<cpu>.*requires_grad"):
        ember.ones(2, device="cpu").sum().backward()
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        ember.ones(2).nope  # noqa: B018  # the lookup is the test
    assert not hasattr(ember.ones(2), "backward")
    with pytest.raises(AttributeError, match=r"no \.grad"):  # the same form as .grad's
        ember.ones(2).grad  # noqa: B018  # the lookup is the test
    w = ember.ones(2, device=AD, requires_grad=True)
    assert (w * 3).sum().backward()[w].tolist() == [3.0, 3.0]
