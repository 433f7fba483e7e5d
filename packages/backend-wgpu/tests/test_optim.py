"""The fused Adam / AdamW kernels (`ember_wgpu.optim`) against PyTorch's formula written out in
numpy float64: each of the four ops over several steps, coupled and decoupled weight decay,
``maximize``, float32 / float16 / bfloat16 and strided views; the errors they raise; and
`ember.optim.Adam` / `AdamW` on ``wgpu:0`` and ``autodiff<wgpu:0>`` (eager and compiled)
taking the fused path, one dispatch per parameter a step, with the numbers of ``cpu``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import ember
from ember.backend import numpy_dtype
from ember.ops import composite as cops
from ember.testing import adam_step

RNG = np.random.default_rng(11)

#: (lr, beta1, beta2, eps): PyTorch's defaults, and values where every one of them moves the
#: result well beyond float32 rounding (a swapped or misplaced scalar shows)
HYPER = {"default": (1e-3, 0.9, 0.999, 1e-8), "loud": (0.05, 0.8, 0.95, 0.1)}
#: weight decay, decoupled (AdamW), maximize
OPTIONS = [(0.0, False, False), (0.1, False, True), (0.2, True, False), (0.2, True, True)]
#: per dtype: (rtol, atol) of one update against the float64 oracle (one rounding of the
#: stored value, plus float32 arithmetic)
TOL = {"float32": (2e-6, 1e-6), "float16": (1e-3, 1e-4), "bfloat16": (8e-3, 1e-3)}


adam_oracle = adam_step  # the float64 oracle of one update


def _dtype(dev: Any, name: str) -> Any:
    dt = getattr(ember, name)
    if not dev.supports(dt):
        pytest.skip(f"{dev} has no {name}")
    return dt


def _up(be: Any, a: np.ndarray, dt: Any) -> Any:
    return be.from_numpy(a.astype(numpy_dtype(dt)), dt)


def _down(be: Any, x: Any, dt: Any) -> np.ndarray:
    return np.asarray(be.to_numpy(x, dt), np.float64)


def _rounded(a: np.ndarray, dt: Any) -> np.ndarray:
    return a.astype(numpy_dtype(dt)).astype(np.float64)


def _run(be: Any, kind: str, state: list[list[Any]], grads: list[Any], t: int,
         hyper: tuple[float, float, float, float], wd: float, decoupled: bool,
         maximize: bool) -> list[tuple[Any, Any, Any]]:
    """One step of the parameters ``state`` (``[p, m, v]`` each) by the kernel of op ``kind``
    (the batched ops take all the parameters at once): ``(p, m, v)`` per parameter."""
    lr, b1, b2, eps = hyper
    options = dict(lr=lr, beta1=b1, beta2=b2, eps=eps, weight_decay=wd, decoupled=decoupled,
                   maximize=maximize)
    host = dict(step_size=lr / (1 - b1 ** t), bias_correction2_sqrt=math.sqrt(1 - b2 ** t))
    count = be.from_numpy(np.asarray(t, np.float32), ember.float32)
    K = be.kernels
    if kind in ("adam_steps", "adam_steps_capturable"):
        arrays = [*(s[0] for s in state), *grads, *(s[1] for s in state),
                  *(s[2] for s in state)]
        if kind == "adam_steps":
            outs = K[cops.adam_steps](*arrays, **options, **host)
        else:
            outs = K[cops.adam_steps_capturable](*arrays, count, **options)
        n = len(state)
        assert len(outs) == 3 * n
        return [(outs[i], outs[n + i], outs[2 * n + i]) for i in range(n)]
    if kind == "adam_step":
        return [K[cops.adam_step](s[0], g, s[1], s[2], **options, **host)
                for s, g in zip(state, grads, strict=True)]
    return [K[cops.adam_step_capturable](s[0], g, s[1], s[2], count, **options)
            for s, g in zip(state, grads, strict=True)]


KINDS = ["adam_step", "adam_steps", "adam_step_capturable", "adam_steps_capturable"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("options", OPTIONS, ids=["plain", "coupled-max", "decoupled",
                                                  "decoupled-max"])
@pytest.mark.parametrize("hyper", list(HYPER), ids=list(HYPER))
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_each_step_matches_the_float64_oracle(wg_device: Any, kind: str,
                                              options: tuple[float, bool, bool], hyper: str,
                                              dtype: str) -> None:
    """Four steps (counts 1 to 4) of three parameters, each step against the oracle applied
    to what the kernel left the step before; the inputs are never written."""
    be, dt = wg_device.backend, _dtype(wg_device, dtype)
    rtol, atol = TOL[dtype]
    shapes = [(3, 5), (7,), ()]
    host = [[_rounded(RNG.standard_normal(s), dt), np.zeros(s), np.zeros(s)] for s in shapes]
    state = [[_up(be, a, dt) for a in trio] for trio in host]
    for t in range(1, 5):
        grads = [_rounded(RNG.standard_normal(s), dt) for s in shapes]
        before = [[_down(be, x, dt) for x in trio] for trio in state]
        outs = _run(be, kind, state, [_up(be, g, dt) for g in grads], t, HYPER[hyper],
                    *options)
        for trio, was, g, out in zip(state, before, grads, outs, strict=True):
            want = adam_oracle(*was[:1], g, *was[1:], t, *HYPER[hyper], *options)
            for x, w in zip(out, want, strict=True):
                assert x.dtype == numpy_dtype(dt) and x.shape == w.shape
                np.testing.assert_allclose(_down(be, x, dt), w, rtol=rtol, atol=atol)
            for x, w in zip(trio, was, strict=True):  # the inputs are left as they were
                np.testing.assert_array_equal(_down(be, x, dt), w)
        state = [list(out) for out in outs]


@pytest.mark.parametrize("kind", KINDS)
def test_float32_steps_follow_the_oracle_over_many_steps(wg_device: Any, kind: str) -> None:
    """Twenty chained steps of AdamW from zero moments, compared with the oracle's own chain
    (the bias corrections at counts far from 1 included)."""
    be = wg_device.backend
    hyper, options = HYPER["loud"], (0.1, True, False)
    p0 = _rounded(RNG.standard_normal((4, 6)), ember.float32)
    want = [p0, np.zeros_like(p0), np.zeros_like(p0)]
    state = [[_up(be, a, ember.float32) for a in want]]
    for t in range(1, 21):
        g = _rounded(RNG.standard_normal(p0.shape), ember.float32)
        state = [list(_run(be, kind, state, [_up(be, g, ember.float32)], t, hyper,
                           *options)[0])]
        want = list(adam_oracle(want[0], g, want[1], want[2], t, *hyper, *options))
    for x, w in zip(state[0], want, strict=True):
        np.testing.assert_allclose(_down(be, x, ember.float32), w, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("capturable", [False, True])
def test_strided_views_and_a_zero_beta(wg_device: Any, capturable: bool) -> None:
    """Transposed and sliced operands (each walked by its own strides), ``beta1 == 0`` (its
    bias correction is 1 at every count) and an empty parameter."""
    be = wg_device.backend
    lr, b1, b2, eps, t = 0.01, 0.0, 0.9, 1e-8, 3
    p, g, v = (_rounded(a, ember.float32) for a in (RNG.standard_normal((6, 4)),
                                                     RNG.standard_normal((6, 4)),
                                                     np.abs(RNG.standard_normal((6, 4)))))
    m = _rounded(RNG.standard_normal((4, 12)), ember.float32)
    # p, g and v: transposes (4, 6) of (6, 4) arrays; m: every other column of a (4, 12)
    # array, from the second
    views = [_up(be, a, ember.float32).view((4, 6), (1, 4), 0) for a in (p, g, v)]
    views.insert(2, _up(be, m, ember.float32).view((4, 6), (12, 2), 1))
    wants = adam_oracle(p.T, g.T, m[:, 1::2], v.T, t, lr, b1, b2, eps, 0.0, False, False)
    options = dict(lr=lr, beta1=b1, beta2=b2, eps=eps, weight_decay=0.0, decoupled=False,
                   maximize=False)
    if capturable:
        count = be.from_numpy(np.asarray([t], np.float32), ember.float32)  # (1,): one number
        outs = be.kernels[cops.adam_step_capturable](*views, count, **options)
    else:
        outs = be.kernels[cops.adam_step](*views, step_size=lr / (1 - b1 ** t),
                                          bias_correction2_sqrt=math.sqrt(1 - b2 ** t),
                                          **options)
    for x, w in zip(outs, wants, strict=True):
        assert x.is_contiguous()
        np.testing.assert_allclose(_down(be, x, ember.float32), w, rtol=2e-6, atol=1e-6)
    empty = [_up(be, np.zeros((0, 3)), ember.float32) for _ in range(4)]
    rt, before = be.runtime, be.runtime.dispatches
    outs = be.kernels[cops.adam_step](*empty, step_size=1.0, bias_correction2_sqrt=1.0,
                                      **options)
    assert [x.shape for x in outs] == [(0, 3)] * 3 and rt.dispatches == before


def test_mismatched_tensors_name_the_op_and_the_shapes(wg_device: Any) -> None:
    be = wg_device.backend
    K = be.kernels
    f32 = [_up(be, np.ones(s), ember.float32) for s in ((2,), (3,), (2,), (2,))]
    options = dict(lr=0.1, beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.0,
                   decoupled=False, maximize=False)
    host = dict(step_size=1.0, bias_correction2_sqrt=0.1)
    count = be.from_numpy(np.asarray(1.0, np.float32), ember.float32)
    shapes = r"\[\(\(2,\), 'float32'\), \(\(3,\), 'float32'\)"
    with pytest.raises(ember.ShapeError, match=r"adam_step: parameter, gradient and moments "
                                               r"must share shape and dtype, got " + shapes):
        K[cops.adam_step](*f32, **options, **host)
    with pytest.raises(ember.ShapeError, match=r"adam_steps: parameter, gradient and moments"):
        K[cops.adam_steps](*f32, **options, **host)
    with pytest.raises(ember.ShapeError, match=r"adam_step_capturable: .*" + shapes):
        K[cops.adam_step_capturable](*f32, count, **options)
    with pytest.raises(ember.ShapeError, match=r"adam_steps_capturable: .*" + shapes):
        K[cops.adam_steps_capturable](*f32, count, **options)
    ok = [f32[0], f32[0], f32[0], f32[0]]
    with pytest.raises(ValueError, match="adam_steps: expected four lists of n tensors, got 3"):
        K[cops.adam_steps](*ok[:3], **options, **host)
    with pytest.raises(ValueError, match="adam_steps_capturable: expected four lists of n "
                                         "tensors and a step count, got 4"):
        K[cops.adam_steps_capturable](*ok, **options)
    two = be.from_numpy(np.asarray([1.0, 2.0], np.float32), ember.float32)
    with pytest.raises(ember.ShapeError, match=r"adam_step_capturable: step must be one "
                                               r"number, got shape \(2,\)"):
        K[cops.adam_step_capturable](*ok, two, **options)
    bf = _up(be, np.ones(2), ember.bfloat16)
    with pytest.raises(ember.ShapeError, match=r"'float32'\), \(\(2,\), 'bfloat16'\)"):
        K[cops.adam_step](f32[0], bf, f32[0], f32[0], **options, **host)
    ints = [be.from_numpy(np.ones(2, np.int32), ember.int32) for _ in range(4)]
    with pytest.raises(ember.DTypeError, match="adam_step: needs a floating-point parameter, "
                                               "got int32"):
        K[cops.adam_step](*ints, **options, **host)


def test_an_adapter_binding_eight_storage_buffers_keeps_only_the_plain_update() -> None:
    """WebGPU's least limit: the capturable kernel (nine bindings) is left to decompose."""
    from types import SimpleNamespace

    from ember_wgpu import optim

    for n, want in ((8, {"adam_step", "adam_steps"}), (7, set()),
                    (10, {"adam_step", "adam_steps", "adam_step_capturable",
                          "adam_steps_capturable"})):
        limits = {"max-storage-buffers-per-shader-stage": n, "max-bindings-per-bind-group": 1000}
        rt: Any = SimpleNamespace(device=SimpleNamespace(limits=limits))
        assert {op.name for op in optim.kernels(rt)} == want


