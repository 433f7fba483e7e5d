"""The CPU fusion compiler's blocked path: blocks handed out to two threads, scalars read as
filled blocks, reciprocal as a division; every result bit for bit the cpu backend's."""

from __future__ import annotations

import threading

import ember
import numpy as np
import pytest

from ember_cpu import _fusion_loops, fusion

N = 4096 * 12 + 77  # 13 blocks of 4096: past THREAD_MIN_BLOCKS, a short last block
DEVICE = "fusion<cpu,chunk=4096,threads=2>"


def _edges(n: int, seed: int = 0) -> np.ndarray:
    a = np.random.default_rng(seed).standard_normal(n).astype(np.float32) * 4
    a[:8] = [np.nan, -0.0, 0.0, np.inf, -np.inf, 1e-40, -1e-40, 88.0]
    return a


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    bits = {4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
    # nan payloads aside (conformance treats every nan alike), the very same bits
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(bits), want[~nan].view(bits))


def chain(x: ember.Tensor) -> ember.Tensor:
    v = (x * 1.5 + 0.25).relu() * 0.5 - 1
    return v * v.sigmoid()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_chain_blocked_on_two_threads_is_the_cpu_result(dtype: type) -> None:
    a = _edges(N).astype(dtype)
    want = chain(ember.tensor(a)).numpy()
    for _ in range(3):  # the block buffers are reused from call to call
        _same(chain(ember.tensor(a, device=DEVICE)).numpy(), want)


@pytest.mark.parametrize("op", ["maximum", "minimum", "clamp_min", "clamp_max", "clamp",
                                "reciprocal", "rsqrt"])
def test_scalar_operands_and_division_give_the_cpu_bits(op: str) -> None:
    a = _edges(N, 1)
    b = _edges(N, 2)

    def f(x: ember.Tensor, y: ember.Tensor, s: float) -> ember.Tensor:
        v = x * y + 0.5
        if op == "maximum":
            v = ember.maximum(v, ember.tensor(np.float32(s), device=v.device))
        elif op == "minimum":
            v = ember.minimum(ember.tensor(np.float32(s), device=v.device), v)
        elif op == "clamp_min":
            v = v.clamp(min=s)
        elif op == "clamp_max":
            v = v.clamp(max=s)
        elif op == "clamp":
            v = v.clamp(min=-s, max=s)
        elif op == "reciprocal":
            v = v.reciprocal()
        else:
            v = v.abs().rsqrt()
        return v * 2 - y

    # one compiled kernel, new scalars each call (clamp's bounds are params: -0.0 there
    # differs from the cpu's before this change too, a separate matter)
    scalars = (0.0, 1.25, float("nan")) if op.startswith("clamp") else (0.0, -0.0, 1.25,
                                                                          float("nan"))
    for s in scalars:
        with np.errstate(all="ignore"):  # inf - inf on the cpu (fusion is quiet)
            want = f(ember.tensor(a), ember.tensor(b), s).numpy()
        got = f(ember.tensor(a, device=DEVICE), ember.tensor(b, device=DEVICE), s).numpy()
        _same(got, want)


