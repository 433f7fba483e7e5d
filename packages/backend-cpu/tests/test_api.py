"""The cpu backend seen through ember's public API: the plugin, dispatch and host transfer."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

ember = pytest.importorskip("ember")


def test_the_plugin_registers_an_available_cpu_device():
    rows = {d.name: d for d in ember.devices()}
    assert rows["cpu"].available and rows["cpu"].plugin == "cpu"
    assert str(ember.device("cpu")) == "cpu"
    assert type(ember.device("cpu").backend).__name__ == "CpuBackend"


def test_plugin_module_imports_nothing_heavy():
    code = ("import sys, ember_cpu.plugin; "
            "print(any(m.startswith('ember_cpu.nn') or m == 'ml_dtypes' for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_arithmetic_through_tensors():
    x = ember.tensor([[2.0, 3.0], [4.0, 5.0]])
    y = x + 1
    assert y.dtype is ember.float32 and y.tolist() == [[3.0, 4.0], [5.0, 6.0]]
    assert (x * x).sum().item() == 54.0
    assert (x @ x).tolist() == [[16.0, 21.0], [28.0, 37.0]]
    assert (x > 3).tolist() == [[False, False], [True, True]]
    assert (ember.tensor([-7, 7]) % ember.tensor([2, -2])).tolist() == [1, -1]


def test_numpy_returns_a_copy_that_cannot_change_the_tensor():
    x = ember.tensor([1.0, 2.0])
    host = x.numpy()
    host[0] = 100.0
    assert x.tolist() == [1.0, 2.0]


def test_views_share_memory_but_values_stay_immutable():
    x = ember.tensor(np.arange(6.0).reshape(2, 3))
    t = x.permute(1, 0)
    assert t.shape == (3, 2) and t.tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    assert np.shares_memory(t.payload, x.payload)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "int8", "int16",
                                   "int32", "int64", "uint8", "bool"])
def test_every_dtype_round_trips_through_the_device(dtype):
    d = getattr(ember, dtype if dtype != "bool" else "bool_")
    x = ember.tensor([0, 1, 1], dtype=d)
    assert x.dtype is d and ember.device("cpu").supports(d)
    assert x.numpy().astype(np.float64).tolist() == [0.0, 1.0, 1.0]


def test_seeded_generators_repeat_on_cpu():
    a = ember.randn(4, generator=ember.Generator(3)).tolist()
    b = ember.randn(4, generator=ember.Generator(3)).tolist()
    c = ember.randn(4, generator=ember.Generator(4)).tolist()
    assert a == b and a != c


def test_sort_and_max_pool_return_two_tensors():
    values, idx = ember.tensor([3.0, 1.0, 2.0]).sort()
    assert values.tolist() == [1.0, 2.0, 3.0] and idx.tolist() == [1, 2, 0]
    assert idx.dtype is ember.int64


def test_dlpack_exchange_shares_memory_with_numpy():
    src = np.arange(4.0)
    t = ember.from_dlpack(src)
    assert np.shares_memory(t.payload, src)
    back = np.from_dlpack(t)
    assert back.tolist() == [0.0, 1.0, 2.0, 3.0] and np.shares_memory(back, src)
    wide = ember.tensor([1.0, 2.0]).reshape(1, 2).expand(3, 2)  # a read-only view
    assert np.from_dlpack(wide).tolist() == [[1.0, 2.0]] * 3
