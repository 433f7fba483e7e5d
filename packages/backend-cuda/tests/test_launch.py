"""CUDA's launch paths checked on the CPU: the compiled launcher (`ember_cuda.claunch`) packs
each argument as ``cuLaunchKernel`` reads it, and cuBLASLt's compiled call passes the problem
as `ember_cuda.cublaslt.LtGemm.run` does, each against a recording stand-in of the driver.
On a GPU machine the real ``cuLaunchKernel`` is handed back to the extension afterwards."""

from __future__ import annotations

import ctypes
import struct
import types
from collections.abc import Iterator
from typing import Any

import pytest

# -- the compiled launcher (`ember_cuda.claunch`), against a recording cuLaunchKernel --------

_CU_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *([ctypes.c_uint] * 7),
                              ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)


class _Compiled:
    """What `make_launch` reads of a Triton ``CompiledKernel``."""

    def __init__(self, function: int, num_warps: int, shared: int) -> None:
        self.function = function
        self.metadata = types.SimpleNamespace(num_warps=num_warps, shared=shared)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """Launches through the compiled extension, each recorded (the parameters read back as the
    driver would: 8 bytes behind each parameter pointer)."""
    from ember_cuda import claunch as _claunch

    mod = _claunch.build()
    if mod is None:
        pytest.skip("no C compiler or Python headers to build the launcher with")
    calls: list[dict[str, Any]] = []

    def fake(f: int, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, shared: int,
             stream: int, params: Any, extra: int) -> int:
        slots = [ctypes.string_at(params[i], 8) for i in range(recorded_params[0])]
        calls.append({"function": f, "grid": (gx, gy, gz), "block": (bx, by, bz),
                      "shared": shared, "stream": stream, "slots": slots, "extra": extra})
        return 0

    recorded_params = [0]
    callback = _CU_LAUNCH(fake)
    mod.set_driver(ctypes.cast(callback, ctypes.c_void_p).value)
    monkeypatch.setattr(_claunch, "load", lambda: mod)
    calls.append({"keep": callback, "nparams": recorded_params})
    yield calls
    try:  # the extension's launches go to the driver again (none where there is no GPU)
        real = ctypes.cast(ctypes.CDLL("libcuda.so.1").cuLaunchKernel, ctypes.c_void_p).value
    except (OSError, AttributeError):
        real = 0
    mod.set_driver(real or 0)


def test_compiled_launcher_packs_each_type_in_its_slot(recorded: list[dict[str, Any]]) -> None:
    from ember_cuda.claunch import make_launch

    sig = ["*fp32", "i32", "constexpr", "i64", "u64", "fp32", "fp64", "i1", "i16", "u8", "u32"]
    entry = make_launch(_Compiled(0xABC0, 8, 4096), sig)
    assert entry is not None
    recorded[0]["nparams"][0] = len(sig) - 1 + 2  # no constexpr slot; two scratch pointers
    raw = [0x7F00_0000_1230, -7, 128, -(2 ** 40), 2 ** 64 - 1, 1e39, 0.1, 1, -300, 255, 2 ** 32 - 1]
    entry((5, 3), 0x5150, raw)
    call = recorded[1]
    assert call["function"] == 0xABC0 and call["grid"] == (5, 3, 1)
    assert call["block"] == (256, 1, 1) and call["shared"] == 4096 and call["stream"] == 0x5150
    assert call["extra"] is None
    want = [struct.pack("<Q", raw[0]), struct.pack("<i4x", -7), struct.pack("<q", -(2 ** 40)),
            struct.pack("<Q", 2 ** 64 - 1), struct.pack("<f4x", float("inf")),  # as C narrows
            struct.pack("<d", 0.1), struct.pack("<b7x", 1), struct.pack("<h6x", -300),
            struct.pack("<B7x", 255), struct.pack("<I4x", 2 ** 32 - 1), bytes(8), bytes(8)]
    assert call["slots"] == want
    entry((9,), 0, [16, 1, 0, 2, 3, 2.5, 1.0, 0, 1, 2, 3])  # a 1-D grid; new values
    assert recorded[2]["grid"] == (9, 1, 1)
    assert recorded[2]["slots"][0] == struct.pack("<Q", 16)
    assert recorded[2]["slots"][4] == struct.pack("<f4x", 2.5)