def test_blocks_go_to_whichever_thread_is_free(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    real = fusion._BlockedKernel._thread_buffers

    def spy(self: fusion._BlockedKernel, fills: list, fast: bool = False) -> tuple[list, list]:
        seen.append(threading.current_thread().name)
        return real(self, fills, fast)

    monkeypatch.setattr(fusion._BlockedKernel, "_thread_buffers", spy)
    a = _edges(4096 * 64)
    want = chain(ember.tensor(a)).numpy()
    for _ in range(5):
        _same(chain(ember.tensor(a, device=DEVICE)).numpy(), want)
    # the caller always takes part; a helper joins when it wakes in time (not asserted:
    # a busy machine may keep it off its core for the whole call)
    assert seen.count("MainThread") == 5
    assert set(seen) <= {"MainThread", "ember-fusion"}


def test_small_groups_run_on_the_caller_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> None:
        raise AssertionError("a small group was handed to helper threads")

    monkeypatch.setattr(fusion._HELPERS, "run", refuse)
    a = _edges(4096 * (fusion.THREAD_MIN_BLOCKS - 1))
    _same(chain(ember.tensor(a, device=DEVICE)).numpy(), chain(ember.tensor(a)).numpy())
    small = _edges(100)
    _same(chain(ember.tensor(small, device="fusion<cpu>")).numpy(),
          chain(ember.tensor(small)).numpy())


def test_an_error_in_a_block_reaches_the_caller() -> None:
    calls: list[int] = []

    def fn(i: int) -> None:
        calls.append(i)
        if i == 5:
            raise ValueError("block 5")

    with pytest.raises(ValueError, match="block 5"):
        fusion._HELPERS.run(fn, 12, 2)
    fusion._HELPERS.run(calls.append, 12, 2)  # the helpers still serve
    assert sorted(calls[-12:]) == list(range(12))


# -- the compiled loops (`_fusion_loops`): IR primitives as numba loops, numpy's functions ------

@pytest.fixture(scope="module")
def loop_cache(tmp_path_factory: pytest.TempPathFactory) -> object:
    # a private cache: the first use compiles (in the background), as in a new installation
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMBER_CACHE_DIR", str(tmp_path_factory.mktemp("ember-cache")))
        yield


@pytest.fixture
def paths(loop_cache: object, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each thread's share of each blocked call ran the compiled loops."""
    seen: list[bool] = []
    real = fusion._BlockedKernel._thread_buffers

    def spy(self: fusion._BlockedKernel, fills: list, fast: bool = False) -> tuple[list, list]:
        seen.append(fast)
        return real(self, fills, fast)

    monkeypatch.setattr(fusion._BlockedKernel, "_thread_buffers", spy)
    return seen


def _fused(f: object, arrays: list[np.ndarray], seen: list[bool], device: str = DEVICE
           ) -> np.ndarray:
    """``f`` on ``device`` once compiled: the second call asks for the loops, the third runs
    them (asserted, so that a test of the loops never passes on numpy's path)."""
    for _ in range(fusion.LOOP_AFTER_CALLS):
        f(*(ember.tensor(a, device=device) for a in arrays)).numpy()  # type: ignore[operator]
    _fusion_loops.wait()
    assert not _fusion_loops.FAILED, _fusion_loops.FAILED
    del seen[:]
    got = f(*(ember.tensor(a, device=device) for a in arrays)).numpy()  # type: ignore[operator]
    assert seen and all(seen), "the compiled loops were not used"
    return got


def _cpu(f: object, arrays: list[np.ndarray]) -> np.ndarray:
    with np.errstate(all="ignore"):
        return f(*(ember.tensor(a) for a in arrays)).numpy()  # type: ignore[operator]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_chain_in_compiled_loops_is_the_cpu_result(dtype: type, paths: list[bool]) -> None:
    a = _edges(4096 * 64 + 5).astype(dtype)  # 16 loop blocks: past THREAD_MIN_BLOCKS
    _same(_fused(chain, [a], paths), _cpu(chain, [a]))
    for _ in range(2):  # again, with the loop buffers reused
        _same(chain(ember.tensor(a, device=DEVICE)).numpy(), _cpu(chain, [a]))


UNARY = ["neg", "abs", "reciprocal", "sigmoid", "rsqrt", "exp", "expm1", "log", "log1p",
         "sqrt", "sin", "cos", "tan", "tanh", "asin", "acos", "atan", "sinh", "cosh", "floor",
         "ceil", "round", "trunc", "isnan", "isinf", "logical_not"]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
          "logical_and", "logical_or", "logical_xor"]


def _case(name: str, s: float) -> object:
    fn = getattr(ember, name)

    def f(x: ember.Tensor, y: ember.Tensor) -> ember.Tensor:
        v = x * y + s
        w = fn(v) if name in UNARY else fn(v, y)
        if w.dtype == ember.bool:
            return ember.where(w, v, x - y)
        return w * y - x

    return f


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", UNARY + BINARY)
def test_each_float_op_in_compiled_loops_gives_the_cpu_bits(name: str, dtype: type,
                                                             paths: list[bool]) -> None:
    a = _edges(N, 3).astype(dtype)
    b = _edges(N, 4).astype(dtype)
    b[:8] = [-0.0, np.nan, 0.0, -np.inf, 1e-40, np.inf, -1e-40, 0.0]  # edges meet edges
    b[8:16] = a[:8]
    for s in (-0.0, 0.5):  # one kernel, scalars as arguments
        f = _case(name, s)
        _same(_fused(f, [a, b], paths), _cpu(f, [a, b]))


INT_OPS = ["add", "sub", "mul", "neg", "abs", "maximum", "minimum", "eq", "lt", "ge",
           "logical_and", "logical_xor", "logical_not", "bitwise_and", "bitwise_or",
           "bitwise_xor", "bitwise_not"]


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64])
@pytest.mark.parametrize("name", INT_OPS)
def test_integer_ops_in_compiled_loops_wrap_as_the_cpu(name: str, dtype: type,
                                                       paths: list[bool]) -> None:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(5)
    a = rng.integers(info.min, info.max, N, dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, N, dtype=dtype, endpoint=True)
    a[:4] = [info.min, info.max, 0, 1]
    b[:4] = [-1 if info.min else 1, info.max, info.min, 0]
    fn = getattr(ember, name)

    def f(x: ember.Tensor, y: ember.Tensor) -> ember.Tensor:
        v = x * y + 3  # wraps: later ops see the wrapped value, as on the cpu
        w = fn(v) if name in ("neg", "abs", "logical_not", "bitwise_not") else fn(v, y)
        if w.dtype == ember.bool:
            return ember.where(w, v, x - y)
        return w * y - x

    _same_ints(_fused(f, [a, b], paths), _cpu(f, [a, b]))


