# Lambdas with default arguments bind loop variables; mypy cannot infer their types.
# mypy: disable-error-code="misc"
"""Creation functions (full, zeros, ones, arange, linspace, eye, *_like), casts, and random
numbers: shape, dtype, range, reproducibility by seed, and loose statistics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import ember

from ... import _dtype as dt
from ..._host import numpy_dtype
from .._case import Arg, Case, register, rng_for, sample
from ._build import ALL, FLOATS, INTS, NUMBERS, case


def made(cid: str, make: Callable[[Any], Any], expected: Any, dtype: dt.DType,
         needs: tuple[dt.DType, ...] = ()) -> None:
    """A made case: ``make(device)`` must equal the numpy ``expected`` (of ember ``dtype``)."""
    register(Case(id=cid, group="creation", make=make, oracle=lambda: expected, out=dtype,
                  dtypes=(dtype, *needs)))


for _d in ALL:
    n = _d.name
    one = np.ones((), numpy_dtype(_d))
    made(f"zeros-{n}", lambda dev, d=_d: ember.zeros(2, 3, dtype=d, device=dev),
         np.zeros((2, 3)), _d)
    made(f"ones-{n}", lambda dev, d=_d: ember.ones((4,), dtype=d, device=dev), np.ones(4), _d)
    made(f"zeros-empty-{n}", lambda dev, d=_d: ember.zeros(0, 3, dtype=d, device=dev),
         np.zeros((0, 3)), _d)
    made(f"full-scalar-shape-{n}", lambda dev, d=_d: ember.full((), 1, dtype=d, device=dev),
         one, _d)
    made(f"eye-{n}", lambda dev, d=_d: ember.eye(3, dtype=d, device=dev), np.eye(3), _d)
    made(f"eye-rect-{n}", lambda dev, d=_d: ember.eye(2, 4, dtype=d, device=dev),
         np.eye(2, 4), _d)
    made(f"tensor-nested-list-{n}",
         lambda dev, d=_d: ember.tensor([[1, 0], [0, 1]], dtype=d, device=dev),
         np.eye(2), _d)
    for _src in (dt.float32, dt.int64):
        cid = f"like-{_src.name}-to-{n}"
        rng = rng_for(cid)
        x = Arg(np.asarray(sample((2, 3), _src, rng)), "permuted", (), _src)
        case(f"zeros_like-{_src.name}-to-{n}", "creation",
             lambda t, d=_d: ember.zeros_like(t, dtype=d), lambda v: np.zeros(v.shape), [x], _d,
             grad=(), dtypes=(_d,))
        case(f"ones_like-{_src.name}-to-{n}", "creation",
             lambda t, d=_d: ember.ones_like(t, dtype=d), lambda v: np.ones(v.shape), [x], _d,
             grad=(), dtypes=(_d,))
        case(f"full_like-{_src.name}-to-{n}", "creation",
             lambda t, d=_d: ember.full_like(t, 1, dtype=d), lambda v: np.ones(v.shape), [x],
             _d, grad=(), dtypes=(_d,))
    # a cast from every dtype to this one (values every dtype can hold)
    for _src in ALL:
        cid = f"cast-{_src.name}-to-{n}"
        x = Arg(np.asarray(sample((3, 4), _src, rng_for(cid), "small")), "", (), _src)
        case(cid, "creation", lambda t, d=_d: t.to(d),
             lambda v, d=_d: v.astype(bool) if d is dt.bool_ else v.astype(np.float64), [x], _d,
             grad=(0,) if _src.kind == "f" and _d.kind == "f" else (), dtypes=(_d,))

for _d in NUMBERS:
    n = _d.name
    made(f"full-{n}", lambda dev, d=_d: ember.full((2, 2), 3, dtype=d, device=dev),
         np.full((2, 2), 3), _d)
    made(f"arange-{n}", lambda dev, d=_d: ember.arange(5, dtype=d, device=dev), np.arange(5), _d)
    made(f"arange-start-step-{n}", lambda dev, d=_d: ember.arange(1, 11, 3, dtype=d, device=dev),
         np.arange(1, 11, 3), _d)
    made(f"arange-empty-{n}", lambda dev, d=_d: ember.arange(3, 3, dtype=d, device=dev),
         np.arange(3, 3), _d)
    if _d.kind != "u":
        made(f"arange-negative-step-{n}",
             lambda dev, d=_d: ember.arange(4, -3, -2, dtype=d, device=dev),
             np.arange(4, -3, -2), _d)
for _d in FLOATS:
    n = _d.name
    made(f"arange-float-step-{n}", lambda dev, d=_d: ember.arange(0, 1, 0.25, dtype=d, device=dev),
         np.arange(0, 1, 0.25), _d)
    made(f"arange-float-noninteger-stop-{n}",
         lambda dev, d=_d: ember.arange(-1, 1.1, 0.5, dtype=d, device=dev),
         np.array([-1.0, -0.5, 0.0, 0.5, 1.0]), _d)
    made(f"linspace-{n}", lambda dev, d=_d: ember.linspace(-1, 1, 5, dtype=d, device=dev),
         np.linspace(-1, 1, 5), _d)
    made(f"linspace-one-{n}", lambda dev, d=_d: ember.linspace(2, 3, 1, dtype=d, device=dev),
         np.array([2.0]), _d)
    made(f"linspace-zero-{n}", lambda dev, d=_d: ember.linspace(2, 3, 0, dtype=d, device=dev),
         np.zeros(0), _d)
    made(f"full-float-{n}", lambda dev, d=_d: ember.full((3,), 0.5, dtype=d, device=dev),
         np.full(3, 0.5), _d)
    made(f"full-nan-inf-{n}",
         lambda dev, d=_d: ember.cat([ember.full((1,), v, dtype=d, device=dev)
                                      for v in (float("nan"), float("inf"), -float("inf"))]),
         np.array([np.nan, np.inf, -np.inf]), _d)
made("arange-default-dtype-int64", lambda dev: ember.arange(3, device=dev), np.arange(3),
     dt.int64)
made("arange-default-dtype-float32", lambda dev: ember.arange(0.5, 2, device=dev),
     np.array([0.5, 1.5]), dt.float32)
made("linspace-default-dtype-float32", lambda dev: ember.linspace(0, 1, 3, device=dev),
     np.array([0, 0.5, 1]), dt.float32)
made("full-default-dtype-float32", lambda dev: ember.full((2,), 1.5, device=dev),
     np.array([1.5, 1.5]), dt.float32)
made("tensor-python-scalar-is-0d", lambda dev: ember.tensor(2.5, device=dev), np.array(2.5),
     dt.float32)


# -- random numbers ----------------------------------------------------------------------

def _host(t: Any) -> np.ndarray:
    return np.asarray(t.numpy()).astype(np.float64)


def _rand_check(kind: str, d: dt.DType) -> Callable[[Any], None]:
    def make(device: Any, seed: int, shape: tuple[int, ...] = (64, 64)) -> Any:
        g = ember.Generator(seed)
        if kind == "rand":
            return ember.rand(*shape, generator=g, dtype=d, device=device)
        if kind == "randn":
            return ember.randn(*shape, generator=g, dtype=d, device=device)
        lo, hi = (-3, 5) if d.kind != "u" and d.kind != "b" else (0, 2)
        return ember.randint(lo, hi, shape, generator=g, dtype=d, device=device)

    def check(device: Any) -> None:
        a = make(device, 1234)
        assert a.shape == (64, 64) and a.dtype is d and a.device is device, (
            f"{kind}: got shape {a.shape}, dtype {a.dtype}, device {a.device}")
        x = _host(a)
        np.testing.assert_array_equal(x, _host(make(device, 1234)),
                                      err_msg=f"{kind}: same seed, different numbers")
        assert (x != _host(make(device, 99))).any(), f"{kind}: two seeds gave the same numbers"
        g = ember.Generator(5)
        first = _host(ember.rand(8, generator=g, device=device)) if kind == "rand" else None
        if first is not None:
            second = _host(ember.rand(8, generator=g, device=device))
            assert (first != second).any(), "rand: two draws of one generator are equal"
        assert make(device, 3, (0, 2)).shape == (0, 2)
        assert make(device, 3, ()).shape == ()
        if kind == "rand":
            assert x.min() >= 0.0 and x.max() < 1.0, f"rand outside [0, 1): {x.min()}, {x.max()}"
            assert abs(x.mean() - 0.5) < 0.03, f"rand mean {x.mean():.4f}, expected 0.5"
            assert abs(x.std() - (1 / 12) ** 0.5) < 0.03, f"rand std {x.std():.4f}"
        elif kind == "randn":
            assert abs(x.mean()) < 0.06, f"randn mean {x.mean():.4f}, expected 0"
            assert abs(x.std() - 1.0) < 0.06, f"randn std {x.std():.4f}, expected 1"
            assert np.isfinite(x).all()
        else:
            lo, hi = (-3, 5) if d.kind not in "ub" else (0, 2)
            assert x.min() == lo and x.max() == hi - 1, (
                f"randint({lo}, {hi}) gave values in [{x.min()}, {x.max()}]")
            assert set(np.unique(x)) == set(range(lo, hi)), "randint missed some values"
            counts = np.bincount((x - lo).astype(np.int64).ravel())
            assert counts.min() > 0.6 * counts.mean(), f"randint counts uneven: {counts}"
    return check


for _d in FLOATS:
    for _kind in ("rand", "randn"):
        register(Case(id=f"{_kind}-{_d.name}", group="random", check=_rand_check(_kind, _d),
                      dtypes=(_d,)))
for _d in (*INTS, *FLOATS):
    register(Case(id=f"randint-{_d.name}", group="random", check=_rand_check("randint", _d),
                  dtypes=(_d,)))


def _manual_seed_check(device: Any) -> None:
    ember.manual_seed(42)
    a = _host(ember.randn(16, device=device))
    ember.manual_seed(42)
    b = _host(ember.randn(16, device=device))
    np.testing.assert_array_equal(a, b, err_msg="manual_seed(42) twice gave different numbers")


def _generator_state_check(device: Any) -> None:
    g = ember.Generator(11)
    ember.rand(4, generator=g, device=device)
    state = g.get_state()
    a = _host(ember.rand(4, generator=g, device=device))
    g.set_state(state)
    b = _host(ember.rand(4, generator=g, device=device))
    np.testing.assert_array_equal(a, b, err_msg="restoring a generator's state did not resume")


def _like_random_check(device: Any) -> None:
    x = ember.zeros(3, 5, dtype=dt.float64, device=device)
    for f in (ember.rand_like, ember.randn_like):
        r = f(x, generator=ember.Generator(1))
        assert r.shape == (3, 5) and r.dtype is dt.float64 and r.device is device
    r = ember.randint_like(x, 0, 3, generator=ember.Generator(1))
    assert r.shape == (3, 5) and set(np.unique(_host(r))) <= {0.0, 1.0, 2.0}


register(Case(id="manual_seed-reproducible", group="random", check=_manual_seed_check,
              dtypes=(dt.float32,)))
register(Case(id="generator-state-resumes", group="random", check=_generator_state_check,
              dtypes=(dt.float32,)))
register(Case(id="random-like", group="random", check=_like_random_check,
              dtypes=(dt.float64, dt.int64)))