# -- the optimizers ---------------------------------------------------------------------------


def _params(device: str, dtype: Any, n: int) -> list[Any]:
    rng = np.random.default_rng(3)
    return [ember.tensor(rng.standard_normal(s), dtype=dtype, device=device)
            for s in ((4, 3), (3,), (2, 2, 2))[:n]]


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("capturable", [False, True])
@pytest.mark.parametrize(("cls", "options"), [
    (ember.optim.Adam, {}),
    (ember.optim.Adam, {"weight_decay": 0.1, "maximize": True}),
    (ember.optim.AdamW, {"weight_decay": 0.05}),
], ids=["adam", "adam-wd-max", "adamw"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_optimizers_on_wgpu_take_one_dispatch_per_parameter_and_match_cpu(
        wg_device: Any, cls: Any, options: dict[str, Any], capturable: bool, n: int,
        dtype: str) -> None:
    """One parameter takes `adam_step` (or its capturable form), several `adam_steps`."""
    dt = _dtype(wg_device, dtype)
    rt = wg_device.backend.runtime
    ours, ref = _params("wgpu:0", dt, n), _params("cpu", dt, n)
    opts = [cls(ps, lr=0.02, capturable=capturable, **options) for ps in (ours, ref)]
    rng = np.random.default_rng(4)
    counts = []
    for _ in range(4):
        grads = [rng.standard_normal(p.shape) for p in ours]
        before = rt.dispatches
        opts[0].step({p: ember.tensor(g, dtype=dt, device="wgpu:0")
                      for p, g in zip(ours, grads, strict=True)})
        counts.append(rt.dispatches - before)
        opts[1].step({p: ember.tensor(g, dtype=dt) for p, g in zip(ref, grads, strict=True)})
    # after the first step (which makes the moments): one update kernel per parameter, and
    # (capturable) one more adding 1 to the step count the parameters share on the device
    assert counts[1:] == [n + capturable] * 3
    tol = 1e-5 if dtype == "float32" else 2e-3
    for a, b in zip(ours, ref, strict=True):
        np.testing.assert_allclose(a.numpy().astype(np.float64), b.numpy().astype(np.float64),
                                   rtol=tol, atol=tol)
        assert a.dtype == dt


def _model(device: str) -> Any:
    ember.manual_seed(9)
    return ember.nn.Sequential(ember.nn.Linear(6, 8), ember.nn.Tanh(),
                               ember.nn.Linear(8, 3)).to(device)


def _train(device: str, cls: Any, steps: int, compiled: bool = False,
           capturable: bool = False) -> tuple[Any, list[float], Any]:
    rng = np.random.default_rng(8)
    x, y = rng.standard_normal((10, 6)).astype(np.float32), rng.integers(0, 3, 10)
    model = _model(device)
    opt = cls(model.parameters(), lr=0.03, capturable=capturable)

    def step(xb: Any, yb: Any) -> Any:
        loss = ember.nn.functional.cross_entropy(model(xb), yb)
        opt.step(loss.backward())
        return loss

    fn = ember.compile(step) if compiled else step
    losses = [float(fn(ember.tensor(x, device=device), ember.tensor(y, device=device)).item())
              for _ in range(steps)]
    return model, losses, fn


def _calls(dev: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """The calls of the wgpu Adam kernels from now on: per op, the dispatches of each call."""
    seen: dict[str, list[int]] = {}
    table, rt = dev.backend.kernels, dev.backend.runtime
    for op in (cops.adam_step, cops.adam_steps, cops.adam_step_capturable,
               cops.adam_steps_capturable):
        def counted(*args: Any, _kernel: Any = table[op], _name: str = op.name,
                    **params: Any) -> Any:
            before = rt.dispatches
            out = _kernel(*args, **params)
            seen.setdefault(_name, []).append(rt.dispatches - before)
            return out

        monkeypatch.setitem(table, op, counted)
    return seen


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("cls", [ember.optim.Adam, ember.optim.AdamW])
@pytest.mark.parametrize("device", ["autodiff<wgpu:0>", "autodiff<fusion<wgpu:0>>"])
def test_training_on_autodiff_wgpu_matches_cpu_through_the_fused_update(
        wg_device: Any, monkeypatch: pytest.MonkeyPatch, device: str, cls: Any,
        compiled: bool) -> None:
    seen = _calls(wg_device, monkeypatch)
    model, losses, _ = _train(device, cls, 6, compiled)
    ref, ref_losses, _ = _train("autodiff<cpu>", cls, 6)
    # eager: one batched update a step, one dispatch per parameter; compiled: the trace
    # records the capturable update (a replay runs its recorded dispatches, not the kernel)
    n = len(list(model.parameters()))
    if compiled:
        assert list(seen) == ["adam_steps_capturable"]
        assert seen["adam_steps_capturable"][0] == n  # the trace's (a recording's are kept)
    else:
        assert seen == {"adam_steps": [n] * 6}
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-6)
    for a, b in zip(model.parameters(), ref.parameters(), strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5)
    assert losses[-1] < losses[0]


def test_a_compiled_training_step_replays_the_capturable_update(wg_device: Any) -> None:
    """Compiled, AdamW's step records the capturable update; the replays (no kernel code
    runs) give the numbers of the same capturable update run eagerly."""
    from ember_wgpu.replay import ProgramReplay

    model, losses, fn = _train("autodiff<wgpu:0>", ember.optim.AdamW, 8, compiled=True)
    ref, ref_losses, _ = _train("autodiff<wgpu:0>", ember.optim.AdamW, 8, capturable=True)
    (replay,) = [p.runner for p in fn.programs() if isinstance(p.runner, ProgramReplay)]
    assert replay.records == 1 and replay.replays >= 5
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-6)
    for a, b in zip(model.parameters(), ref.parameters(), strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
