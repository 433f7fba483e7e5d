"""The fused nn kernels (GELU, attention, LSTM / GRU cells and layers) against float64 numpy
oracles, finite differences, PyTorch, and core's decomposition (the cpu with the kernels taken
out)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import ember
import ember.functional as F
import numpy as np
import pytest
from ember import nn, ops
from ember.nn.attention import attention_weights
from ember_autodiff.testing import check_grads
from scipy.special import erf

from ember_cpu import CpuBackend

K = CpuBackend().kernels
AD = "autodiff<cpu>"
FUSED_OPS = [getattr(ops.composite, n) for n in (
    "gelu", "gelu_backward", "scaled_dot_product_attention",
    "scaled_dot_product_attention_backward", "lstm_cell", "lstm_cell_backward", "gru_cell",
    "gru_cell_backward", "lstm_layer", "lstm_layer_backward", "gru_layer", "gru_layer_backward")]
LAYER_OPS = FUSED_OPS[-4:]


@contextlib.contextmanager
def decomposed(ops: list[ops.Op] = FUSED_OPS) -> Iterator[str]:
    """``autodiff<cpu>`` with the fused kernels (``ops``) taken out of the cpu's table for a
    while: core runs its decompositions, on the same device, as on any device without the
    kernels."""
    table = ember.device("cpu").backend.kernels
    saved = {op: table.pop(op) for op in ops}
    try:
        yield AD
    finally:
        table.update(saved)
FLOATS = ("float32", "float64", "float16", "bfloat16")
TOL = {"float64": (1e-12, 1e-12), "float32": (2e-6, 2e-6), "float16": (2e-3, 2e-3),
       "bfloat16": (2e-2, 2e-2)}


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _close(got: ember.Tensor | np.ndarray, want: np.ndarray, dtype: str, scale: float = 1.0
           ) -> None:
    """``got`` (any dtype) against a float64 oracle, within ``dtype``'s tolerance."""
    rtol, atol = TOL[dtype]
    g = got.numpy() if isinstance(got, ember.Tensor) else got
    np.testing.assert_allclose(np.asarray(g, dtype=np.float64), want, rtol=rtol * scale,
                               atol=atol * scale)


def _as(a: np.ndarray, dtype: str, device: str = "cpu", grad: bool = False) -> ember.Tensor:
    t = ember.tensor(a, dtype=getattr(ember, dtype), device=device)
    return t.requires_grad_(True) if grad else t


def _rounded(a: np.ndarray, dtype: str) -> np.ndarray:
    """``a`` rounded to ``dtype`` and back to float64: what the kernel really receives."""
    return ember.tensor(a, dtype=getattr(ember, dtype)).numpy().astype(np.float64)


# -- GELU ---------------------------------------------------------------------------------------

_K = math.sqrt(2 / math.pi)


