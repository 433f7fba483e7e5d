"""What a user with only some of ember's packages meets: the default device falls back from a
missing ``cpu`` to the best available device and says so once; an unknown device or decorator
names the package that provides it; the extras and version pins of the workspace agree.

Plugins are simulated by swapping the registry's tables in-process (restored afterwards), as
``test_device_strings.py`` does; the real wheel install is ``nox -s install``.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

import ember
from ember import DeviceSpec
from ember._device import _CACHE, _DEFAULT, PROVIDERS, REGISTRY, default_device

ROOT = Path(__file__).resolve().parents[2]


def _cpu_backend(index: int) -> object:
    from ember_cpu import CpuBackend

    return CpuBackend()


def _spec(name: str, priority: int, reason: str = "", indexed: bool = True) -> DeviceSpec:
    """A device family whose probe gives ``reason`` (available when it is empty)."""
    return DeviceSpec(name=name, factory=_cpu_backend, probe=lambda: (not reason, reason),
                      priority=priority, indexed=indexed, description="test device")


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, DeviceSpec]]:
    """An empty device table to fill, with no default chosen yet; everything restored after."""
    ember.devices()  # plugins loaded first, so that they cannot refill the table later
    monkeypatch.delenv("EMBER_DEVICE", raising=False)
    table: dict[str, DeviceSpec] = {}
    monkeypatch.setattr(REGISTRY, "devices", table)
    saved = list(_DEFAULT)
    _DEFAULT.clear()
    yield table
    _DEFAULT[:] = saved
    for key in [k for k in _CACHE if k.startswith("fake")]:
        del _CACHE[key]


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "ember.device"]


# -- the default device --------------------------------------------------------------------------

def test_without_cpu_the_default_is_the_available_device_of_highest_priority(
        registry: dict[str, DeviceSpec], caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_PLUGINS_DISABLE", "cpu")
    registry["fakecuda"] = _spec("fakecuda", 20, reason="no fake driver")
    registry["fakeopencl"] = _spec("fakeopencl", 5)
    registry["fakeslow"] = _spec("fakeslow", -10, indexed=False)
    with caplog.at_level(logging.WARNING, logger="ember.device"):
        assert str(default_device()) == "fakeopencl:0"
        assert str(ember.tensor([1.0, 2.0]).device) == "fakeopencl:0"
        assert (ember.tensor([1.0, 2.0]) * 3).tolist() == [3.0, 6.0]
    said = _said(caplog)
    assert len(said) == 1, said  # said once, not per tensor
    assert said[0].startswith("ember: the default device is 'fakeopencl:0' because there is no "
                              "'cpu' device (ember-backend-cpu is installed, but "
                              "EMBER_PLUGINS_DISABLE='cpu' turns its plugin 'cpu' off)")
    assert "EMBER_DEVICE" in said[0]


def test_an_unavailable_cpu_gives_way_and_its_reason_is_said(
        registry: dict[str, DeviceSpec], caplog: pytest.LogCaptureFixture) -> None:
    registry["cpu"] = _spec("cpu", 0, reason="numpy is broken", indexed=False)
    registry["fakeslow"] = _spec("fakeslow", -10, indexed=False)
    with caplog.at_level(logging.WARNING, logger="ember.device"):
        assert str(default_device()) == "fakeslow"
    assert _said(caplog) == ["ember: the default device is 'fakeslow' because the 'cpu' device "
                             "is unavailable: numpy is broken; EMBER_DEVICE chooses another"]


def test_with_cpu_available_the_default_is_cpu_whatever_else_ranks_higher(
        registry: dict[str, DeviceSpec], caplog: pytest.LogCaptureFixture) -> None:
    registry["cpu"] = _spec("cpu", 0, indexed=False)
    registry["fakecuda"] = _spec("fakecuda", 20)
    with caplog.at_level(logging.DEBUG, logger="ember.device"):
        assert str(default_device()) == "cpu"
    assert _said(caplog) == []


def test_a_fresh_interpreter_with_every_plugin_says_nothing_about_the_default() -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("EMBER_DEVICE", "EMBER_PLUGINS_DISABLE")}
    proc = subprocess.run([sys.executable, "-c", "import ember; print(ember.tensor([1.]).device)"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert (proc.stdout.strip(), proc.stderr) == ("cpu", "")


def test_with_no_usable_device_the_error_gives_every_reason(
        registry: dict[str, DeviceSpec], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_PLUGINS_DISABLE", "cpu")
    registry["fakecuda"] = _spec("fakecuda", 20, reason="no fake driver")
    with pytest.raises(ember.DeviceUnavailableError) as info:
        default_device()
    assert str(info.value) == (
        "no device can be the default device: there is no 'cpu' device (ember-backend-cpu is "
        "installed, but EMBER_PLUGINS_DISABLE='cpu' turns its plugin 'cpu' off); other "
        "devices: fakecuda (no fake driver)")
    assert not _DEFAULT  # nothing half-chosen: the next call tries again


def test_ember_device_naming_a_missing_device_is_an_error_not_a_fallback(
        registry: dict[str, DeviceSpec], monkeypatch: pytest.MonkeyPatch) -> None:
    registry["fakeopencl"] = _spec("fakeopencl", 5)
    monkeypatch.delitem(_CACHE, "cpu", raising=False)  # as in a process that never built it
    monkeypatch.setenv("EMBER_DEVICE", "cpu")
    with pytest.raises(ValueError, match=r"^unknown device 'cpu' \(known: fakeopencl\); "):
        default_device()


# -- unknown names say what to install -----------------------------------------------------------

def _not_installed(monkeypatch: pytest.MonkeyPatch, dist: str) -> None:
    real = metadata.distribution

    def distribution(name: str) -> metadata.Distribution:
        if name == dist:
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "distribution", distribution)


def test_an_unknown_decorator_names_its_package_and_the_pip_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ember.devices()
    _not_installed(monkeypatch, "ember-autodiff")
    monkeypatch.delitem(REGISTRY.decorators, "autodiff")
    monkeypatch.delitem(_CACHE, "autodiff<cpu>", raising=False)
    known = ", ".join(sorted(REGISTRY.decorators))
    with pytest.raises(ValueError) as info:
        ember.device("autodiff<cpu>")
    assert str(info.value) == (
        f"unknown decorator 'autodiff' in device 'autodiff<cpu>' (known: {known}); it is "
        "provided by ember-autodiff: pip install \"ember[autodiff]\", or from a clone: "
        "pip install -e packages/autodiff")


def test_an_unknown_device_names_its_package(monkeypatch: pytest.MonkeyPatch) -> None:
    ember.devices()
    _not_installed(monkeypatch, "ember-backend-opencl")
    monkeypatch.delitem(REGISTRY.devices, "opencl", raising=False)
    monkeypatch.delitem(_CACHE, "opencl:0", raising=False)  # built by an earlier test
    with pytest.raises(ValueError, match=r"^unknown device 'opencl' \(known: .*cpu.*\); it is "
                       r"provided by ember-backend-opencl: pip install \"ember\[opencl\]\""):
        ember.device("opencl:0")


def test_an_installed_but_unregistered_plugin_is_told_apart_from_a_missing_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ember.devices()
    monkeypatch.delitem(REGISTRY.decorators, "fusion")
    monkeypatch.delitem(_CACHE, "fusion<cpu>", raising=False)
    monkeypatch.setenv("EMBER_PLUGINS_DISABLE", "fusion")
    with pytest.raises(ValueError, match=r"; ember-fusion is installed, but "
                       r"EMBER_PLUGINS_DISABLE='fusion' turns its plugin 'fusion' off$"):
        ember.device("fusion<cpu>")
    monkeypatch.delenv("EMBER_PLUGINS_DISABLE")
    with pytest.raises(ValueError, match=r"; ember-fusion is installed, but its plugin 'fusion' "
                       r"did not register \(an EmberPluginWarning says why\)$"):
        ember.device("fusion<cpu>")


# -- Tensor.cpu() -----------------------------------------------------------------------------

def test_cpu_without_a_cpu_device_names_the_package_and_the_host_readers(
        registry: dict[str, DeviceSpec], monkeypatch: pytest.MonkeyPatch) -> None:
    _not_installed(monkeypatch, "ember-backend-cpu")
    monkeypatch.delitem(_CACHE, "cpu", raising=False)  # built by an earlier test
    registry["fakeopencl"] = _spec("fakeopencl", 5)
    x = ember.tensor([1.5, -2.0], device="fakeopencl:0")
    with pytest.raises(ValueError, match=r"^Tensor.cpu\(\): unknown device 'cpu' \(known: "
                       r"fakeopencl\); it is provided by ember-backend-cpu: pip install "
                       r"\"ember\[cpu\]\".*use .numpy\(\), .tolist\(\) or .item\(\)"):
        x.cpu()
    assert x.numpy().tolist() == x.tolist() == [1.5, -2.0]  # what the message offers works


def test_cpu_of_another_device_is_a_copy_on_cpu(registry: dict[str, DeviceSpec]) -> None:
    real = _CACHE.pop("cpu", None)
    try:
        registry["fakeopencl"] = _spec("fakeopencl", 5)
        registry["cpu"] = _spec("cpu", 0, indexed=False)
        x = ember.tensor([[1.5, -2.0]], dtype=ember.float64, device="fakeopencl:0")
        y = x.cpu()
        assert y.device is ember.device("cpu") and y.device is not x.device
        assert y.dtype is ember.float64 and y.tolist() == x.tolist()
    finally:  # the real cpu device comes back, or none if there was none
        _CACHE.pop("cpu", None)
        if real is not None:
            _CACHE["cpu"] = real


@pytest.mark.parametrize("dev", ["cpu", "autodiff<cpu>", "fusion<cpu>", "autodiff<fusion<cpu>>"])
def test_cpu_of_a_tensor_on_cpu_hardware_is_itself_and_keeps_the_graph(dev: str) -> None:
    x = ember.tensor([1.0, 3.0], device=dev, requires_grad=dev.startswith("autodiff"))
    assert x.cpu() is x
    if dev.startswith("autodiff"):
        assert ((x.cpu() ** 2).sum().backward()[x]).tolist() == [2.0, 6.0]


def test_a_name_that_is_not_embers_gets_no_install_hint() -> None:
    with pytest.raises(ValueError, match=r"^unknown device 'myfpga' \(known: [^)]*\)$"):
        ember.device("myfpga")


# -- the workspace's extras and pins -------------------------------------------------------------

def _pyprojects() -> dict[str, dict[str, object]]:
    files = [*ROOT.glob("packages/*/pyproject.toml"),
             ROOT / "examples/third-party-backend/pyproject.toml"]
    return {str(p.parent.relative_to(ROOT)): tomllib.loads(p.read_text()) for p in files}


def test_the_install_hints_match_every_pyproject() -> None:
    projects = _pyprojects()
    core = projects["packages/core"]["project"]
    extras = core["optional-dependencies"]  # type: ignore[index]
    version = core["version"]  # type: ignore[index]
    plugins_seen = set()
    for name, (dist, extra, folder, entry_point) in PROVIDERS.items():
        project = projects[folder]["project"]
        assert project["name"] == dist, name  # type: ignore[index]
        assert entry_point in project["entry-points"]["ember.plugins"], name  # type: ignore[index]
        plugins_seen.add((folder, entry_point))
        if extra is not None:
            assert f"{dist}=={version}" in extras[extra], (name, extras[extra])
    # every plugin of the workspace has its hint: a new backend cannot be forgotten here
    declared = {(folder, ep) for folder, data in projects.items()
                for ep in data["project"].get("entry-points", {}).get(  # type: ignore[attr-defined]
                    "ember.plugins", {})}
    assert declared == plugins_seen
    # and the plugin registers the names the table gives it (the names users type)
    ember.devices()
    for name, (_, _, _, entry_point) in PROVIDERS.items():
        spec = REGISTRY.devices.get(name) or REGISTRY.decorators.get(name)
        assert spec is not None and spec.plugin == entry_point, name


def test_siblings_share_one_version_and_pin_each_other_exactly() -> None:
    projects = _pyprojects()
    version = projects["packages/core"]["project"]["version"]  # type: ignore[index]
    names = {d["project"]["name"] for f, d in projects.items()  # type: ignore[index]
             if f.startswith("packages/")}
    for folder, data in projects.items():
        project: dict[str, object] = data["project"]  # type: ignore[assignment]
        if not folder.startswith("packages/"):
            continue
        assert project["version"] == version, folder
        requirements = list(project.get("dependencies", []))  # type: ignore[call-overload]
        for extra in project.get("optional-dependencies", {}).values():  # type: ignore[attr-defined]
            requirements += extra
        for req in requirements:
            dist = req.split("[")[0].split("=")[0].split(">")[0].strip()
            if dist in names and not (folder == "packages/core" and dist == "ember"):
                assert req.endswith(f"=={version}"), (folder, req)


def test_the_testing_extra_brings_pytest() -> None:
    extras = _pyprojects()["packages/core"]["project"]["optional-dependencies"]  # type: ignore[index]
    assert any(r.startswith("pytest") for r in extras["testing"])
    assert "testing" in extras["all"][0]
    # and the suite's runner really needs it (what the extra is for)
    source = (ROOT / "packages/core/src/ember/testing/__main__.py").read_text()
    assert "import pytest" in source


def test_the_conformance_suite_without_a_device_runs_on_the_default_device(
        registry: dict[str, DeviceSpec], monkeypatch: pytest.MonkeyPatch) -> None:
    from ember.testing.plugin import devices_from

    class Config:
        def getoption(self, name: str) -> list[str]:
            assert name == "ember_device"
            return []

    monkeypatch.setenv("EMBER_PLUGINS_DISABLE", "cpu")
    monkeypatch.delenv("EMBER_TEST_DEVICE", raising=False)
    registry["fakeopencl"] = _spec("fakeopencl", 5)
    assert devices_from(Config()) == ["fakeopencl:0"]  # type: ignore[arg-type]
    monkeypatch.setenv("EMBER_TEST_DEVICE", "cpu,autodiff<cpu>")
    assert devices_from(Config()) == ["cpu", "autodiff<cpu>"]  # type: ignore[arg-type]


def test_every_backend_extra_brings_autodiff_so_the_one_line_install_trains() -> None:
    extras = _pyprojects()["packages/core"]["project"]["optional-dependencies"]  # type: ignore[index]
    version = _pyprojects()["packages/core"]["project"]["version"]  # type: ignore[index]
    for extra in ("cpu", "opencl", "wgpu", "cuda", "cuda12", "cuda13", "rocm", "triton"):
        assert f"ember-autodiff=={version}" in extras[extra], (extra, extras[extra])


def test_the_suite_runner_without_pytest_names_the_extra_to_install(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    from ember.testing import __main__ as runner

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "pytest" else real(name, *a))
    assert runner.main(["--help"]) == 2
    err = capsys.readouterr().err
    assert 'pip install "ember[testing]"' in err and "pytest" in err