def test_compiled_launcher_refuses_what_does_not_fit(recorded: list[dict[str, Any]]) -> None:
    from ember_cuda.claunch import make_launch

    entry = make_launch(_Compiled(1, 4, 0), ["*fp16", "i32"])
    assert entry is not None
    with pytest.raises(OverflowError, match="does not fit"):
        entry((1,), 0, [64, 2 ** 31])
    with pytest.raises(TypeError, match="takes 2 arguments, got 1"):
        entry((1,), 0, [64])
    with pytest.raises(TypeError, match="grid"):
        entry((1, 1, 1, 1), 0, [64, 1])
    assert len(recorded) == 1  # nothing reached the driver
    assert make_launch(_Compiled(1, 4, 0), ["*fp16", "fp16"]) is None  # no code: Python path


# -- cuBLASLt's recorded matmul through the same extension, against a recording stand-in -----

_LT_MATMUL = ctypes.CFUNCTYPE(ctypes.c_int, *([ctypes.c_void_p] * 14), ctypes.c_size_t,
                              ctypes.c_void_p)


def test_compiled_cublaslt_call_passes_the_problem_as_run_does() -> None:
    """`LtGemm.compiled_run` hands ``cublasLtMatmul`` what `LtGemm.run` does: cuBLASLt's A
    is our B (and its B our A), C is written in place, the algorithm and workspace as given;
    a status comes back as it is, and `LtLaunch` raises on one."""
    from ember_cuda import claunch as _claunch
    from ember_cuda import cublaslt as _cublaslt
    from ember_cuda.cublas import _ONE_AT, _ZERO_AT
    from ember_cuda.gemm import LtLaunch

    if _claunch.build() is None:
        pytest.skip("no C compiler or Python headers to build the extension with")
    calls: list[tuple[Any, ...]] = []
    status = [0]

    def fake(*args: Any) -> int:
        calls.append(args)
        return status[0]

    callback = _LT_MATMUL(fake)
    lt = object.__new__(_cublaslt.LtGemm)
    lt._lib = types.SimpleNamespace(cublasLtMatmul=callback)
    lt._handle, lt._desc = ctypes.c_void_p(0x1100), ctypes.c_void_p(0x2200)
    lt._a, lt._b, lt._c = ctypes.c_void_p(0xA0), ctypes.c_void_p(0xB0), ctypes.c_void_p(0xC0)
    lt._scal, lt.bias, lt._compiled = "f4", False, {}
    lt.algos = [(ctypes.c_uint64 * 8)(), (ctypes.c_uint64 * 8)()]
    call = lt.compiled_run(1)
    assert call is not None and lt.compiled_run(1) is call  # made once per algorithm
    assert call(0x7000, 0x8000, 0x9000, 0x50, 0x6000) == 0
    assert calls == [(0x1100, 0x2200, _ONE_AT["f4"], 0x9000, 0xA0, 0x8000, 0xB0, _ZERO_AT["f4"],
                      0x7000, 0xC0, 0x7000, 0xC0, ctypes.addressof(lt.algos[1]), 0x6000,
                      _cublaslt.WORKSPACE, 0x50)]
    memory = types.SimpleNamespace(workspace=lambda nbytes: 0x6100)
    launch = LtLaunch(lt, 0, memory)
    launch(None, 0, [0x7000, 0x8000, 0x9000, 0])  # the default stream's handle is 0
    assert calls[-1][3] == 0x9000 and calls[-1][12] == ctypes.addressof(lt.algos[0])
    assert calls[-1][13] == 0x6100 and calls[-1][15] is None
    status[0] = 7
    with pytest.raises(_cublaslt.LtError, match="status 7"):
        launch(None, 0x50, [0x7000, 0x8000, 0x9000, 0])
    # a bias rides in the descriptor, which `run` updates: no compiled call (a problem has a
    # bias or not from its making, so it starts with no calls made)
    lt.bias, lt._compiled = True, {}
    assert lt.compiled_run(0) is None
