"""`ember.autocast`: the dtype each op class runs in, its numbers against a float64 oracle of
inputs rounded to bfloat16 / float16, gradients of float32 parameters, nesting, threads,
devices, the weight-cast cache and the errors."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import ember
from ember import functional as F, nn
from ember.nn import functional as NF

DEVICES = ["cpu", "autodiff<cpu>"]
LOW = [ember.bfloat16, ember.float16]
NP_LOW = {ember.bfloat16: ml_dtypes.bfloat16, ember.float16: np.float16}
#: relative rounding error of one result rounded to the low dtype
ULP = {ember.bfloat16: 2.0 ** -8, ember.float16: 2.0 ** -11}


def _t(a: np.ndarray, device: str, dtype: ember.DType = ember.float32) -> ember.Tensor:
    return ember.tensor(np.asarray(a), dtype=dtype, device=device)


def _round(a: np.ndarray, dtype: ember.DType) -> np.ndarray:
    """What autocast's cast does to a float32 input: round to the low dtype (float64 after)."""
    return np.asarray(a, np.float32).astype(NP_LOW[dtype]).astype(np.float64)


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# -- which dtype each op class runs in ----------------------------------------------------------

def _lower_cases(dev: str) -> dict[str, Callable[[], ember.Tensor]]:
    r = _rng(1)
    a, b = _t(r.standard_normal((4, 6)), dev), _t(r.standard_normal((6, 5)), dev)
    w, bias = _t(r.standard_normal((5, 6)), dev), _t(r.standard_normal(5), dev)
    a3 = _t(r.standard_normal((2, 4, 6)), dev)
    x1, k1 = _t(r.standard_normal((2, 3, 9)), dev), _t(r.standard_normal((4, 3, 3)), dev)
    x2, k2 = _t(r.standard_normal((2, 3, 6, 6)), dev), _t(r.standard_normal((4, 3, 3, 3)), dev)
    kt = _t(r.standard_normal((3, 4, 3, 3)), dev)
    q = _t(r.standard_normal((2, 2, 5, 4)), dev)
    mha = nn.MultiheadAttention(6, 2, batch_first=True).to(dev)
    return {
        "matmul": lambda: a @ b,
        "matmul 1-d": lambda: a @ b[:, 0],
        "bmm": lambda: a3 @ b,
        "linear": lambda: F.linear(a, w, bias),
        "linear 3-d": lambda: F.linear(a3, w, bias),
        "nn.Linear": lambda: nn.Linear(6, 5).to(dev)(a),
        "conv1d": lambda: F.conv1d(x1, k1, _t(np.ones(4), dev)),
        "conv2d": lambda: F.conv2d(x2, k2, _t(np.ones(4), dev), padding=1),
        "conv_transpose2d": lambda: F.conv_transpose2d(x2, kt, _t(np.ones(4), dev)),
        "sdpa": lambda: nn.scaled_dot_product_attention(q, q, q, is_causal=True),
        "sdpa float mask": lambda: nn.scaled_dot_product_attention(
            q, q, q, attn_mask=_t(np.zeros((5, 5)), dev)),
        "MultiheadAttention": lambda: mha(a3, a3, a3, need_weights=False)[0],
    }


