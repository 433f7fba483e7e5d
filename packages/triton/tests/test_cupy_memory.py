"""`CupyMemory`'s per-op allocation on the CPU, with a stand-in for the parts of CuPy it
calls (CI has no GPU): `fresh_array`, the eager path's one-call version, must give the array
`Memory.fresh_array`'s two steps give, and keep its allocation alive."""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import pytest

from ember_triton._array import DeviceArray
from ember_triton._memory import Memory


class _Block:
    """A CuPy ``MemoryPointer`` stand-in: an address and the bytes it holds."""

    next_ptr = 1 << 20

    def __init__(self, nbytes: int) -> None:
        self.ptr = _Block.next_ptr
        self.nbytes = nbytes
        _Block.next_ptr += -(-nbytes // 512) * 512


def _fake_cupy(devices: int, current: list[int], used: list[int]) -> types.ModuleType:
    cupy = types.ModuleType("cupy")
    runtime = types.SimpleNamespace(getDevice=lambda: current[0],
                                    getDeviceCount=lambda: devices, is_hip=False)

    class Device:
        def __init__(self, index: int) -> None:
            self.index = index

        def use(self) -> None:
            used.append(self.index)
            current[0] = self.index

    cupy.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        Device=Device, runtime=runtime, alloc=_Block,
        get_current_stream=lambda: types.SimpleNamespace(ptr=0))
    cupy.get_default_memory_pool = lambda: None  # type: ignore[attr-defined]
    return cupy


@pytest.mark.parametrize("devices", [1, 2])
def test_fresh_array_is_the_two_step_array(monkeypatch: pytest.MonkeyPatch,
                                           devices: int) -> None:
    current, used = [0], []
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(devices, current, used))
    from ember_triton._cupy import CupyMemory

    mem = CupyMemory(1 if devices == 2 else 0)
    shape, dtype, strides = (3, 5), np.dtype(np.float32), (5, 1)
    got = mem.fresh_array(60, shape, dtype, strides)
    want = Memory.fresh_array(mem, 60, shape, dtype, strides)

    def fields(a: DeviceArray) -> tuple[Any, ...]:
        return (a.memory, a.shape, a.dtype, a.strides, a.offset, a.storage.nbytes)

    assert type(got) is DeviceArray
    assert fields(got) == fields(want) == (mem, shape, dtype, strides, 0, 60)
    assert got.ptr == got.storage.ptr and got.ptr != want.ptr  # its own allocation
    assert mem.fresh_array(0, (0,), dtype, (1,)).storage.nbytes == 1  # never a 0-byte block
    # with two GPUs the memory's device is made current first (once: it stays current)
    assert used == ([1] if devices == 2 else [])


class _Pool:
    """A CuPy memory pool stand-in: the bytes of the blocks its ``alloc`` handed out and that
    the test has not freed."""

    def __init__(self) -> None:
        self.used = 0

    def alloc(self, nbytes: int) -> _Block:
        self.used += nbytes
        return _Block(nbytes)

    def used_bytes(self) -> int:
        return self.used


def test_peak_bytes_keeps_the_most_in_use_since_reset_peak(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cupy, pool = _fake_cupy(1, [0], []), _Pool()
    cupy.cuda.alloc = pool.alloc
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    from ember_triton._cupy import CupyMemory

    mem = CupyMemory(0, pool=pool)
    kept = mem.empty((100,), np.dtype(np.float32))  # 400 bytes before the window
    mem.reset_peak()
    assert mem.peak_bytes() == 400
    mem.fresh_array(1000, (250,), np.dtype(np.float32), (1,))  # the eager path's allocation
    mem.allocate(600)
    pool.used -= 1600  # both freed again
    mem.allocate(200)
    assert pool.used == 600 and mem.peak_bytes() == 2000  # the high-water mark stays
    mem.reset_peak()  # a new window starts at what is in use now
    assert mem.peak_bytes() == 600
    mem.empty((50,), np.dtype(np.float32))
    assert mem.peak_bytes() == 800
    # track=False: allocations go straight to CuPy again; only the counts then and now remain
    mem.reset_peak(track=False)
    assert mem._alloc == pool.alloc  # CuPy's allocator itself, no wrapper
    mem.allocate(500)
    pool.used -= 500
    assert mem.peak_bytes() == 800
    assert kept.storage.nbytes == 400
