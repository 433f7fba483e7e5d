"""A new elementwise op, declared and defined here (its `ember.ops.Op`, its kernel IR
definition and its VJP rule), runs eager, fused and differentiated on every device stack CI
has: no backend file knows it (`ember.backend.ir`)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import ember
from ember.backend import apply, ir
from ember.ops import Op

# softsign(x) = x / (1 + |x|): unary, float-only, a VJP of 1 / (1 + |x|)^2
SOFTSIGN = Op("test_softsign", "elementwise", 1, dtypes="float")
# smooth_max(a, b) = where(a > b, a, b) + log1p(exp(-|a - b|)): binary, shares a subexpression
SMOOTH_MAX = Op("test_smooth_max", "elementwise", 2, dtypes="float")


@ir.define("test_softsign")
def _softsign(xs: list[ir.Value]) -> ir.Value:
    x = xs[0]
    return x / (1.0 + x.call("fabs"))


@ir.define("test_smooth_max")
def _smooth_max(xs: list[ir.Value]) -> ir.Value:
    a, b = xs
    d = a - b
    return ir.where(d.gt(0), a, b) + (-d.call("fabs")).call("exp").call("log1p")


def _softsign_np(x: np.ndarray) -> np.ndarray:
    return x / (1 + np.abs(x))


def _smooth_max_np(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum(a, b) + np.log1p(np.exp(-np.abs(a - b)))


if importlib.util.find_spec("ember_autodiff") is not None:
    from ember_autodiff.rules import rule

    @rule(SOFTSIGN)
    def _softsign_vjp(g, out, x):  # type: ignore[no-untyped-def]  # autodiff's rule signature
        d = 1.0 + x.abs()
        return (g / (d * d),)

    @rule(SMOOTH_MAX)
    def _smooth_max_vjp(g, out, a, b):  # type: ignore[no-untyped-def]
        s = (a - b).sigmoid()  # d/da of the smooth maximum
        return (g * s, g * (1.0 - s))


HARDWARE = ["cpu", "numpyref", "opencl:0", "triton-interpret", "wgpu:0"]
STACKS = [f"{deco}{hw}{close}" for hw in HARDWARE
          for deco, close in (("", ""), ("autodiff<", ">"), ("fusion<", ">"),
                              ("autodiff<fusion<", ">>"))
          if hw != "numpyref" or deco == ""]


def _device(name: str) -> ember.Device:
    try:
        return ember.device(name)
    except (ValueError, ember.DeviceUnavailableError) as exc:  # pragma: no cover - CI has all
        pytest.skip(f"{name}: {exc}")


@pytest.mark.parametrize("stack", STACKS)
def test_new_op_eager_fused_and_differentiated(stack: str) -> None:
    device = _device(stack)
    rng = np.random.default_rng(0)
    # large enough that a fusion device records the chain instead of running it eagerly
    a = rng.standard_normal((3, 50_000)) * 3
    b = rng.standard_normal((1, 50_000)) * 3  # broadcast
    grad = "autodiff" in stack
    x = ember.tensor(a, dtype=ember.float32, device=device, requires_grad=grad)
    y = ember.tensor(b, dtype=ember.float32, device=device, requires_grad=grad)
    s = apply(SOFTSIGN, x * 1.5 + 0.25)
    m = apply(SMOOTH_MAX, s, y)
    out = m * 0.5 - 1.0
    want_s = _softsign_np(a * 1.5 + 0.25)
    np.testing.assert_allclose(out.numpy(), _smooth_max_np(want_s, b) * 0.5 - 1.0,
                               rtol=2e-5, atol=2e-5)
    if "fusion" in stack:
        import ember_fusion

        groups = " ".join(ember_fusion.stats(stack).last_groups)
        assert "test_softsign" in groups and "test_smooth_max" in groups, groups
        ember_fusion.reset_stats(stack)
    if grad:
        grads = out.sum().backward()
        sig = 1 / (1 + np.exp(-(want_s - b)))
        want_gx = 0.5 * sig * 1.5 / (1 + np.abs(a * 1.5 + 0.25)) ** 2
        want_gy = (0.5 * (1 - sig)).sum(axis=0, keepdims=True)
        np.testing.assert_allclose(grads[x].numpy(), want_gx, rtol=2e-4, atol=1e-6)
        np.testing.assert_allclose(grads[y].numpy(), want_gy, rtol=2e-4, atol=1e-3)


def test_ir_reference_semantics_match_numpy() -> None:
    """The IR's own numpy evaluation of the built-in definitions agrees with numpy, edge
    values included: integer floor division and remainder by negatives and MIN / -1, float
    floor division and remainder signs, nan-propagating maximum, integer powers."""
    ints = np.array([-128, -7, -3, 0, 3, 7, 127], np.int8)
    divs = np.array([-1, 2, -2, 3, -3, 1, 5], np.int8)
    with np.errstate(all="ignore"):
        for name, fn in (("floordiv", np.floor_divide), ("remainder", np.remainder)):
            got = ir.evaluate(ir.expand(name, ["int8", "int8"]), [ints, divs])
            np.testing.assert_array_equal(got, fn(ints, divs), err_msg=name)
        f = np.array([1.5, np.nan, -2.0, 5.0, -0.0, 7.0, np.inf], np.float32)
        g = np.array([0.5, 1.0, -3.0, -0.0, 2.0, -np.inf, 2.0], np.float32)
        for name, fn in (("floordiv", np.floor_divide), ("remainder", np.remainder),
                         ("maximum", np.maximum), ("minimum", np.minimum)):
            got = ir.evaluate(ir.expand(name, ["float32", "float32"]), [f, g])
            np.testing.assert_array_equal(np.signbit(got), np.signbit(fn(f, g)), err_msg=name)
            np.testing.assert_array_equal(got, fn(f, g), err_msg=name)
    base = np.array([2, -3, 1, -1, 0, 5], np.int64)
    exp = np.array([10, 3, -4, -3, 0, 0], np.int64)
    got = ir.evaluate(ir.expand("pow", ["int64", "int64"]), [base, exp])
    np.testing.assert_array_equal(got, [1024, -27, 1, -1, 1, 1])


def test_undefined_op_and_bad_types_are_named() -> None:
    with pytest.raises(NotImplementedError, match="no definition of elementwise op 'nope'"):
        ir.expand("nope", ["float32"])
    b = ir.Builder()
    with pytest.raises(TypeError, match="exp of int32"):
        b.input(0, "int32").call("exp")
    with pytest.raises(TypeError, match="add of float32 and int32"):
        b.input(0, "float32") + b.input(1, "int32")
