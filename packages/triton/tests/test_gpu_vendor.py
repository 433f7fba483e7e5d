"""`ember_triton.gpu`, the plumbing ``ember_cuda`` and ``ember_rocm`` share, checked on the CPU
with a stand-in vendor: Triton's driver classes of the target are subclassed and answer from
CuPy, the probe counts once and names the reason, and an absent device raises it."""

from __future__ import annotations

import sys
import types
from typing import Any

import ember
import pytest

from ember_triton import gpu


class _Driver:
    def get_device_capability(self, device: int | None = None) -> tuple[int, int]:
        return (0, 0)


class _Utils:
    pass


class _Launcher:
    pass


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A Triton driver module of a made-up target, and a CuPy answering device 3."""
    mod = types.ModuleType("ember_test_triton_driver")
    for name, cls in (("FakeDriver", _Driver), ("FakeUtils", _Utils), ("FakeLauncher", _Launcher)):
        setattr(mod, name, cls)
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    runtime = types.SimpleNamespace(getDevice=lambda: 3, setDevice=lambda i: None)
    cuda = types.SimpleNamespace(
        runtime=runtime, get_current_stream=lambda: types.SimpleNamespace(ptr=0x5150),
        Device=lambda i: types.SimpleNamespace(compute_capability="90"))
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    return mod


def _vendor(capability: bool, counts: list[int] | None = None,
            library: str = "libc.so.6") -> gpu.Vendor:
    def count(lib: Any) -> tuple[int, str]:
        if counts is not None:
            counts.append(1)
        return 0, "no fake GPU"
    return gpu.Vendor(name="fake", library=library, no_library="no fake runtime",
                      count_devices=count, cupy_missing="no cupy",
                      triton_missing="no triton",
                      triton_driver=("ember_test_triton_driver", "FakeDriver", "FakeUtils",
                                     "FakeLauncher"), capability=capability)


@pytest.mark.parametrize("capability", [True, False])
def test_the_driver_subclasses_the_targets_and_answers_from_cupy(fake: Any,
                                                                 capability: bool) -> None:
    drv = gpu._make_driver(_vendor(capability))
    assert isinstance(drv, _Driver) and type(drv).__name__ == "EmberFakeDriver"
    assert isinstance(drv.utils, _Utils) and drv.launcher_cls is _Launcher
    assert drv.get_current_device() == 3 and drv.get_current_stream() == 0x5150
    assert drv.is_active()
    assert drv.get_device_capability() == ((9, 0) if capability else (0, 0))
    with pytest.raises(RuntimeError, match="does not use PyTorch"):
        drv.get_active_torch_device()


def test_probe_counts_once_and_names_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    counts: list[int] = []
    vendor = _vendor(True, counts)
    monkeypatch.setattr(gpu.importlib.util, "find_spec", lambda name: object())
    assert vendor.probe() == (False, "no fake GPU")
    assert vendor.device_count() == 1  # listed, unavailable with the reason
    assert counts == [1]
    monkeypatch.setattr(gpu.importlib.util, "find_spec",
                        lambda name: None if name == "cupy" else object())
    assert vendor.probe() == (False, "no cupy")
    with pytest.raises(ember.DeviceUnavailableError, match="device 'fake:2' is unavailable"):
        gpu.create_backend(vendor, 2)


def test_a_missing_runtime_library_is_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    counts: list[int] = []
    vendor = _vendor(True, counts, library="libember-no-such-runtime.so")
    monkeypatch.setattr(gpu.importlib.util, "find_spec", lambda name: object())
    assert vendor.probe() == (False, "no fake runtime (libember-no-such-runtime.so not found)")
    assert counts == []  # nothing to count with
