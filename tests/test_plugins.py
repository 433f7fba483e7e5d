"""The plugin system as a user meets it: a broken plugin is skipped with a warning naming it,
an absent device says why, ``EMBER_PLUGINS_DISABLE`` and ``EMBER_DEVICE`` do what they say.

Plugins are installed the way pip installs them: a ``*.dist-info`` folder with an
``entry_points.txt`` on ``sys.path``.  Each scenario runs in a fresh interpreter, because
plugins load once per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import ember
from ember import DeviceSpec
from ember._device import _CACHE, REGISTRY
from ember._plugins import register_plugin

_GOOD = '''
import ember
from ember import DeviceSpec

def _factory(index):
    from ember_cpu import CpuBackend
    return CpuBackend()

@ember.hookimpl
def ember_devices_register():
    return [DeviceSpec(name="envdev", factory=_factory, indexed=False, description="test")]
'''


def _install(site: Path, dist: str, module: str, source: str) -> None:
    """Write ``module.py`` and a dist-info whose entry point names it, as pip would."""
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{dist}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[ember.plugins]\n{dist} = {module}\n")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    _install(tmp_path, "brokenplug", "brokenplug_mod",
             "raise ImportError('libfoo.so.3: cannot open shared object file')\n")
    _install(tmp_path, "goodplug", "goodplug_mod", _GOOD)
    return tmp_path


def _run(site: Path, code: str, **env: str) -> dict[str, object]:
    """Run ``code`` (which prints one JSON line last) in a fresh interpreter."""
    environ = {k: v for k, v in os.environ.items()
               if k not in ("EMBER_DEVICE", "EMBER_PLUGINS_DISABLE")}
    environ["PYTHONPATH"] = os.pathsep.join([str(site), environ.get("PYTHONPATH", "")])
    environ.update(env)
    prelude = "import json, warnings\nwarnings.simplefilter('always')\n"
    proc = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                          capture_output=True, text=True, env=environ, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    out: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


_REPORT = """
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    import ember
    rows = ember.devices()
    value = (ember.tensor([1.0, 2.0]) + 1).sum().item()