def _same_ints(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_bools_casts_and_where_in_compiled_loops(paths: list[bool]) -> None:
    a = _edges(N, 6)
    b = _edges(N, 7)

    def f(x: ember.Tensor, y: ember.Tensor) -> ember.Tensor:
        big = (x > y) & ~ember.isnan(y) | (x == 0)
        n = big.to(ember.float64) * 2.5 + x.to(ember.float64)  # bool and float32 -> float64
        k = big.to(ember.int32) * 7 - (x < 0).to(ember.int32)
        return ember.where(big ^ (y <= 1), n, k.to(ember.float64) - 0.5).to(ember.float32)

    _same(_fused(f, [a, b], paths), _cpu(f, [a, b]))


def test_scalar_and_one_element_inputs_in_compiled_loops(paths: list[bool]) -> None:
    a = _edges(N, 8)
    one = np.array([-0.0], np.float32)

    def f(x: ember.Tensor, y: ember.Tensor) -> ember.Tensor:
        return ember.maximum(x * 3 - 1, y.reshape(())) * x + y.reshape(())

    _same(_fused(f, [a, one], paths), _cpu(f, [a, one]))


def test_a_row_broadcast_input_keeps_numpys_blocks(paths: list[bool]) -> None:
    """A group of one shape whose input is broadcast along rows (a bias of the last axis) is
    not flat: it gets no loops (they took the bias for a scalar and raised on the third call,
    found by the layer programs of packages/fusion/tests/test_layer_programs.py)."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((130, 67)).astype(np.float32)
    bias = rng.standard_normal(67).astype(np.float32)

    def f(x: ember.Tensor, b: ember.Tensor) -> ember.Tensor:
        return (x - b).clamp(-30, 30).exp().tanh()

    device = "fusion<cpu,eager=0,chunk=16>"
    for _ in range(fusion.LOOP_AFTER_CALLS + 2):
        del paths[:]
        got = f(ember.tensor(a, device=device), ember.tensor(bias, device=device)).numpy()
        _fusion_loops.wait()
        assert paths and not any(paths)
        _same(got, _cpu(f, [a, bias]))


def test_clamp_in_compiled_loops_keeps_numpys_signed_zero_and_nan_rules(paths: list[bool]) -> None:
    a = _edges(N, 9)
    a[8:12] = [0.0, -0.0, 0.0, -0.0]
    cases = ((-0.0, None), (None, -0.0), (0.0, None), (None, 0.5), (0.0, -0.0), (-0.0, 0.0),
             (-0.5, 0.5), (1.0, -1.0), (float("nan"), 1.0), (0.0, float("inf")))
    for i, (lo, hi) in enumerate(cases):
        def f(x: ember.Tensor, lo: float | None = lo, hi: float | None = hi) -> ember.Tensor:
            return (x * 2 + 0.0).clamp(min=lo, max=hi) - x

        # a fresh device string each time: a kernel for 0.0 is not reused for -0.0 (see below)
        dev = f"fusion<cpu,chunk=4096,threads=2,eager={1 + i}>"
        _same(_fused(f, [a], paths, dev), _cpu(f, [a]))


def test_clamp_bound_of_minus_zero_after_plus_zero_gives_the_cpu_bits() -> None:
    a = np.array([0.0, -0.0, 1.0, -1.0] * 4096, np.float32)
    dev = "fusion<cpu,chunk=4096,eager=0>"
    for hi in (0.0, -0.0):
        want = (ember.tensor(a) * 1 + 0).clamp(max=hi).numpy()
        _same((ember.tensor(a, device=dev) * 1 + 0).clamp(max=hi).numpy(), want)


@pytest.mark.parametrize("name", ["sign", "pow", "floordiv", "remainder", "erf", "to_int",
                                  "clamp_int"])
def test_ops_outside_the_loops_run_as_cpu_kernels_between_them(name: str,
                                                                paths: list[bool]) -> None:
    a = _edges(N, 10)
    b = _edges(N, 13)

    def f(x: ember.Tensor, y: ember.Tensor) -> ember.Tensor:
        v = x * 2 + 1
        if name == "sign":  # numpy's sign of -0.0 is +0.0, the IR's -0.0: the cpu kernel runs
            w = ember.sign(v)
        elif name == "erf":
            w = ember.erf(v)
        elif name == "to_int":  # float -> int: numpy's rule for nan and overflow
            w = (v * 1e9).to(ember.int32).to(ember.float32)
        elif name == "clamp_int":
            w = (v * 4).to(ember.int16).clamp(min=-3, max=5).to(ember.float32)
        else:
            w = getattr(ember, name)(v, y - 0.5)
        return w * x - y  # an output computed after it, in a loop

    _same(_fused(f, [a, b], paths), _cpu(f, [a, b]))


def test_a_group_without_enough_arithmetic_keeps_numpy_blocks(paths: list[bool]) -> None:
    a = _edges(N, 14)

    def f(x: ember.Tensor) -> ember.Tensor:
        return ember.exp(ember.sign(ember.tanh(x))) + 1  # one loop primitive: nothing to gain

    x = ember.tensor(a, device=DEVICE)
    for _ in range(fusion.LOOP_AFTER_CALLS):
        f(x).numpy()
    _fusion_loops.wait()
    del paths[:]
    _same(f(x).numpy(), _cpu(f, [a]))
    assert paths and not any(paths)


def test_small_groups_never_compile(paths: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> None:
        raise AssertionError("a group of few blocks asked for compiled loops")

    monkeypatch.setattr(_fusion_loops, "load_soon", refuse)
    monkeypatch.setattr(_fusion_loops, "load", refuse)
    a = _edges(4096 * (fusion.LOOP_MIN_BLOCKS - 1), 11)
    for _ in range(3):
        _same(chain(ember.tensor(a, device=DEVICE)).numpy(), _cpu(chain, [a]))
    assert not any(paths)


def test_a_chain_run_once_never_loads_loops(paths: list[bool],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[object] = []
    monkeypatch.setattr(_fusion_loops, "load_soon", lambda *args: asked.append(args))
    a = _edges(N, 12)

    def f(x: ember.Tensor) -> ember.Tensor:
        return (x * 3 + 2) * x - 7.5  # a chain no other test compiles

    x = ember.tensor(a, device=DEVICE)
    _same(f(x).numpy(), _cpu(f, [a]))
    assert not asked
    _same(f(x).numpy(), _cpu(f, [a]))  # it recurs: now the loops are asked for
    assert len(asked) == 1
