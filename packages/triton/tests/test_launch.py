"""The direct-launch path's cache key must separate whatever Triton specialises on."""

from __future__ import annotations

import numpy as np

from ember_triton.backend import launch_key


class _Ptr:
    def __init__(self, addr: int, dtype: str = "float32") -> None:
        self.addr, self.dtype = addr, np.dtype(dtype)

    def data_ptr(self) -> int:
        return self.addr


def test_launch_key_separates_what_triton_specialises_on() -> None:
    k = object()

    def key(*call: object, **meta: object) -> tuple[object, ...]:
        return launch_key(k, list(call), meta)[0]

    assert key(_Ptr(64), 32) == key(_Ptr(128), 32)           # same classes: one compiled kernel
    assert key(_Ptr(64), 32) != key(_Ptr(72), 32)            # 16-byte alignment of a pointer
    assert key(_Ptr(64), 32) != key(_Ptr(64, "float16"), 32)  # pointer dtype
    assert key(_Ptr(64), 1) != key(_Ptr(64), 3)              # 1 is a constant to Triton
    assert key(_Ptr(64), 16) != key(_Ptr(64), 17)            # divisibility by 16
    assert key(_Ptr(64), 2**31 - 16) != key(_Ptr(64), 2**31)  # i32 vs i64
    assert key(_Ptr(64), 2**62) != key(_Ptr(64), 2**63)       # i64 vs u64
    assert key(_Ptr(64), 32) == key(_Ptr(64), 32)             # integers recur by value
    assert key(_Ptr(64), 1.5) == key(_Ptr(64), 2.5)           # floats by type only
    assert key(_Ptr(64), 1.0) != key(_Ptr(64), 1)
    assert key(_Ptr(64), BLOCK=64) != key(_Ptr(64), BLOCK=128)  # constexprs by value
    assert key(_Ptr(64), BLOCK=64, num_warps=4) != key(_Ptr(64), BLOCK=64, num_warps=8)
    assert launch_key(object(), [], {})[0] != launch_key(k, [], {})[0]  # per kernel


def test_launch_key_passes_arrays_as_addresses() -> None:
    from ember_triton import HostMemory

    mem = HostMemory()
    a = mem.from_numpy(np.arange(8, dtype=np.float32))
    view = a.view((4,), (1,), 3)  # 12 bytes in: not 16-byte aligned
    key, raw = launch_key(object(), [a, view, _Ptr(64), 5, 2.0], {"BLOCK": 8})
    base = a.storage.ctypes.data
    assert raw == [base, base + 12, 64, 5, 2.0]
    assert key[1] == (np.dtype(np.float32), base % 16 == 0)
    assert key[2] == (np.dtype(np.float32), (base + 12) % 16 == 0)
    assert key[-1] == ("BLOCK", 8)
