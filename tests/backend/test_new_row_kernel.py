"""A new row kernel, declared and defined here from IR reductions (its `ember.ops.Op` and its
row program), runs on every hardware stack CI has and agrees with numpy in float64: no backend
file knows it (`ember.backend.rows`).  The backends that render row programs (cpu: numba,
triton: Triton, opencl: OpenCL C) adopt it as a kernel of their own; the others run it as
ember ops (checked here too: `rows.as_ember_ops`)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

import ember
from ember.backend import rows
from ember.ops import Op

# softmax(x / temperature) and the row's logsumexp of x / temperature: two outputs, an elem
# one and a row one, from two stages of reductions (the maximum, then the sum of exponentials)
TEMPERED = Op("test_tempered_softmax", "custom", 1, ("temperature",), result="same+stat",
              outputs=2, dtypes="float",
              shape_rule=lambda shapes, params: [shapes[0], shapes[0][:-1]])
# a centred argmax: each row minus its mean, and the index of its largest entry
CENTRED = Op("test_centred_argmax", "custom", 1, (), result="same+index", outputs=2,
             dtypes="float",
             shape_rule=lambda shapes, params: [shapes[0], shapes[0][:-1]])


@rows.define("test_tempered_softmax")
def _tempered(b: rows.RowBuilder, dt: Sequence[str], params: Mapping[str, Any]) -> list[Any]:
    x = b.elem(0, dt[0]) * (1.0 / float(params["temperature"]))
    m = rows.amax(x)
    e = (x - m).call("exp")
    s = rows.sum_(e)
    return [(e / s, dt[0]), (m + s.call("log"), "float32" if dt[0] != "float64" else dt[0])]


@rows.define("test_centred_argmax")
def _centred(b: rows.RowBuilder, dt: Sequence[str], params: Mapping[str, Any]) -> list[Any]:
    x = b.elem(0, dt[0])
    return [(x - rows.mean(x), dt[0]), rows.argmax(x)]


# decorators hand an op they have no rule for to `rows.call`'s ember ops: differentiable, fusable
#: a GPU run adds its stacks: EMBER_EXTRA_DEVICES="cuda:0,autodiff<cuda:0>"
EXTRA = [d for d in os.environ.get("EMBER_EXTRA_DEVICES", "").split(",") if d]
STACKS = ["cpu", "triton-interpret", "opencl:0", "autodiff<cpu>", "fusion<opencl:0>", *EXTRA]
#: the backends with a row renderer (Triton's: the interpreter, cuda and rocm)
RENDERS = {"cpu", "triton-interpret", "opencl:0",
           *(d for d in EXTRA if d.startswith(("cuda:", "rocm:")))}


def _device(name: str) -> ember.Device:
    try:
        return ember.device(name)
    except (ValueError, ember.DeviceUnavailableError) as exc:  # pragma: no cover - CI has all
        pytest.skip(f"{name}: {exc}")


@pytest.fixture(autouse=True)
def _compile_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cpu's compiled loops load in the background; here, every call runs them."""
    try:
        from ember_cpu import _rows
    except ImportError:  # pragma: no cover - CI has the cpu backend
        return
    monkeypatch.setattr(_rows, "SYNC", True)


@pytest.mark.parametrize("hw", STACKS)
def test_new_row_kernel_runs_everywhere_against_numpy(hw: str) -> None:
    device = _device(hw)
    assert device.implements(TEMPERED) == (hw in RENDERS)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 5, 37)) * 4
    a[1, 2, 7] = -np.inf  # a row with an infinity
    x = ember.tensor(a, dtype=ember.float32, device=device)
    if "autodiff" in hw:  # the gradient of sum(softmax(x / T) * c) through the ember ops
        xg = ember.tensor(a[0], dtype=ember.float32, device=device, requires_grad=True)
        c = rng.standard_normal(a[0].shape)
        yg, _ = rows.call(TEMPERED, xg, temperature=2.5)
        grad = (yg * ember.tensor(c, dtype=ember.float32, device=device)).sum().backward()[xg]
        e = np.exp(a[0] / 2.5 - (a[0] / 2.5).max(-1, keepdims=True))
        sm = e / e.sum(-1, keepdims=True)
        want = sm * (c - (c * sm).sum(-1, keepdims=True)) / 2.5
        np.testing.assert_allclose(grad.numpy(), want, rtol=1e-4, atol=1e-6)
    y, lse = rows.call(TEMPERED, x, temperature=2.5)
    z = a / 2.5
    m = z.max(-1, keepdims=True)
    e = np.exp(z - m)
    np.testing.assert_allclose(y.numpy(), e / e.sum(-1, keepdims=True), rtol=2e-5, atol=1e-7)
    np.testing.assert_allclose(lse.numpy(), (m + np.log(e.sum(-1, keepdims=True)))[..., 0],
                               rtol=2e-6, atol=1e-6)
    assert y.dtype == ember.float32 and tuple(lse.shape) == (3, 5)

    a[0, 1, 3] = a[0, 1, 30] = 50.0  # a tie: the first index wins
    with np.errstate(invalid="ignore"):  # cpu's bare subtract of -inf - -inf (as ember ops)
        c, idx = rows.call(CENTRED, ember.tensor(a, dtype=ember.float32, device=device))
    with np.errstate(invalid="ignore"):  # the row holding -inf: nan, as numpy's
        want = a - a.mean(-1, keepdims=True)
    np.testing.assert_allclose(c.numpy(), want, rtol=1e-5, atol=2e-5)
    np.testing.assert_array_equal(idx.numpy(), a.argmax(-1))
    assert idx.dtype == ember.int64 and idx.numpy()[0, 1] == 3


def test_row_kernel_refuses_inputs_that_do_not_fit() -> None:
    x = ember.tensor(np.zeros((2, 3)), dtype=ember.float32)
    p = rows.expand("layer_norm", ["float32", "float32"],
                    {"eps": 1e-5, "weight": True, "bias": False})
    with pytest.raises(ember.ShapeError, match=r"input 1 \(col\) has shape \(4,\), expected "
                                               r"\(3,\)"):
        rows.geometry(p, [(2, 3), (4,)])
    with pytest.raises(TypeError, match="needs floating-point inputs, got int32"):
        rows.expand("softmax", ["int32"], {})
    del x