print(json.dumps({
    "warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
    "devices": [r.name for r in rows],
    "value": value,
    "default": str(ember.default_device()),
    "device_of_new_tensor": str(ember.tensor([1.0]).device),
}))
"""


def test_a_plugin_whose_import_raises_is_reported_by_name_and_ember_still_works(
        site: Path) -> None:
    out = _run(site, _REPORT)
    warned = [w for w in out["warnings"] if "brokenplug" in w]  # type: ignore[union-attr]
    assert len(warned) == 1, out["warnings"]
    assert warned[0].startswith("EmberPluginWarning")
    assert "brokenplug_mod" in warned[0] and "libfoo.so.3" in warned[0]
    assert out["value"] == 5.0
    assert {"cpu", "envdev"} <= set(out["devices"])  # type: ignore[arg-type]


def test_plugins_disable_turns_plugins_off_by_entry_point_name(site: Path) -> None:
    out = _run(site, _REPORT, EMBER_PLUGINS_DISABLE="brokenplug, goodplug")
    assert not [w for w in out["warnings"] if "plug" in w]  # type: ignore[union-attr]
    assert "envdev" not in out["devices"]  # type: ignore[operator]
    assert "cpu" in out["devices"]  # type: ignore[operator]


def test_ember_device_sets_the_default_device(site: Path) -> None:
    out = _run(site, _REPORT, EMBER_DEVICE="envdev")
    assert out["default"] == "envdev"
    assert out["device_of_new_tensor"] == "envdev"
    assert out["value"] == 5.0


def test_without_ember_device_the_default_is_cpu(site: Path) -> None:
    out = _run(site, _REPORT)
    assert out["default"] == out["device_of_new_tensor"] == "cpu"


def test_an_unknown_ember_device_is_an_error_naming_it(site: Path) -> None:
    out = _run(site, """
        import ember
        try:
            ember.tensor([1.0])
            message = ""
        except ValueError as exc:
            message = str(exc)
        print(json.dumps({"message": message}))
    """, EMBER_DEVICE="nosuchdev")
    assert "nosuchdev" in str(out["message"])


# -- availability (in-process: a hand-registered plugin, removed afterwards) ---------------------

class _AbsentHardware:
    """A backend plugin whose probe finds no hardware."""

    @ember.hookimpl
    def ember_devices_register(self) -> list[DeviceSpec]:
        def factory(index: int) -> object:
            raise AssertionError("an unavailable device must never be built")

        return [DeviceSpec(name="ghostgpu", factory=factory,
                           probe=lambda: (False, "no ghost driver found (libghost.so)"))]


@pytest.fixture
def ghost() -> Iterator[None]:
    from ember._plugins import plugin_manager

    register_plugin(_AbsentHardware(), name="ghost-test-plugin")
    yield
    plugin_manager().unregister(name="ghost-test-plugin")
    REGISTRY.devices.pop("ghostgpu", None)
    for key in [k for k in _CACHE if k.startswith("ghostgpu")]:
        del _CACHE[key]


def test_an_absent_device_is_listed_as_unavailable_with_its_reason(ghost: None) -> None:
    rows = [d for d in ember.devices() if d.name.startswith("ghostgpu")]
    assert len(rows) == 1
    assert not rows[0].available
    assert rows[0].reason == "no ghost driver found (libghost.so)"
    assert "unavailable: no ghost driver found" in str(rows[0])


def test_using_an_absent_device_raises_its_reason(ghost: None) -> None:
    with pytest.raises(ember.DeviceUnavailableError, match=r"ghostgpu.*no ghost driver found"):
        ember.device("ghostgpu")
    with pytest.raises(ember.DeviceUnavailableError, match=r"libghost\.so"):
        ember.zeros(2, device="ghostgpu:0")


def test_plugins_import_core_through_ember_backend_only() -> None:
    """``scripts/check_plugin_api.py`` finds every form of a private import, and no package
    but core (nor an example) has one: ``ember.backend`` is the whole plugin contract."""
    import importlib.util
    from pathlib import Path

    import ember.backend

    path = Path(__file__).resolve().parents[1] / "scripts" / "check_plugin_api.py"
    spec = importlib.util.spec_from_file_location("check_plugin_api", path)
    assert spec is not None and spec.loader is not None
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    source = ("import ember\nfrom ember.backend import Backend\nfrom ember._device import Device\n"
              "from ember import _dtype, ops\nimport ember._tensor as t\n"
              "def f():\n    from ember._apply import apply\n")
    assert list(check.private_imports(source)) == [
        (3, "ember._device"), (4, "ember._dtype"), (5, "ember._tensor"), (7, "ember._apply")]
    assert check.main([]) == 0
    for name in ember.backend.__all__:
        assert getattr(ember.backend, name) is not None, name


def test_plugins_read_tensors_through_the_public_contract_only() -> None:
    """``scripts/check_plugin_api.py`` flags a plugin's reads of ``Tensor._*`` (and writes to
    another object's), but not a plugin class's own ``self._dtype = ...``."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "check_plugin_api.py"
    spec = importlib.util.spec_from_file_location("check_plugin_api", path)
    assert spec is not None and spec.loader is not None
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    source = ("def f(t, d):\n    x = t._data.shape\n    t._device = d\n"
              "    return T._make(x, d, t.dtype), t.payload, t.dtype\n"
              "class C:\n    def __init__(self, d):\n        self._dtype = d\n"
              "        self._make = make\n    def g(self):\n        return self._dtype\n")
    assert list(check.private_attributes(source)) == [
        (2, "_data"), (3, "_device"), (4, "_make"), (10, "_dtype")]