def _float32_cases(dev: str, low: ember.DType) -> dict[str, Callable[[], ember.Tensor]]:
    r = _rng(2)
    x = _t(r.standard_normal((4, 6)), dev, low)  # a low-precision activation
    y = _t(r.standard_normal((4, 6)), dev, low)
    p = _t(r.uniform(0.1, 0.9, (4, 6)), dev, low)
    labels = _t(r.integers(0, 6, 4), dev, ember.int64)
    x4 = _t(r.standard_normal((2, 4, 3, 3)), dev, low)
    return {
        "softmax": lambda: x.softmax(-1),
        "log_softmax": lambda: F.log_softmax(x, -1),
        "cross_entropy": lambda: F.cross_entropy(x, labels),
        "cross_entropy probs": lambda: F.cross_entropy(x, p.softmax(-1)),
        "nll_loss": lambda: F.nll_loss(x, labels),
        "mse_loss": lambda: F.mse_loss(x, y),
        "l1_loss": lambda: NF.l1_loss(x, y),
        "smooth_l1_loss": lambda: NF.smooth_l1_loss(x, y),
        "huber_loss": lambda: NF.huber_loss(x, y),
        "bce": lambda: NF.binary_cross_entropy(p, p),
        "bce_with_logits": lambda: NF.binary_cross_entropy_with_logits(x, p),
        "kl_div": lambda: NF.kl_div(x, p),
        "cosine_similarity": lambda: NF.cosine_similarity(x, y),
        "layer_norm": lambda: F.layer_norm(x, (6,), _t(np.ones(6), dev), _t(np.zeros(6), dev)),
        "nn.LayerNorm": lambda: nn.LayerNorm(6).to(dev)(x),
        "rms_norm": lambda: F.rms_norm(x, (6,), _t(np.ones(6), dev)),
        "group_norm": lambda: NF.group_norm(x4, 2, _t(np.ones(4), dev), _t(np.zeros(4), dev)),
        "logsumexp": lambda: x.logsumexp(-1),
        "softplus": lambda: F.softplus(x),
        "sum": lambda: x.sum(),
        "sum dim": lambda: x.sum(0),
        "prod": lambda: x.prod(1),
        "cumsum": lambda: x.cumsum(1),
        "exp": lambda: x.exp(),
        "log": lambda: p.log(),
        "rsqrt": lambda: p.rsqrt(),
        "pow scalar": lambda: x ** 2,
        "pow tensor": lambda: p ** p,
    }


def _keep_cases(dev: str, low: ember.DType) -> dict[str, Callable[[], ember.Tensor]]:
    """Ops not on the lists: they run in their inputs' dtype."""
    r = _rng(3)
    x = _t(r.standard_normal((4, 6)), dev, low)
    x4 = _t(r.standard_normal((3, 4, 2, 2)), dev, low)
    bn = nn.BatchNorm2d(4).to(dev)
    return {
        "relu": lambda: F.relu(x),
        "gelu": lambda: F.gelu(x),
        "tanh": lambda: x.tanh(),
        "sigmoid": lambda: x.sigmoid(),
        "mul": lambda: x * x,
        "mean": lambda: x.mean(-1),
        "amax": lambda: x.amax(-1),
        "sqrt": lambda: x.abs().sqrt(),
        "reshape": lambda: x.reshape(-1),
        "dropout": lambda: F.dropout(x, 0.5),
        "batch_norm train": lambda: bn(x4),
        "batch_norm eval": lambda: bn.eval()(x4),
    }


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("low", LOW, ids=lambda d: d.name)
def test_lower_precision_ops_run_in_the_autocast_dtype(dev: str, low: ember.DType) -> None:
    cases = _lower_cases(dev)
    for name, fn in cases.items():
        assert fn().dtype is ember.float32, f"{name} outside autocast"
        with ember.autocast("cpu", dtype=low):
            assert fn().dtype is low, name


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("low", LOW, ids=lambda d: d.name)
def test_float32_ops_run_in_float32(dev: str, low: ember.DType) -> None:
    for name, fn in _float32_cases(dev, low).items():
        if "norm" not in name.lower():  # norms with float32 weights promote anyway
            assert fn().dtype is low, f"{name} outside autocast"
        with ember.autocast("cpu", dtype=low):
            assert fn().dtype is ember.float32, name


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("low", LOW, ids=lambda d: d.name)
def test_other_ops_keep_their_inputs_dtype(dev: str, low: ember.DType) -> None:
    for name, fn in _keep_cases(dev, low).items():
        with ember.autocast("cpu", dtype=low):
            assert fn().dtype is low, name