def gelu_oracle(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(_K * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def gelu_grad_oracle(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        t = np.tanh(_K * (x + 0.044715 * x ** 3))
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _K * (1 + 3 * 0.044715 * x * x)
    return 0.5 * (1 + erf(x / math.sqrt(2))) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_gelu_kernel_and_its_gradient_match_the_float64_oracle(dtype: str,
                                                               approximate: str) -> None:
    x = _rounded(_rng().standard_normal((7, 33)) * 3, dtype)
    g = _rounded(_rng(1).standard_normal((7, 33)), dtype)
    y = K[ops.composite.gelu](_as(x, dtype).payload, approximate=approximate)
    assert y.dtype == _as(x, dtype).payload.dtype
    _close(y, gelu_oracle(x, approximate), dtype, 4)
    dx = K[ops.composite.gelu_backward](_as(g, dtype).payload, _as(x, dtype).payload, y,
                                        approximate=approximate)
    _close(dx, g * gelu_grad_oracle(x, approximate), dtype, 8)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_gradients_match_finite_differences(approximate: str) -> None:
    x = _rng().standard_normal((3, 4)) * 2
    assert ember.device(AD).implements(ops.composite.gelu)
    check_grads(lambda t: F.gelu(t, approximate), [x])


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_gelu_kernel_path_agrees_with_the_decomposition(dtype: str, approximate: str) -> None:
    x = _rng(2).standard_normal((5, 16)) * 3
    w = _rng(3).standard_normal((5, 16))
    def run(device: str) -> tuple[np.ndarray, np.ndarray]:
        xt = _as(x, dtype, device, grad=True)
        y = F.gelu(xt, approximate)
        grads = (y * _as(w, dtype, device)).sum().backward()
        return y.numpy().astype(np.float64), grads[xt].numpy().astype(np.float64)

    res = [run(AD)]
    with decomposed() as device:
        assert not ember.device(device).implements(ops.composite.gelu)
        res.append(run(device))
    rtol, atol = TOL[dtype]
    for a, b in zip(res[0], res[1], strict=True):
        np.testing.assert_allclose(a, b, rtol=8 * rtol, atol=8 * atol)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_gradients_match_pytorch(approximate: str) -> None:
    torch = pytest.importorskip("torch")
    x = _rng(4).standard_normal((6, 10)).astype(np.float32) * 3
    w = _rng(5).standard_normal((6, 10)).astype(np.float32)
    xt = ember.tensor(x, device=AD, requires_grad=True)
    y = nn.GELU(approximate)(xt)
    grads = (y * ember.tensor(w, device=AD)).sum().backward()
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.nn.functional.gelu(tx, approximate=approximate)
    (ty * torch.from_numpy(w)).sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(grads[xt].numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_gelu_rejects_an_unknown_approximation_by_name() -> None:
    with pytest.raises(ValueError, match="gelu: approximate must be"):
        F.gelu(ember.ones(2), "sigmoid")
    with pytest.raises(ValueError, match="gelu: approximate must be"):
        K[ops.composite.gelu](np.ones(2), approximate="sigmoid")
    with pytest.raises(ValueError, match=r"gelu_backward: g \(3,\)"):
        K[ops.composite.gelu_backward](np.ones(3), np.ones(2), np.ones(2))
    x = ember.tensor([0.0, -1.5, 2.0], dtype=ember.float64)
    np.testing.assert_allclose(F.gelu_backward(ember.ones(3, dtype=ember.float64), x).numpy(),
                               gelu_grad_oracle(x.numpy(), "none"), rtol=1e-14)


# -- scaled-dot-product attention ---------------------------------------------------------------

SDPA = ops.composite.scaled_dot_product_attention


def sdpa_oracle(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None,
                causal: bool, scale: float | None = None) -> np.ndarray:
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def _sdpa_inputs(kind: str, seed: int = 0, shape: tuple[int, ...] = (2, 3, 5, 4),
                 source: int = 6) -> tuple[np.ndarray, ...]:
    rng = _rng(seed)
    q = rng.standard_normal(shape)
    k = rng.standard_normal((*shape[:-2], source, shape[-1]))
    v = rng.standard_normal((*shape[:-2], source, shape[-1] + 1))
    if kind == "bool":  # broadcast over the batch, never a whole row masked
        m = rng.random((shape[-2], source)) < 0.6
        m[:, 0] = True
        return q, k, v, m
    if kind == "additive":  # broadcast over the queries
        return q, k, v, rng.standard_normal((shape[-3], 1, source))
    return q, k, v


SDPA_KINDS = ["plain", "causal", "bool", "additive"]


def _sdpa(kind: str, scale: float | None = None):
    def run(q, k, v, m=None):
        return nn.functional.scaled_dot_product_attention(q, k, v, m, is_causal=kind == "causal",
                                                          scale=scale)
    return run


@pytest.mark.parametrize("kind", SDPA_KINDS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_attention_kernel_matches_the_float64_oracle(dtype: str, kind: str) -> None:
    arrays = [_rounded(a, dtype) if a.dtype != bool else a for a in _sdpa_inputs(kind)]
    q, k, v = arrays[:3]
    m = arrays[3] if len(arrays) > 3 else None
    args = [_as(a, dtype).payload if a.dtype != bool else a for a in arrays]
    out, lse = K[SDPA](*args, scale=0.7, causal=kind == "causal", mask=m is not None)
    assert lse.shape == q.shape[:-1]
    assert lse.dtype == (np.float32 if dtype in ("float16", "bfloat16") else out.dtype)
    _close(out, sdpa_oracle(q, k, v, m, kind == "causal", 0.7), dtype, 8)


@pytest.mark.parametrize("kind", SDPA_KINDS)
def test_attention_gradients_match_finite_differences(kind: str) -> None:
    arrays = _sdpa_inputs(kind, shape=(2, 3, 4), source=5)
    assert ember.device(AD).implements(SDPA)
    if kind == "additive":  # a constant mask: only q, k, v are differentiated
        m = ember.tensor(arrays[3], device=AD)
        check_grads(lambda q, k, v: _sdpa(kind, 0.8)(q, k, v, m), arrays[:3])
    else:
        check_grads(_sdpa(kind, 0.8), arrays)


@pytest.mark.parametrize("kind", SDPA_KINDS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_attention_kernel_path_agrees_with_the_decomposition(dtype: str, kind: str) -> None:
    arrays = _sdpa_inputs(kind, seed=3)
    w = _rng(4).standard_normal((2, 3, 5, 5))
    def run(device: str) -> list[np.ndarray]:
        ts = [_as(a, dtype, device, grad=True) for a in arrays[:3]]
        ms = [ember.tensor(a, device=device) if a.dtype == bool else _as(a, dtype, device)
              for a in arrays[3:]]
        out = _sdpa(kind)(*ts, *ms)
        grads = (out * _as(w, dtype, device)).sum().backward()
        return [out.numpy()] + [grads[t].numpy() for t in ts]

    res = [run(AD)]
    with decomposed() as device:
        assert not ember.device(device).implements(SDPA)
        res.append(run(device))
    rtol, atol = TOL[dtype]
    for a, b in zip(res[0], res[1], strict=True):
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=20 * rtol,
                                   atol=20 * atol)


@pytest.mark.parametrize("kind", SDPA_KINDS)
def test_attention_values_and_gradients_match_pytorch(kind: str) -> None:
    torch = pytest.importorskip("torch")
    arrays = [a.astype(np.float32) if a.dtype != bool else a
              for a in _sdpa_inputs(kind, seed=5, shape=(2, 2, 7, 8), source=7)]
    w = _rng(6).standard_normal((2, 2, 7, 9)).astype(np.float32)
    ts = [ember.tensor(a, device=AD, requires_grad=True) for a in arrays[:3]]
    ms = [ember.tensor(a, device=AD) for a in arrays[3:]]
    out = _sdpa(kind)(*ts, *ms)
    grads = (out * ember.tensor(w, device=AD)).sum().backward()
    tts = [torch.tensor(a, requires_grad=True) for a in arrays[:3]]
    tout = torch.nn.functional.scaled_dot_product_attention(
        *tts, *[torch.from_numpy(a) for a in arrays[3:]], is_causal=kind == "causal")
    (tout * torch.from_numpy(w)).sum().backward()
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-6)
    for t, tt in zip(ts, tts, strict=True):
        np.testing.assert_allclose(grads[t].numpy(), tt.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_attention_with_dropout_runs_the_decomposition_with_the_generator() -> None:
    q, k, v = (ember.tensor(a.astype(np.float32)) for a in _sdpa_inputs("plain"))
    a = nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.5,
                                                   generator=ember.Generator(3))
    b, _ = attention_weights(q, k, v, dropout_p=0.5, generator=ember.Generator(3))
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    plain = nn.functional.scaled_dot_product_attention(q, k, v)
    assert not np.allclose(a.numpy(), plain.numpy())


def test_attention_mask_that_needs_a_gradient_gets_it_through_the_decomposition() -> None:
    q, k, v, m = (ember.tensor(a, device=AD, requires_grad=True)
                  for a in _sdpa_inputs("additive"))
    grads = nn.functional.scaled_dot_product_attention(q, k, v, m).sum().backward()
    assert m in grads and grads[m].shape == m.shape


def test_attention_kernel_rejects_mismatched_inputs_naming_shapes() -> None:
    q, k, v = (a.astype(np.float32) for a in _sdpa_inputs("plain"))
    with pytest.raises(ValueError, match=r"scaled_dot_product_attention: .*\(2, 3, 5, 4\)"):
        K[SDPA](q, k[..., :3], v, scale=1.0)
    with pytest.raises(ValueError, match="float64"):
        K[SDPA](q, k.astype(np.float64), v, scale=1.0)
    with pytest.raises(ValueError, match="broadcasting"):
        K[SDPA](q, k, v, np.ones((4, 6), bool), scale=1.0, mask=True)


# -- LSTM and GRU cells -------------------------------------------------------------------------

LSTM_CELL, GRU_CELL = ops.composite.lstm_cell, ops.composite.gru_cell


def _sig(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def lstm_oracle(x: np.ndarray, h: np.ndarray, c: np.ndarray, w_ih: np.ndarray,
                w_hh: np.ndarray, b_ih: np.ndarray, b_hh: np.ndarray) -> np.ndarray:
    """Every step's ``h`` of one LSTM layer over ``x[T, N, in]``, from the equations."""
    ys = []
    for xt in x:
        i, f, g, o = np.split(xt @ w_ih.T + b_ih + h @ w_hh.T + b_hh, 4, -1)
        c = _sig(f) * c + _sig(i) * np.tanh(g)
        h = _sig(o) * np.tanh(c)
        ys.append(h)
    return np.stack(ys)


def gru_oracle(x: np.ndarray, h: np.ndarray, w_ih: np.ndarray, w_hh: np.ndarray,
               b_ih: np.ndarray, b_hh: np.ndarray) -> np.ndarray:
    ys = []
    for xt in x:
        xr, xz, xn = np.split(xt @ w_ih.T + b_ih, 3, -1)
        hr, hz, hn = np.split(h @ w_hh.T + b_hh, 3, -1)
        r, z = _sig(xr + hr), _sig(xz + hz)
        n = np.tanh(xn + r * hn)
        h = (1 - z) * n + z * h
        ys.append(h)
    return np.stack(ys)


def _rnn_arrays(gates: int, hidden: int = 3, steps: int = 4, batch: int = 2, inputs: int = 2,
                seed: int = 0) -> list[np.ndarray]:
    rng = _rng(seed)
    return [rng.standard_normal(s) * 0.8 for s in
            ((steps, batch, inputs), (batch, hidden), (batch, hidden), (gates * hidden, inputs),
             (gates * hidden, hidden), (gates * hidden,), (gates * hidden,))]


@pytest.mark.parametrize("dtype", FLOATS)
def test_lstm_cell_kernel_steps_match_the_float64_oracle(dtype: str) -> None:
    x, h, c, w_ih, w_hh, b_ih, b_hh = (_rounded(a, dtype) for a in _rnn_arrays(4))
    hc = _as(np.concatenate([h, c], -1), dtype).payload
    w, b = _as(w_hh, dtype).payload, _as(b_hh, dtype).payload
    ys = []
    for xt in x:
        gx = _as(_rounded(xt @ w_ih.T + b_ih, dtype), dtype).payload
        hc, gates = K[LSTM_CELL](gx, hc, w, b, bias=True)
        assert hc.dtype == gx.dtype and gates.shape == gx.shape
        ys.append(hc[:, :3].astype(np.float64))
    _close(np.stack(ys), lstm_oracle(x, h, c, w_ih, w_hh, b_ih, b_hh), dtype, 20)


@pytest.mark.parametrize("dtype", FLOATS)
def test_gru_cell_kernel_steps_match_the_float64_oracle(dtype: str) -> None:
    x, h, _, w_ih, w_hh, b_ih, b_hh = (_rounded(a, dtype) for a in _rnn_arrays(3))
    ht = _as(h, dtype).payload
    w, b = _as(w_hh, dtype).payload, _as(b_hh, dtype).payload
    ys = []
    for xt in x:
        ht, work = K[GRU_CELL](_as(_rounded(xt @ w_ih.T + b_ih, dtype), dtype).payload, ht, w, b,
                               bias=True)
        assert ht.dtype == w.dtype and work.shape == (2, 12)
        ys.append(ht.astype(np.float64))
    _close(np.stack(ys), gru_oracle(x, h, w_ih, w_hh, b_ih, b_hh), dtype, 20)


def _layer(kind: str, bias: bool = True, bidirectional: bool = False, device: str = AD,
           dtype: str = "float64") -> nn.Module:
    cls = nn.LSTM if kind == "lstm" else nn.GRU
    return cls(2, 3, bias=bias, bidirectional=bidirectional, generator=ember.Generator(1),
               dtype=getattr(ember, dtype)).to(device)


def _layer_fn(kind: str, bias: bool):
    """The layer as a function of its input, initial states and weights (for check_grads)."""
    def run(x, h, c, w_ih, w_hh, *b):
        m = _layer(kind, bias)
        for name, t in zip(("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"),
                           (w_ih, w_hh, *b), strict=False):
            setattr(m, name, nn.Parameter(t))
        if kind == "lstm":
            out, (hn, cn) = m(x, (h.unsqueeze(0), c.unsqueeze(0)))
            return out, hn, cn
        out, hn = m(x, h.unsqueeze(0))
        return out, hn
    return run


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_recurrent_layer_gradients_match_finite_differences(kind: str, bias: bool) -> None:
    arrays = _rnn_arrays(4 if kind == "lstm" else 3, steps=3)
    assert ember.device(AD).implements(LSTM_CELL if kind == "lstm" else GRU_CELL)
    check_grads(_layer_fn(kind, bias), arrays if bias else arrays[:5])


def _run_layer(m: nn.Module, kind: str, x: np.ndarray, w: np.ndarray, dtype: str,
               device: str) -> list[np.ndarray]:
    xt = _as(x, dtype, device, grad=True)
    out = m(xt)[0]
    grads = (out * _as(w, dtype, device)).sum().backward()
    return [out.numpy()] + [grads[xt].numpy()] + [grads[p].numpy() for p in m.parameters()]


@pytest.mark.parametrize("path", ["cells", "decomposition"])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_recurrent_kernel_path_agrees_with_the_decomposition(dtype: str, kind: str,
                                                             bidirectional: bool,
                                                             path: str) -> None:
    """The layer kernels against the cell kernels a step (layer ops taken out) and against
    the primitives (every kernel taken out)."""
    x = _rng(7).standard_normal((5, 2, 2))
    w = _rng(8).standard_normal((5, 2, 6 if bidirectional else 3))
    assert ember.device(AD).implements(LAYER_OPS[0 if kind == "lstm" else 2])
    res = [_run_layer(_layer(kind, True, bidirectional, AD, dtype), kind, x, w, dtype, AD)]
    with decomposed(LAYER_OPS if path == "cells" else FUSED_OPS) as device:
        assert not ember.device(device).implements(LAYER_OPS[0])
        assert ember.device(device).implements(LSTM_CELL) == (path == "cells")
        res.append(_run_layer(_layer(kind, True, bidirectional, device, dtype), kind, x, w,
                              dtype, device))
    rtol, atol = TOL[dtype]
    for a, b in zip(res[0], res[1], strict=True):
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=50 * rtol,
                                   atol=50 * atol)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_layer_backward_without_its_kernel_runs_the_cells_backward(kind: str, bias: bool,
                                                                   reverse: bool) -> None:
    """`F.lstm_layer_backward` / ``gru_layer_backward`` on a device without the layer's
    backward kernel (numpyref: the cells' decompositions) against the cpu kernel."""
    gates, width = (4, 2) if kind == "lstm" else (3, 1)
    layer, backward = ((ops.composite.lstm_layer, F.lstm_layer_backward) if kind == "lstm"
                       else (ops.composite.gru_layer, F.gru_layer_backward))
    rng = _rng(11)
    gx, state, w_hh, b_hh, g = (rng.standard_normal(s) * 0.8 for s in (
        (5, 2, gates * 3), (2, width * 3), (gates * 3, 3), (gates * 3,), (5, 2, width * 3)))
    states, saved = K[layer](gx, state, w_hh, *((b_hh,) if bias else ()), bias=bias,
                             reverse=reverse)
    want = K[ops.composite.lstm_layer_backward if kind == "lstm"
             else ops.composite.gru_layer_backward](g, state, w_hh, states, saved, bias=bias,
                                                    reverse=reverse)
    assert not ember.device("numpyref").implements(ops.composite.lstm_layer_backward)
    got = backward(*(ember.tensor(a, device="numpyref") for a in (g, state, w_hh, states,
                                                                  saved)), bias, reverse)
    assert (got[3] is None) == (not bias)
    for a, b in zip(got, want, strict=True):
        if a is not None:
            np.testing.assert_allclose(a.numpy(), b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_recurrent_layer_backward_under_create_graph_is_the_cells(kind: str) -> None:
    """Under ``create_graph`` the layer op's backward runs step by step through the cells'
    backward decompositions (the autodiff device has no kernel for it): first derivatives as
    the primitives', second ones as the cell path's.  (Those differ from the primitives':
    the cells' saved gates are constants to the recorded backward, a known limitation.)"""
    x = _rng(12).standard_normal((4, 2, 2))

    def derivatives(device: str) -> list[np.ndarray]:
        m = _layer(kind, True, True, device)
        xt = _as(x, "float64", device, grad=True)
        g = (m(xt)[0] ** 2).sum().backward(create_graph=True)[xt]
        return [g.numpy(), (g * g).sum().backward()[xt].numpy()]

    res = derivatives(AD)
    with decomposed() as device:
        np.testing.assert_allclose(res[0], derivatives(device)[0], rtol=1e-10, atol=1e-12)
    with decomposed(LAYER_OPS) as device:
        np.testing.assert_allclose(res[1], derivatives(device)[1], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_recurrent_layers_match_pytorch_values_and_gradients(kind: str) -> None:
    torch = pytest.importorskip("torch")
    m = (nn.LSTM if kind == "lstm" else nn.GRU)(4, 5, num_layers=2, bidirectional=True,
                                                generator=ember.Generator(2)).to(AD)
    t = (torch.nn.LSTM if kind == "lstm" else torch.nn.GRU)(4, 5, num_layers=2,
                                                            bidirectional=True)
    t.load_state_dict({k: torch.from_numpy(v.numpy()) for k, v in m.state_dict().items()})
    x = _rng(9).standard_normal((6, 3, 4)).astype(np.float32)
    w = _rng(10).standard_normal((6, 3, 10)).astype(np.float32)
    xt = ember.tensor(x, device=AD, requires_grad=True)
    out = m(xt)[0]
    grads = (out * ember.tensor(w, device=AD)).sum().backward()
    tx = torch.tensor(x, requires_grad=True)
    tout = t(tx)[0]
    (tout * torch.from_numpy(w)).sum().backward()
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grads[xt].numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    for (name, p), tp in zip(m.named_parameters(), t.parameters(), strict=True):
        np.testing.assert_allclose(grads[p].numpy(), tp.grad.numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=name)


def test_recurrent_cell_kernels_reject_mismatched_inputs_naming_shapes() -> None:
    gx, hc, w = np.ones((2, 12)), np.ones((2, 6)), np.ones((12, 3))
    with pytest.raises(ValueError, match=r"lstm_cell: .*\(2, 5\)"):
        K[LSTM_CELL](gx, hc[:, :5], w)
    with pytest.raises(ValueError, match="float32"):
        K[LSTM_CELL](gx, hc, w.astype(np.float32))
    with pytest.raises(ValueError, match=r"gru_cell: .*b_hh\[3H\]"):
        K[GRU_CELL](np.ones((2, 9)), np.ones((2, 3)), np.ones((9, 3)), np.ones(4), bias=True)
