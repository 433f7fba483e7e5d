"""Device strings, the registry and availability."""

from __future__ import annotations

import pytest

import ember
from ember import DecoratorSpec, DeviceSpec
from ember._backend import Decorator
from ember._device import _CACHE, REGISTRY


def test_device_string_round_trips_and_is_interned():
    d = ember.device("cpu")
    assert str(d) == "cpu"
    assert ember.device(" cpu ") is d
    assert ember.device(d) is d


def test_malformed_device_strings_name_the_string():
    with pytest.raises(ValueError, match=r"autodiff<cpu"):
        ember.device("autodiff<cpu")
    with pytest.raises(ValueError, match="unknown device 'nosuch'"):
        ember.device("nosuch:0")


class _Passthrough(Decorator):
    """A decorator with no work of its own: every op falls through to the inner device."""

    def dispatch(self, op, args, params):
        inner = self.inner.dispatch(op, tuple(a._data for a in args), params)
        if isinstance(inner, tuple):
            return tuple(self.wrap(t) for t in inner)
        return self.wrap(inner)

    def wrap(self, inner):
        return ember.Tensor._make(inner, self.device, inner.dtype)

    def unwrap(self, tensor):
        return tensor._data


@pytest.fixture
def passthrough():
    REGISTRY.decorators["passthrough"] = DecoratorSpec("passthrough", _Passthrough)
    yield
    del REGISTRY.decorators["passthrough"]
    for key in [k for k in _CACHE if "passthrough" in k]:
        del _CACHE[key]


def test_nested_decorator_strings_round_trip(passthrough):
    d = ember.device("passthrough<passthrough<cpu>>")
    assert str(d) == "passthrough<passthrough<cpu>>"
    assert d.inner is ember.device("passthrough<cpu>")
    assert d.base is ember.device("cpu")
    x = ember.tensor([1.0, 2.0], device=d)
    assert (x * 2 + 1).tolist() == [3.0, 5.0]
    assert str((x + 1).device) == "passthrough<passthrough<cpu>>"


def test_mixing_devices_names_both(passthrough):
    from ember.testing.cases.errors import peer_device

    a = ember.tensor([1.0], device="passthrough<cpu>")
    b = ember.tensor([1.0], device=peer_device(ember.device("cpu")))  # other hardware
    with pytest.raises(ember.DeviceMismatchError,
                       match=r"add: tensors are on different devices: passthrough<cpu> and "
                             r"cpu-peer"):
        a + b


def test_a_tensor_of_the_inner_device_is_a_constant_of_the_stack(passthrough):
    a = ember.tensor([1.0, 2.0], device="passthrough<passthrough<cpu>>")
    for inner in ("cpu", "passthrough<cpu>"):
        b = ember.tensor([3.0, 4.0], device=inner)
        assert str((b * a).device) == str((a - b).device) == "passthrough<passthrough<cpu>>"
        assert (b * a - a).tolist() == [2.0, 6.0]


@pytest.fixture
def absent_device():
    REGISTRY.devices["fakegpu"] = DeviceSpec(
        "fakegpu", factory=lambda i: pytest.fail("must not be built"),
        probe=lambda: (False, "no FakeGPU driver found"), description="test device")
    yield
    del REGISTRY.devices["fakegpu"]


def test_absent_hardware_is_listed_unavailable_with_reason(absent_device):
    rows = {r.name: r for r in ember.devices()}
    assert rows["fakegpu:0"].available is False
    assert rows["fakegpu:0"].reason == "no FakeGPU driver found"
    with pytest.raises(ember.DeviceUnavailableError, match="no FakeGPU driver found"):
        ember.device("fakegpu:0")


def test_unsupported_dtype_names_device_and_dtype(absent_device):
    class Tiny(ember._backend.Backend):
        name = "tiny"
        dtypes = frozenset({ember.float32})

    REGISTRY.devices["tiny"] = DeviceSpec("tiny", factory=lambda i: Tiny(), indexed=False)
    try:
        with pytest.raises(ember.DTypeError, match=r"tiny.*float64"):
            ember.zeros(2, dtype=ember.float64, device="tiny")
    finally:
        del REGISTRY.devices["tiny"]
        _CACHE.pop("tiny", None)