@pytest.mark.parametrize("dev", DEVICES)
def test_mixed_inputs_promote_to_the_widest(dev: str) -> None:
    r = _rng(4)
    a, b = _t(r.standard_normal((3, 4)), dev), _t(r.standard_normal((4, 3)), dev)
    with ember.autocast("cpu", dtype=ember.bfloat16):
        h = a @ b  # bfloat16
        assert h.dtype is ember.bfloat16
        f = _t(r.standard_normal((3, 3)), dev)
        assert ember.cat([h, f]).dtype is ember.float32
        assert ember.stack([h, f]).dtype is ember.float32
        assert ember.where(h > 0, h, f).dtype is ember.float32
        assert (h + f).dtype is ember.float32
        assert ember.atan2(h, f).dtype is ember.float32
        assert ember.cat([h, h]).dtype is ember.bfloat16
        half = _t(r.standard_normal((3, 3)), dev, ember.float16)
        assert ember.cat([h, half]).dtype is ember.float32  # bf16 with f16: float32


@pytest.mark.parametrize("dev", DEVICES)
def test_integer_bool_and_float64_are_left_alone(dev: str) -> None:
    r = _rng(5)
    i = _t(r.integers(-3, 3, (3, 3)), dev, ember.int64)
    d = _t(r.standard_normal((3, 3)), dev, ember.float64)
    m = _t(r.standard_normal((3, 3)) > 0, dev, ember.bool_)
    with ember.autocast("cpu", dtype=ember.bfloat16):
        assert (i @ i).dtype is ember.int64
        assert i.sum().dtype is ember.int64
        assert (d @ d).dtype is ember.float64
        assert d.softmax(-1).dtype is ember.float64
        assert F.linear(d, d).dtype is ember.float64
        assert m.logical_not().dtype is ember.bool_
        np.testing.assert_array_equal((i @ i).numpy(), i.numpy() @ i.numpy())


# -- numbers against float64 on rounded inputs --------------------------------------------------

@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("low", LOW, ids=lambda d: d.name)
def test_matmul_linear_conv_numbers(dev: str, low: ember.DType) -> None:
    torch = pytest.importorskip("torch")
    r = _rng(6)
    a, b = r.standard_normal((8, 16)), r.standard_normal((16, 4))
    w, bias = r.standard_normal((4, 16)), r.standard_normal(4)
    x2, k2 = r.standard_normal((2, 3, 5, 5)), r.standard_normal((4, 3, 3, 3))
    tol = {"rtol": 2 * ULP[low], "atol": 2 * ULP[low]}
    with ember.autocast("cpu", dtype=low):
        mm = (_t(a, dev) @ _t(b, dev)).numpy().astype(np.float64)
        lin = F.linear(_t(a, dev), _t(w, dev), _t(bias, dev)).numpy().astype(np.float64)
        conv = F.conv2d(_t(x2, dev), _t(k2, dev), _t(bias, dev), padding=1).numpy()
    ra, rb, rw, rbias = (_round(v, low) for v in (a, b, w, bias))
    np.testing.assert_allclose(mm, ra @ rb, **tol)
    # the bias joins in the low dtype: the product is rounded before the add, as on a GPU
    np.testing.assert_allclose(lin, _round(ra @ rw.T, low) + rbias, **tol)
    oracle = torch.nn.functional.conv2d(
        torch.from_numpy(_round(x2, low)), torch.from_numpy(_round(k2, low)),
        torch.from_numpy(rbias), padding=1).numpy()
    np.testing.assert_allclose(conv.astype(np.float64), oracle, rtol=4 * ULP[low],
                               atol=4 * ULP[low])


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("low", LOW, ids=lambda d: d.name)
def test_float32_ops_compute_in_float32_from_the_low_inputs(dev: str, low: ember.DType) -> None:
    r = _rng(7)
    a, b = r.standard_normal((6, 12)), r.standard_normal((12, 10))
    labels = r.integers(0, 10, 6)
    gamma, beta = r.standard_normal(10), r.standard_normal(10)
    with ember.autocast("cpu", dtype=low):
        h = _t(a, dev) @ _t(b, dev)
        sm = h.softmax(-1).numpy()
        ce = F.cross_entropy(h, _t(labels, dev, ember.int64)).item()
        ln = F.layer_norm(h, (10,), _t(gamma, dev), _t(beta, dev)).numpy()
        total = h.sum().item()
    hr = _round(_round(a, low) @ _round(b, low), low)  # the low-precision product
    e = np.exp(hr - hr.max(-1, keepdims=True))
    np.testing.assert_allclose(sm, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    logp = np.log(e / e.sum(-1, keepdims=True))
    np.testing.assert_allclose(ce, -logp[np.arange(6), labels].mean(), rtol=1e-5)
    mu, var = hr.mean(-1, keepdims=True), hr.var(-1, keepdims=True)
    np.testing.assert_allclose(ln, (hr - mu) / np.sqrt(var + 1e-5) * gamma + beta,
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(total, hr.sum(), rtol=1e-5, atol=1e-4)


def test_sdpa_numbers() -> None:
    r = _rng(8)
    q, k, v = (r.standard_normal((2, 5, 4)) for _ in range(3))
    with ember.autocast("cpu", dtype=ember.bfloat16):
        out = nn.scaled_dot_product_attention(_t(q, "cpu"), _t(k, "cpu"), _t(v, "cpu"))
    assert out.dtype is ember.bfloat16
    rq, rk, rv = (_round(t, ember.bfloat16) for t in (q, k, v))
    s = rq @ rk.transpose(0, 2, 1) / 2.0
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(out.numpy().astype(np.float64), p @ rv, rtol=3e-2, atol=3e-2)


# -- gradients of float32 parameters ------------------------------------------------------------

@pytest.mark.parametrize("low", LOW, ids=lambda d: d.name)
@pytest.mark.parametrize("cache", [True, False])
def test_gradients_of_float32_parameters_are_float32_and_match(low: ember.DType,
                                                                cache: bool) -> None:
    torch = pytest.importorskip("torch")
    dev = "autodiff<cpu>"
    r = _rng(9)
    x, w1, b1 = r.standard_normal((8, 6)), r.standard_normal((5, 6)), r.standard_normal(5)
    w2 = r.standard_normal((3, 5))
    y = r.integers(0, 3, 8)
    W1, B1, W2 = (ember.tensor(v, dtype=ember.float32, device=dev, requires_grad=True)
                  for v in (w1, b1, w2))
    with ember.autocast("cpu", dtype=low, cache_enabled=cache):
        h = F.linear(_t(x, dev), W1, B1).tanh()
        logits = F.linear(h, W2)
        loss = F.cross_entropy(logits, _t(y, dev, ember.int64))
    assert h.dtype is low and logits.dtype is low and loss.dtype is ember.float32
    grads = loss.backward()
    for p in (W1, B1, W2):
        assert grads[p].dtype is ember.float32
    # oracle: float64 through the same roundings (inputs, weights, the low results)
    tl = {ember.bfloat16: torch.bfloat16, ember.float16: torch.float16}[low]

    def rnd(t: Any) -> Any:
        return t.to(tl).to(torch.float64)

    tw1, tb1, tw2 = (torch.tensor(v, dtype=torch.float32).double().requires_grad_()
                     for v in (w1, b1, w2))
    tx = torch.tensor(x, dtype=torch.float32).double()
    th = rnd(rnd(rnd(tx) @ rnd(tw1).T) + rnd(tb1)).tanh()
    tlog = rnd(rnd(th) @ rnd(tw2).T)
    tloss = torch.nn.functional.cross_entropy(tlog, torch.tensor(y))
    tloss.backward()
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=8 * ULP[low])
    for p, tp in ((W1, tw1), (B1, tb1), (W2, tw2)):
        np.testing.assert_allclose(grads[p].numpy(), tp.grad.numpy(), rtol=0.05,
                                   atol=0.05 * float(np.abs(tp.grad.numpy()).max()))


@pytest.mark.parametrize("dev", ["autodiff<cpu>", "autodiff<triton-interpret>"])
@pytest.mark.parametrize("low", LOW, ids=lambda d: d.name)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_reads_half_logits_without_a_float32_copy(
        dev: str, low: ember.DType, reduction: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under autocast, half logits go to the device's fused cross-entropy as they are: the
    loss is float32 (computed in float32 from the half values, label smoothing and ignored
    rows included), the gradient comes back in the logits' dtype, and no float32 copy of the
    logits is made; the numbers are float64's on the same half values."""
    try:
        ember.device(dev)
    except Exception as exc:
        pytest.skip(f"{dev}: {exc}")
    r = _rng(13)
    m, c, s = 9, 37, 0.1
    z = _round(r.standard_normal((m, c)) * 3, low)
    t = r.integers(0, c, m)
    t[4] = -100
    Z = ember.tensor(z, dtype=low, device=dev, requires_grad=True)
    casts = _count_casts(monkeypatch)
    with ember.autocast(ember.device(dev).base.name, dtype=low):
        loss = F.cross_entropy(Z, _t(t, dev, ember.int64), label_smoothing=s,
                               reduction=reduction)
    assert not casts and loss.dtype is ember.float32
    g = loss.backward(ember.ones(loss.shape, device=dev)) if reduction == "none" else \
        loss.backward()
    assert g[Z].dtype is low
    valid = t != -100
    lse = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
    rows = valid * ((1 - s) * (lse - z[np.arange(m), np.where(valid, t, 0)])
                    + s * (lse - z.mean(1)))
    want = {"mean": rows.sum() / valid.sum(), "sum": rows.sum(), "none": rows}[reduction]
    np.testing.assert_allclose(loss.numpy(), want, rtol=1e-5, atol=1e-5)
    onehot = np.zeros((m, c))
    onehot[np.arange(m)[valid], t[valid]] = 1
    d = (np.exp(z - lse[:, None]) - (1 - s) * onehot - s / c) * valid[:, None]
    if reduction == "mean":
        d /= valid.sum()
    got = g[Z].to(dtype=ember.float64).numpy()
    np.testing.assert_allclose(got, d, rtol=2 * ULP[low], atol=2 * ULP[low] * np.abs(d).max())


def test_backward_inside_the_region_gives_float32_gradients() -> None:
    dev = "autodiff<cpu>"
    r = _rng(10)
    w = ember.tensor(r.standard_normal((4, 4)), dtype=ember.float32, device=dev,
                     requires_grad=True)
    x = _t(r.standard_normal((3, 4)), dev)
    with ember.autocast("cpu", dtype=ember.bfloat16):
        grads = (x @ w).pow(2).sum().backward()
    assert grads[w].dtype is ember.float32
    xr, wr = _round(x.numpy(), ember.bfloat16), _round(w.numpy(), ember.bfloat16)
    expect = xr.T @ (2 * _round(xr @ wr, ember.bfloat16))
    np.testing.assert_allclose(grads[w].numpy(), expect, rtol=3e-2, atol=3e-2)


# -- regions: nesting, enabled=False, decorator, threads, devices ---------------------------------

def test_nesting_disable_and_restore() -> None:
    a = ember.ones(2, 2)
    assert not ember.is_autocast_enabled("cpu")
    with ember.autocast("cpu", dtype=ember.bfloat16):
        assert (a @ a).dtype is ember.bfloat16
        with ember.autocast("cpu", enabled=False):
            assert (a @ a).dtype is ember.float32
            assert not ember.is_autocast_enabled("cpu")
            with ember.autocast("cpu", dtype=ember.float16):
                assert (a @ a).dtype is ember.float16
                assert ember.get_autocast_dtype("cpu") is ember.float16
            assert (a @ a).dtype is ember.float32
        assert (a @ a).dtype is ember.bfloat16
        assert ember.is_autocast_enabled("cpu") and ember.is_autocast_enabled()
    assert (a @ a).dtype is ember.float32
    assert not ember.is_autocast_enabled("cpu") and not ember.is_autocast_enabled()
    assert ember.amp.autocast is ember.autocast


def test_decorator_and_reentry() -> None:
    a = ember.ones(2, 2)

    @ember.autocast("cpu", dtype=ember.float16)
    def f() -> ember.Tensor:
        return a @ a

    assert f().dtype is ember.float16 and (a @ a).dtype is ember.float32
    ctx = ember.autocast("cpu")
    with ctx:
        with ctx:
            assert (a @ a).dtype is ember.bfloat16
        assert (a @ a).dtype is ember.bfloat16
    assert (a @ a).dtype is ember.float32
    with pytest.raises(ZeroDivisionError), ember.autocast("cpu"):
        _ = 1 / 0
    assert not ember.is_autocast_enabled("cpu")  # left on an exception too


def test_state_is_per_thread() -> None:
    a = ember.ones(2, 2)
    seen: list[Any] = []
    go, done = threading.Event(), threading.Event()

    def other() -> None:
        go.wait()
        seen.append((a @ a).dtype)
        with ember.autocast("cpu", dtype=ember.float16):
            seen.append((a @ a).dtype)
            done.set()

    t = threading.Thread(target=other)
    t.start()
    with ember.autocast("cpu", dtype=ember.bfloat16):
        go.set()
        done.wait()
        assert (a @ a).dtype is ember.bfloat16
    t.join()
    assert seen == [ember.float32, ember.float16]


def test_other_hardware_leaves_cpu_ops_alone() -> None:
    a = ember.ones(2, 2)
    ad = ember.ones(2, 2, device="autodiff<cpu>")
    for kind in ("cuda", "cuda:0", "opencl", "triton-interpret", "autodiff<fusion<cuda:0>>"):
        with ember.autocast(kind, dtype=ember.bfloat16):
            assert (a @ a).dtype is ember.float32, kind
            assert (ad @ ad).dtype is ember.float32, kind
            assert not ember.is_autocast_enabled("cpu")
    # a device string or Device with decorators means its hardware device
    for kind in ("autodiff<cpu>", ember.device("autodiff<fusion<cpu>>"), "fusion<cpu>"):
        with ember.autocast(kind, dtype=ember.bfloat16):  # type: ignore[arg-type]
            assert (a @ a).dtype is ember.bfloat16
            assert (ad @ ad).dtype is ember.bfloat16
            fz = ember.ones(2, 2, device="fusion<cpu>")
            assert (fz @ fz).softmax(-1).dtype is ember.float32


def test_triton_interpret_small_case() -> None:
    dev = "triton-interpret"
    try:
        ember.device(dev)
    except Exception as exc:
        pytest.skip(f"{dev}: {exc}")
    r = _rng(11)
    a, b = r.standard_normal((16, 16)), r.standard_normal((16, 16))
    with ember.autocast(dev, dtype=ember.bfloat16):
        h = _t(a, dev) @ _t(b, dev)
        s = h.softmax(-1)
        cpu = _t(a, "cpu") @ _t(b, "cpu")  # other hardware: untouched
    assert h.dtype is ember.bfloat16 and s.dtype is ember.float32 and cpu.dtype is ember.float32
    # the same as casting by hand on this device (its bfloat16 dot accumulates with less
    # than float32 precision under the interpreter), and near float64 on rounded inputs
    by_hand = (_t(a, dev).to(dtype=ember.bfloat16) @ _t(b, dev).to(dtype=ember.bfloat16))
    np.testing.assert_array_equal(h.numpy(), by_hand.numpy())
    hr = _round(a, ember.bfloat16) @ _round(b, ember.bfloat16)
    np.testing.assert_allclose(h.numpy().astype(np.float64), hr, rtol=0.05, atol=0.25)
    h64 = h.numpy().astype(np.float64)
    e = np.exp(h64 - h64.max(-1, keepdims=True))
    np.testing.assert_allclose(s.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-5)


# -- the weight-cast cache --------------------------------------------------------------------

def _count_casts(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    from ember.amp import _state

    calls: list[Any] = []
    real = _state._cast

    def counting(a: ember.Tensor, dtype: ember.DType) -> ember.Tensor:
        calls.append(a)
        return real(a, dtype)

    monkeypatch.setattr(_state, "_cast", counting)
    return calls


def test_cache_casts_a_parameter_once_per_region(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_casts(monkeypatch)
    dev = "autodiff<cpu>"
    lin = nn.Linear(4, 4).to(dev)
    x = ember.ones(2, 4, device=dev)
    with ember.autocast("cpu", dtype=ember.bfloat16):
        lin(lin(x))
    weight_casts = [c for c in calls if c is lin.weight]
    assert len(weight_casts) == 1
    calls.clear()
    with ember.autocast("cpu", dtype=ember.bfloat16, cache_enabled=False):
        lin(lin(x))
    assert len([c for c in calls if c is lin.weight]) == 2
    calls.clear()
    with ember.autocast("cpu", dtype=ember.bfloat16), ember.no_grad():
        lin(lin(x))  # not training: no cache (a cast made here would carry no gradient)
    assert len([c for c in calls if c is lin.weight]) == 2


def test_cache_sees_optimizer_steps_and_freed_graphs() -> None:
    """Training steps of two accumulated micro-batches inside one region: the second
    micro-batch's backward() does not trip over the cast the first one freed, and each step
    uses the values the optimizer gave the parameters (bit for bit as without the cache)."""
    dev = "autodiff<cpu>"
    r = _rng(12)
    xs = [_t(r.standard_normal((5, 4)), dev) for _ in range(6)]

    def run(cache: bool) -> list[np.ndarray]:
        ember.manual_seed(0)
        lin = nn.Linear(4, 3).to(dev)
        opt = ember.optim.SGD(lin.parameters(), lr=0.5)
        out = []
        with ember.autocast("cpu", dtype=ember.bfloat16, cache_enabled=cache):
            for x1, x2 in zip(xs[::2], xs[1::2], strict=True):
                g1 = (lin(x1) ** 2).mean().backward()
                g2 = (lin(x2) ** 2).mean().backward()
                opt.step({p: g1[p] + g2[p] for p in lin.parameters()})
                out.append(lin.weight.numpy().copy())
        return out

    cached, plain = run(True), run(False)
    for a, b in zip(cached, plain, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(cached[0], cached[-1])


def test_cache_is_cleared_on_exit() -> None:
    from ember.amp import _state

    lin = nn.Linear(4, 4).to("autodiff<cpu>")
    with ember.autocast("cpu"):
        lin(ember.ones(1, 4, device="autodiff<cpu>"))
        assert _state.STATE.cache
    assert not _state.STATE.cache


# -- errors -----------------------------------------------------------------------------------

def test_errors() -> None:
    with pytest.raises(ember.DTypeError, match=r"bfloat16 or ember\.float16, got float32"):
        ember.autocast("cpu", dtype=ember.float32)
    with pytest.raises(ValueError, match="unknown device type 'cdua'"):
        ember.autocast("cdua")
    with pytest.raises(ValueError, match="'autodiff' is a decorator"):
        ember.autocast("autodiff")
    with pytest.raises(ValueError, match="malformed device_type"):
        ember.autocast("cpu::0")
    with pytest.raises(TypeError, match="device_type must be"):
        ember.autocast(3)  # type: ignore[arg-type]
    try:
        ember.device("numpyref")
    except Exception:
        return
    with pytest.raises(ember.DTypeError, match="numpyref does not support dtype bfloat16; it "
                                               "supports float16"):
        ember.autocast("numpyref", dtype=ember.bfloat16)
    ember.autocast("numpyref", dtype=ember.bfloat16, enabled=False)  # off: nothing to check
    with ember.autocast("numpyref", dtype=ember.float16):
        x = ember.ones(2, 2, device="numpyref")
        assert (x @ x).dtype is ember.float16


def test_policy_table_lists_the_classes() -> None:
    table = ember.amp.policy_table()
    assert table["matmul"] == "lower" and table["linear"] == "lower"
    assert table["softmax"] == "float32" and table["mse_loss"] == "float32"
    assert table["cat"] == "promote"
    assert "relu" not in table and "add" not in table
